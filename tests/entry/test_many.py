"""Several runs from one command (orch.entry.many): readable unique names, every clash refused before anything
is made, and the worst exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.entry.many import Planned, labels, plan, slug, worst
from orch.errors import UsageError
from orch.exitcodes import Exit

pytestmark = pytest.mark.pure


def _repos(tmp_path: Path, *names: str) -> list[Path]:
    made = []
    for name in names:
        (tmp_path / name).mkdir(parents=True)
        made.append(tmp_path / name)
    return made


def test_one_spec_over_several_repositories_is_a_run_each_named_for_both(tmp_path: Path) -> None:
    repos = _repos(tmp_path, "shop", "blog")
    made = plan([(Path("audit.yaml"), "audit")], repos)
    assert made == [
        Planned(Path("audit.yaml"), repos[0].resolve(), "audit-shop"),
        Planned(Path("audit.yaml"), repos[1].resolve(), "audit-blog"),
    ]
    assert [p.name for p in plan([(Path("audit.yaml"), "audit")], repos, "nightly")] == ["nightly-shop", "nightly-blog"]


def test_several_specs_each_a_run_and_over_repositories_a_run_per_pair(tmp_path: Path) -> None:
    specs = [(Path("a.yaml"), "a"), (Path("b.yaml"), "b")]
    assert [p.name for p in plan(specs, [])] == ["a", "b"]
    assert [p.name for p in plan(specs, [], "n")] == ["n-a", "n-b"]
    repos = _repos(tmp_path, "x", "y")
    assert [p.name for p in plan(specs, repos)] == ["a-x", "a-y", "b-x", "b-y"]


def test_repositories_of_one_folder_name_are_told_apart_by_their_parents(tmp_path: Path) -> None:
    repos = _repos(tmp_path, "team1/app", "team2/app", "web")
    assert [p.name for p in plan([(Path("s.yaml"), "s")], repos)] == ["s-team1-app", "s-team2-app", "s-web"]
    assert labels([Path("/a/spec.yaml"), Path("/b/spec.yaml")], lambda p: p.stem) == ["a-spec", "b-spec"]


def test_a_hostile_folder_name_becomes_a_plain_name_never_a_command_or_a_path(tmp_path: Path) -> None:
    repos = _repos(tmp_path, "$(reboot); rm -rf ~", "..hidden", "naïve café")
    names = [p.name for p in plan([(Path("s.yaml"), "s")], repos)]
    assert names == ["s-reboot-rm-rf", "s-hidden", "s-na-ve-caf"]
    assert slug("../../etc/passwd") == "etc-passwd" and slug("a..b") == "a-b" and slug("audit.v2") == "audit-v2"
    long = _repos(tmp_path, "r" * 80)
    assert [p.name for p in plan([(Path("s.yaml"), "s")], long)] == ["s-" + "r" * 46]


@pytest.mark.parametrize(
    ("specs", "repos", "name", "message"),
    [
        ([("a.yaml", "a")], ["missing"], None, "--repo {tmp}/missing: no such folder"),
        ([("a.yaml", "a")], ["x", "x"], None, "--repo {tmp}/x is given 2 times"),
        ([("a.yaml", "a"), ("a.yaml", "a")], [], None, "spec {cwd}/a.yaml is given 2 times"),
        ([("a.yaml", "same"), ("b.yaml", "same")], ["x"], None, "a.yaml over {tmp}/x and b.yaml over {tmp}/x would"),
        ([("a.yaml", "a"), ("b.yaml", "a-b")], ["x", "b-x"], None, "would both be run 'a-b-x'"),
        ([("a.yaml", "a")], ["x"], "bad name", "invalid run name 'bad name'"),
    ],
    ids=["missing-repo", "repo-twice", "spec-twice", "same-spec-name", "derived-clash", "bad-name"],
)
def test_bad_input_is_one_line_naming_the_problem(
    tmp_path: Path, specs: list[tuple[str, str]], repos: list[str], name: str | None, message: str
) -> None:
    _repos(tmp_path, "x", "b-x")
    with pytest.raises(UsageError) as raised:
        plan([(Path(s), n) for s, n in specs], [tmp_path / r for r in repos], name)
    text = raised.value.one_line()
    assert message.format(tmp=tmp_path, cwd=Path.cwd()) in text and "\n" not in text


def test_several_runs_exit_with_the_worst_code() -> None:
    assert worst([Exit.PASSED, Exit.PASSED]) == 0
    assert worst([Exit.PASSED, Exit.FINDINGS, Exit.PASSED]) == Exit.FINDINGS
    assert worst([Exit.FINDINGS, Exit.INCOMPLETE]) == Exit.INCOMPLETE
    assert worst([Exit.INCOMPLETE, Exit.FAILED, Exit.FINDINGS]) == Exit.FAILED
    assert worst([Exit.FAILED, Exit.INTERRUPTED]) == Exit.INTERRUPTED
