"""`orch run SPEC... --repo PATH ...` (orch.cli.many) on one machine: a run per spec and repository, one after
another, each on its own repository, the worst code and one JSON line; bad input is one line and nothing is made.
(Side by side on a swarm: tests/backends/swarm/test_sandbox_many.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.report.summary import RunsSummary
from orch.run.folder import RunFolder
from orch.run.paths import runs_dir
from tests.helpers import orch

SPEC = """\
workdir: .
offline: true
agent: scripted
workers: 2
verification: {verifiers_per_finding: 1}
timeouts: {boot: 60, job: 60, run: 120}
tasks:
  - id: look
    role: finder
    goal: Look around.
    offline_script:
      - {write: "{{findings_file}}", content: '{"job": "{{job}}", "findings": []}'}
      - {bash: "ls > {{result_file}}"}
      - {bash: "touch {{done_file}}"}
      - {reply: "Finished."}
"""


def _spec(tmp_path: Path, name: str = "audit", extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC + extra)
    return path


def _repos(tmp_path: Path, *names: str) -> list[Path]:
    made = []
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(f"the {name} repository\n")
        made.append(tmp_path / name)
    return made


def test_one_spec_over_two_repositories_runs_one_after_another_on_each(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    shop, blog = _repos(tmp_path, "shop", "blog")
    result = orch("run", spec, "--repo", shop, "--repo", blog, "--local", "--json")
    assert result.exit_code == 0, result.output
    line = [text for text in result.stdout.splitlines() if text.startswith("{")]
    summary = RunsSummary.model_validate(json.loads(line[-1]))
    assert [(r.run, r.status, r.where) for r in summary.runs] == [
        ("audit-shop", "passed", "local"),
        ("audit-blog", "passed", "local"),
    ]
    for name, repo in (("audit-shop", shop), ("audit-blog", blog)):
        run = RunFolder.for_name(name)
        assert run.info().workdir == str(repo.resolve())  # each run on its own repository, not the spec's workdir
        assert f"{repo.name}.txt" in (run.root / "jobs" / "look.result.md").read_text()
    said = result.stderr.splitlines()  # --json: the progress lines on stderr, the JSON alone on stdout
    assert said[0] == "2 runs on the local backend, one after another: audit-shop, audit-blog"
    assert said.index("run audit-shop: started (local)") < said.index("run audit-blog: started (local)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{spec}", "--repo", "{tmp}/nope"], "--repo {tmp}/nope: no such folder"),
        (["{spec}", "{spec}"], "spec {spec} is given 2 times"),
        (["{spec}", "{bad}"], "bad.yaml: bogus: unknown key"),
        (["{spec}", "--repo", "{tmp}/shop", "--name", "../x"], "invalid run name '../x'"),
        (["{spec}", "--repo", "{tmp}/shop", "--replay", "x"], "--replay and --prepare are for one run"),
        (["--resume", "a", "b"], "--resume continues one run"),
        (["{spec}", "--repo", "{tmp}/shop", "--constraint", "node.role==worker"], "run audit-shop ({spec} over"),
    ],
    ids=["missing-repo", "spec-twice", "bad-spec", "bad-name", "replay", "resume-two", "local-placement"],
)
def test_bad_input_is_one_line_and_nothing_is_made(tmp_path: Path, args: list[str], message: str) -> None:
    spec, bad = _spec(tmp_path), _spec(tmp_path, "bad", "bogus: 1\n")
    _repos(tmp_path, "shop")
    given = [a.format(spec=spec, bad=bad, tmp=tmp_path) for a in args]
    result = orch("run", *given, "--local")
    assert result.exit_code == 2, result.output
    assert message.format(spec=spec, tmp=tmp_path) in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not runs_dir().exists() or not any(runs_dir().iterdir())


def test_a_run_of_a_derived_name_that_exists_is_refused_before_any_is_made(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    shop, blog = _repos(tmp_path, "shop", "blog")
    assert orch("run", spec, "--repo", blog, "--local", "--quiet").exit_code == 0
    before = sorted(p.name for p in runs_dir().iterdir())
    result = orch("run", spec, "--repo", shop, "--repo", blog, "--local")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"orch: error: run audit-blog ({spec} over {blog}): run 'audit-blog' already exists "
        "(hint: use --replace, or `orch kill audit-blog`)"
    )
    assert sorted(p.name for p in runs_dir().iterdir()) == before == ["audit-blog"]  # audit-shop was not made
