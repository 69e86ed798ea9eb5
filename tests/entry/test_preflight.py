"""`orch spec check` makes exactly the checks `orch run` makes before it starts (orch.entry.preflight): the same
refusal, in the same line, for each thing `orch run` refuses, and nothing made; an ok names what would run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from orch.run.paths import runs_dir
from orch.spec.model import example_spec
from tests.helpers import orch, stand_in_binaries
from tests.lead.changes.gitfix import ugit, user_repo


def example(folder: Path, git: bool) -> Path:
    """`orch spec init`'s example in `folder` (a git repository with it committed, when `git`)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "fleet.yaml"
    assert orch("spec", "init", spec).exit_code == 0
    if git:
        user_repo(folder, {"src/parser.py": "def parse(text):\n    return text\n"})
    return spec


def _empty_folder(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return example(tmp / "empty", git=False)  # the example has a scribe: a writer needs a commit


def _dirty_tree(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    spec = example(tmp / "dirty", git=True)
    (tmp / "dirty" / "src" / "parser.py").write_text("changed\n")
    return spec


def _no_agent(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(tmp / "no-such-claude"))
    return example(tmp / "repo", git=True)


def _no_bubblewrap(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_BWRAP", str(tmp / "no-such-bwrap"))
    return example(tmp / "repo", git=True)


def _missing_check(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    spec = example(tmp / "repo", git=True)
    spec.write_text(spec.read_text() + "checks:\n  - no-such-command-anywhere\n")
    ugit(tmp / "repo", "commit", "-qam", "a check")
    return spec


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (_empty_folder, "is not in a git repository"),
        (_dirty_tree, "uncommitted change"),
        (_no_agent, "Claude Code is not installed"),
        (_no_bubblewrap, "needs bubblewrap"),
        (_missing_check, "no-such-command-anywhere"),
    ],
    ids=["outside-git", "dirty-tree", "no-agent", "no-bubblewrap", "missing-check"],
)
def test_spec_check_refuses_what_orch_run_refuses_in_the_same_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Callable[[Path, pytest.MonkeyPatch], Path], words: str
) -> None:
    if setup is not _no_agent:
        stand_in_binaries(monkeypatch)
    spec = setup(tmp_path, monkeypatch)
    checked = orch("spec", "check", spec, "--local")
    ran = orch("run", spec, "--local")
    assert checked.exit_code == ran.exit_code == 2, (checked.output, ran.output)
    refusal = checked.output.strip().splitlines()[-1]
    assert refusal.startswith("orch: error:") and words in refusal, checked.output
    assert ran.output.strip().splitlines() == [refusal]  # nothing said before it: nothing started
    assert not runs_dir().exists() or not any(runs_dir().iterdir())  # nothing made, no staging left


def test_an_ok_names_the_workers_tasks_writers_checks_budget_and_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_binaries(monkeypatch)
    spec = example(tmp_path / "repo", git=True)
    text = spec.read_text().replace("# checks:\n#   - python3 -m pytest -q", "checks:\n  - test -f src/parser.py")
    assert text != spec.read_text()
    spec.write_text(text)
    ugit(tmp_path / "repo", "commit", "-qam", "a check")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for name in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no login file either
    unkeyed = orch("spec", "check", spec, "--local")
    assert unkeyed.exit_code == 0 and unkeyed.output.startswith("orch: warning: no credential for the model API")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    result = orch("spec", "check", spec, "--local")
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"{spec}: ok: 3 claude worker(s); tasks: 1 finder (parser), 1 scribe (summary); find-verify, 2 verifier(s) "
        "per finding; 1 check(s) (ran on the base: passed); budget $20.00; local, strict isolation\n"
    )
    assert not list(runs_dir().glob("*"))  # the run's repository was made to check, and removed


def test_the_example_is_what_spec_init_writes_after_its_schema_line(tmp_path: Path) -> None:
    spec = example(tmp_path, git=False)
    first, rest = spec.read_text().split("\n", 1)
    assert first.startswith("# yaml-language-server: $schema=") and rest == example_spec()
    assert Path(first.split("$schema=", 1)[1]).is_file()
    assert "max_cost_usd: 20" in example_spec()  # a first live run has a cost cap


def test_checks_whose_sandbox_cannot_be_made_are_refused_saying_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap without user namespaces: `orch run` stops before anything exists, naming the sandbox and the fix,
    rather than warning that the base's checks fail (as if the project's tests did)."""
    stand_in_binaries(monkeypatch)
    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\necho "bwrap: setting up uid map: Permission denied" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_BWRAP", str(fake))
    spec = example(tmp_path / "repo", git=True)
    text = spec.read_text().replace("verification:\n", "verification:\n  isolation: shared\n", 1)
    spec.write_text(text + "checks:\n  - 'true'\n")  # shared workers: only the checks need the sandbox
    ugit(tmp_path / "repo", "commit", "-qam", "a check")
    for result in (orch("spec", "check", spec, "--local"), orch("run", spec, "--local")):
        assert result.exit_code == 2, result.output
        refusal = result.output.strip().splitlines()[-1]
        assert refusal.startswith("orch: error: the checks' sandbox cannot be made"), result.output
        assert "could not make its namespaces" in refusal and "unprivileged user namespaces" in refusal
        assert "fails on the base" not in result.output
    assert not runs_dir().exists() or not any(runs_dir().iterdir())


def test_compose_leads_open_egress_with_checks_is_refused_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compose's `lead` with ORCH_EGRESS=open and a spec whose changes are checked: the init's first step (`orch
    spec check SPEC --prepare`, before it removes a previous run or makes this one) refuses it in one line,
    not the controller once the container is confined and the run folder made."""
    stand_in_binaries(monkeypatch)
    spec = example(tmp_path / "repo", git=True)
    spec.write_text(spec.read_text() + "checks:\n  - 'true'\n")
    ugit(tmp_path / "repo", "commit", "-qam", "a check")
    monkeypatch.setenv("ORCH_EGRESS", "open")
    refused = orch("spec", "check", spec, "--prepare")
    assert refused.exit_code == 2, refused.output
    (line,) = refused.output.strip().splitlines()
    assert line.startswith("orch: error: the container's firewall does not cut the checks' uid off the network")
    assert not runs_dir().exists() or not any(runs_dir().iterdir())
    monkeypatch.setenv("ORCH_EGRESS", "none")  # the firewall cuts the checks' uid off: that is not refused
    cut_off = orch("spec", "check", spec, "--prepare")
    assert cut_off.exit_code == 0 and ": ok: " in cut_off.output, cut_off.output
