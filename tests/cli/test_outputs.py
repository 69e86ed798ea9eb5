"""Every `--json` output's shape, one place (orch/cli/outputs.py): each versioned, each command has the option,
docs/outputs.md is made from the models and current; `orch doctor --json` and a stopped run's `orch status`,
`orch ls` and `orch read` print documents their models read back (the demo's:
tests/scenarios/test_scripted_demo.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orch.cli import outputs
from orch.cli.outputs import DoctorOutput, LsOutput, SpecCheckOutput, StatusOutput, document
from orch.run.folder import RunFolder
from orch.run.records import RunStatus
from tests.helpers import demo_spec, orch, run_info, stand_in_binaries

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.pure
def test_docs_outputs_md_is_made_from_the_models() -> None:
    page = (REPO / "docs" / "outputs.md").read_text()
    assert page.split(outputs.BEGIN, 1)[1].lstrip("\n") == document(), "run `python -m orch.cli.outputs`"
    for command in outputs.outputs():
        assert f"`{command}`" in page


@pytest.mark.pure
def test_each_output_has_a_schema_version_and_its_command_the_option() -> None:
    for command, model in outputs.outputs().items():
        assert isinstance(model.model_fields["schema_version"].default, int), command
        words = [w for w in command.split()[1:] if re.fullmatch(r"[a-z-]+", w) and w != "--json"]
        shown = orch(*words, "--help").output
        assert "--json" in shown, command


def test_doctor_json_says_each_check_and_whether_all_that_must_pass_did(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_binaries(monkeypatch)
    result = orch("doctor", "--json")
    shown = DoctorOutput.model_validate_json(result.output)
    assert {c.name for c in shown.checks} >= {"tmux", "bubblewrap"}
    assert result.exit_code == (0 if shown.ok else 1)
    assert shown.ok == all(c.ok or c.optional for c in shown.checks)


def test_a_stopped_run_reads_from_its_folder_in_every_output(tmp_path: Path) -> None:
    """No tmux server was ever started for this run: a stopped one is never asked for."""
    run = RunFolder.for_name("gone")
    run.create(run_info("gone", workers=1, workdir=str(tmp_path)))
    info = run.info()
    info.status = RunStatus.STOPPED
    run.write_info(info)
    run.log(1).write_bytes(b"hello \x1b[1mworld\x1b[0m\r\n\x1b[31mbye\x1b[0m\r\n")
    (view,) = StatusOutput.model_validate_json(orch("status", "gone", "--json").output).runs
    assert view.status is RunStatus.STOPPED and not view.alive
    assert view.workers[0].detail == "booting when the run ended"  # its final state, never "tmux server not running"
    (row,) = LsOutput.model_validate_json(orch("ls", "--json").output).runs
    assert (row.name, row.status, row.outcome) == ("gone", RunStatus.STOPPED, None)
    read = orch("read", "gone", "1")
    assert read.exit_code == 0 and read.output == "hello world\nbye\n"


def test_spec_check_json_says_ok_problems_or_the_refusal(tmp_path: Path) -> None:
    spec = demo_spec(tmp_path, "scripted")
    checked = orch("spec", "check", spec, "--local", "--json")
    ok = SpecCheckOutput.model_validate_json(checked.output)
    assert checked.exit_code == 0 and ok.ok and ok.run == "demo" and ok.summary and "2 finder" in ok.summary
    RunFolder.for_name("taken").create(run_info("taken"))
    refused = orch("spec", "check", spec, "--local", "--name", "taken", "--json")
    said = SpecCheckOutput.model_validate_json(refused.output)
    assert refused.exit_code == 2 and not said.ok and said.refused and "already exists" in said.refused
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: []\nworkerz: 3\n")
    broken = orch("spec", "check", bad, "--json")
    problems = SpecCheckOutput.model_validate_json(broken.output).problems
    assert broken.exit_code == 2 and any("workerz" in p for p in problems) and any("tasks" in p for p in problems)
