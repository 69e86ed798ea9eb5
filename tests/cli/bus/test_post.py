"""`orch bus post` without typer (orch.cli.main's fast path) answers exactly as the typer command does.

Each case runs twice on the same run folder: as a real process through orch.cli.main (the `orch`
script), and through the typer app alone (in this process). Exit code, stdout, stderr and the line posted must agree,
and the fast path must really have been taken where it should (typer never imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orch.cli.commands import app
from orch.run import bus
from orch.run.bus import MAX_TEXT
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo
from tests.helpers import run_info

MAIN = "from orch.cli.main import main; main()"
REFERENCE = CliRunner()
# Records what the process imported, to tell the fast path from a fall-back to typer.
PROBE = (
    "import os, sys\n"
    "try:\n"
    f"    {MAIN}\n"
    "finally:\n"
    "    open(os.environ['ORCH_TEST_MODULES'], 'w').write('\\n'.join(sys.modules))\n"
)
HEAVY = ("typer", "jinja2", "docker", "orch.fleet", "orch.fleet.tmux")
HERE = ("orch.contracts", "orch.waits")
"""Not needed either for a run folder on this machine (a worker's every post): each was a tenth of its start."""


@pytest.fixture(autouse=True)
def runs(tmp_path: Path) -> None:
    RunFolder.for_name("r").create(run_info("r", workers=2))
    # A container run as seen from inside its container: the workers' own case.
    RunFolder.for_name("boxed").create(
        run_info("boxed", workers=2, container=ContainerInfo(name="orch-boxed", image="i", host_run_dir="/x"))
    )
    # A run whose folder lives on a remote engine that does not answer: posting must go there, and fail.
    far = ContainerInfo(
        name="orch-far", image="i", host_run_dir="v", on_remote_engine=True, docker_host="unix:///nonexistent.sock"
    )
    RunFolder.for_name("far").create(run_info("far", workers=2, container=far))
    broken = RunFolder.for_name("broken")
    broken.create(run_info("broken", workers=2))
    broken.run_json.write_text('{"name": "broken"}')


def _run(code: str, args: list[str], env: dict[str, str], stdin: bytes) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", code, "bus", "post", *args], capture_output=True, input=stdin, env=env, timeout=120
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


RUNS = ("r", "boxed", "far", "broken")


def _bus_lengths() -> list[int]:
    return [len(bus.read_lines(RunFolder.for_name(name))) for name in RUNS]


def _new_lines(before: list[int]) -> list[tuple[str, str]]:
    """Sender and text of the lines posted to any run since `before` (timestamps differ between runs)."""
    new = [raw for name, n in zip(RUNS, before, strict=True) for raw in bus.read_lines(RunFolder.for_name(name))[n:]]
    return [(p.sender, p.text) if (p := bus.parse_line(raw)) else ("?", raw) for raw in new]


GOOD = [
    (["r", "--as", "1", "hello", "world"], "r", [("W1", "hello world")]),
    (["r", "from", "the", "lead"], "r", [("lead", "from the lead")]),
    (["r", "--as=2", "x"], "r", [("W2", "x")]),
    (["r", "a", "--as", "2", "b"], "r", [("W2", "a b")]),
    (["r", "--as", "1", "--as", "2", "last --as wins"], "r", [("W2", "last --as wins")]),
    (["r", "--as", "02", "leading zero"], "r", [("W2", "leading zero")]),
    (["r", "--", "--as", "3", "-x", "--help"], "r", [("lead", "--as 3 -x --help")]),
    (["r", "a", "-"], "r", [("lead", "a -")]),  # `-` among other words is text, not stdin
    (["r", "--as", "1", "multi\nline"], "r", [("W1", "multi\\nline")]),
    (["boxed", "--as", "2", "from inside"], "boxed", [("W2", "from inside")]),
]
BAD = [
    (["r", "--as", "3", "x"], "out of range"),
    (["r", "--as", "0", "x"], "out of range"),
    (["r", "--as", "0003", "x"], "out of range"),
    (["ghost", "x"], "no run named 'ghost'"),
    (["bad name", "x"], "invalid run name"),
    (["../r", "x"], "invalid run name"),
    (["", "x"], "invalid run name"),
    (["r", "   "], "empty bus message"),
    (["r", ""], "empty bus message"),
    (["r", "x" * (MAX_TEXT + 1)], f"{MAX_TEXT + 1} characters"),
    (["broken", "x"], "is malformed"),
    (["r", os.fsdecode(b"caf\xe9")], "bus message is not UTF-8 text (byte 3)"),  # argv bytes, not UTF-8
    (["far", "--as", "1", "x"], "Docker engine not reachable at unix:///nonexistent.sock"),
]
# Left to typer (click's own usage messages): the fast path must step aside, and the answers still agree.
TYPER_ONLY = [
    (["--help"], 0),
    (["r", "--help"], 0),
    ([], 2),
    (["r"], 2),
    (["r", "--as"], 2),
    (["r", "--as", "x", "y"], 2),
    (["r", "--as", "-1", "y"], 2),
    (["r", "--as", "+1", "y"], None),
    (["r", "--as", "\u0663", "y"], None),  # ARABIC-INDIC DIGIT THREE: int() takes it, the fast path does not
    (["r", "--as=", "y"], 2),
    (["r", "x", "--nope"], 2),
    (["r", "-5"], 2),
]


Answer = tuple[int, str, str, list[tuple[str, str]]]
"""Exit code, stdout, stderr and the lines posted."""


def _both(
    args: list[str], tmp_path: Path, in_container: bool = False, stdin: bytes = b""
) -> tuple[Answer, Answer, set[str]]:
    """Run ARGS through main and through typer: (code, out, err, lines) of each, and main's modules."""
    modules = tmp_path / "modules.txt"
    env = {**os.environ, "ORCH_TEST_MODULES": str(modules), "COLUMNS": "100"}
    env["ORCH_IN_CONTAINER"] = "1" if in_container else ""
    before = _bus_lengths()
    fast = (*_run(PROBE, args, env, stdin), _new_lines(before))
    # The reference: the typer command itself, in this process (a real process of it would load every
    # command group again for each case: most of this file's CPU time, for the same answer).
    before = _bus_lengths()
    done = REFERENCE.invoke(app, ["bus", "post", *args], input=stdin, env=env, prog_name="-c")
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    slow = (done.exit_code, done.stdout, done.stderr, _new_lines(before))
    return fast, slow, set(modules.read_text().splitlines())


@pytest.mark.parametrize(("args", "name", "posted"), GOOD, ids=[" ".join(a)[:40] for a, _, _ in GOOD])
def test_good_posts_agree_and_skip_typer(
    args: list[str], name: str, posted: list[tuple[str, str]], tmp_path: Path
) -> None:
    fast, slow, modules = _both(args, tmp_path, in_container=name == "boxed")
    assert fast == slow == (0, "", "", posted)
    assert not modules.intersection(HEAVY + HERE), "the fast path imported " + ", ".join(modules.intersection(HEAVY))


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_agrees_one_line_and_exit_code(args: list[str], message: str, tmp_path: Path) -> None:
    fast, slow, modules = _both(args, tmp_path)
    assert fast == slow, f"fast path {fast} != typer {slow}"
    code, out, err, posted = fast
    assert (code, out, posted) == (2, "", [])
    assert err.startswith("orch: error: ") and message in err and err.count("\n") == 1, err
    assert "typer" not in modules


@pytest.mark.parametrize(("args", "expected_code"), TYPER_ONLY, ids=[" ".join(a)[:40] or "none" for a, _ in TYPER_ONLY])
def test_usage_errors_and_help_are_typers(args: list[str], expected_code: int | None, tmp_path: Path) -> None:
    fast, slow, modules = _both(args, tmp_path)
    assert fast == slow, f"main {fast} != typer {slow}"
    assert "typer" in modules, "the fast path took a command line it should leave to typer"
    if expected_code is not None:
        assert fast[0] == expected_code, fast
    if "--help" in args:
        assert "Usage:" in str(fast[1]) and "--as" in str(fast[1])


# `-` alone as the TEXT: the message is standard input's (as `orch send --file -`), read by both paths alike.
STDIN_GOOD = [
    (["r", "-"], b"from stdin\n", "r", [("lead", "from stdin")]),  # echo's newline is not part of it
    (["r", "--as", "1", "-"], b"two\nlines\n\n", "r", [("W1", "two\\nlines")]),
    (["r", "--", "-"], b"after --", "r", [("lead", "after --")]),  # `--` ends options; `-` still means stdin
    (["r", "-"], b"-", "r", [("lead", "-")]),
    (["boxed", "--as", "2", "-"], "caf\u00e9".encode(), "boxed", [("W2", "caf\u00e9")]),
]
STDIN_BAD = [
    (["r", "-"], b"", "empty bus message"),
    (["r", "--as", "1", "-"], b" \n\n", "empty bus message"),
    (["r", "-"], b"caf\xe9", "standard input is not UTF-8 text (byte 3)"),
    (["r", "-"], b"a\x00b", "standard input looks binary"),
    (["r", "-"], b"x" * (MAX_TEXT + 1), f"{MAX_TEXT + 1} characters"),
    (["r", "--as", "3", "-"], b"x", "out of range"),
    (["far", "-"], b"x", "Docker engine not reachable at unix:///nonexistent.sock"),
]


@pytest.mark.parametrize(
    ("args", "stdin", "name", "posted"), STDIN_GOOD, ids=[" ".join(a) + f" <{s[:10]!r}" for a, s, _, _ in STDIN_GOOD]
)
def test_dash_posts_stdin_on_both_paths(
    args: list[str], stdin: bytes, name: str, posted: list[tuple[str, str]], tmp_path: Path
) -> None:
    fast, slow, modules = _both(args, tmp_path, in_container=name == "boxed", stdin=stdin)
    assert fast == slow == (0, "", "", posted)
    assert not modules.intersection(HEAVY), "the fast path imported " + ", ".join(modules.intersection(HEAVY))


@pytest.mark.parametrize(
    ("args", "stdin", "message"), STDIN_BAD, ids=[" ".join(a) + f" <{s[:10]!r}" for a, s, _ in STDIN_BAD]
)
def test_bad_stdin_agrees_one_line_and_posts_nothing(
    args: list[str], stdin: bytes, message: str, tmp_path: Path
) -> None:
    fast, slow, modules = _both(args, tmp_path, stdin=stdin)
    assert fast == slow, f"fast path {fast} != typer {slow}"
    code, out, err, posted = fast
    assert (code, out, posted) == (2, "", [])
    assert err.startswith("orch: error: ") and message in err and err.count("\n") == 1, err
    assert "typer" not in modules


def test_help_imports_no_command_module() -> None:
    """`orch --help` and a bad command name import none of the commands' modules (the reason for the table)."""
    probe = (
        "import sys\nfrom orch.cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({e.module for e in __import__('orch.cli.commands').cli.commands.COMMANDS.values()}"
        " & set(sys.modules)))"
    )
    for argv in (["--help"], ["no-such-command"]):
        done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip().splitlines()[-1] == "[]", (argv, done.stdout, done.stderr)
