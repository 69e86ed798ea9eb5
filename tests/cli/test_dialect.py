"""One dialect (orch.cli.commands and the groups): `orch --version`, shell completion, usage errors in orch's one
line, and each flag with one meaning on every command, its old spellings still working with a line saying the
new one (docs/fleet.md: "The flags, one meaning each")."""

from __future__ import annotations

import pytest

from orch import __version__
from orch.cli.commands import app
from tests.helpers import orch, runner

pytestmark = pytest.mark.pure  # starts nothing


def test_version() -> None:
    result = orch("--version")
    assert result.exit_code == 0 and result.output == f"orch {__version__}\n"


def test_shell_completion_is_on() -> None:
    assert "_orch_completion" in runner.invoke(app, ["--show-completion", "bash"], prog_name="orch").output
    # The lazy root completes commands it has not imported, and a command's options once it has.
    for words, expected in (("orch sp", ["spawn", "spec"]), ("orch up --wo", ["--workers", "--workdir"])):
        env = {"_ORCH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(words.count(" "))}
        assert runner.invoke(app, [], env=env, prog_name="orch").output.split() == expected


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["up"], "orch up: missing argument 'name' (hint: `orch up --help` lists its arguments)"),
        (["up", "x", "-n", "abc"], "orch up: invalid value for '--workers' / '-n'"),
        (["bus", "tail", "x", "--frobnicate"], "orch bus tail: no such option: --frobnicate"),
        (["nosuch"], "orch: no such command 'nosuch' (hint: `orch --help` lists its commands)"),
    ],
    ids=["missing-argument", "bad-value", "unknown-option", "unknown-command"],
)
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    result = orch(*args)
    assert result.exit_code == 2
    assert result.output.startswith(f"orch: error: {said}") and result.output.count("\n") == 1, result.output


@pytest.mark.parametrize(
    ("args", "old", "then"),
    [
        (["bus", "tail", "ghost", "-n", "5"], "`orch bus tail -n N`", "no run named 'ghost'"),
        (["wait", "ghost", "--workers", "1"], "`orch wait --workers 1,3`", "no run named 'ghost'"),
        (["send", "ghost", "1", "-f", "notes.md"], "`orch send -f FILE`", "no run named 'ghost'"),
        (["image", "build", "--base", "x", "--agents", "nosuch"], "`orch image build --base IMAGE`", "nosuch"),
    ],
    ids=["tail-n", "wait-workers", "send-f", "image-base"],
)
def test_an_old_spelling_still_works_and_names_the_new_one(args: list[str], old: str, then: str) -> None:
    result = orch(*args)
    warning, error = result.output.splitlines()
    assert warning.startswith(f"orch: warning: {old} is an old spelling: use ")
    assert error.startswith("orch: error:") and then in error


def test_offline_and_live_are_one_flag() -> None:
    """`--offline` / `--live` mean the same on `orch up` and `orch demo` (their defaults differ: a demo is
    offline unless asked)."""
    for command in ("up", "demo"):
        assert "--offline" in orch(command, "--help").output and "--live" in orch(command, "--help").output


def test_resume_is_a_flag_on_run_and_up_and_the_old_order_still_reads() -> None:
    for args in (["run", "--resume", "ghost"], ["run", "ghost", "--resume"], ["up", "ghost", "--resume"]):
        result = orch(*args)
        assert result.exit_code == 2 and "no run named 'ghost'" in result.output, (args, result.output)


def test_demo_says_its_own_exit_codes() -> None:
    text = " ".join(orch("demo", "--help").output.split())
    assert (
        "0 the demo came out as designed (its run passed: one finding CONFIRMED, the false positive REFUTED); "
        "1 its run passed but the verdicts were not the demo's; otherwise its run's code: 0 passed" in text
    )
    assert "REFUTED or stayed UNVERIFIED" not in text  # `orch run`'s table is `orch run --help`'s
