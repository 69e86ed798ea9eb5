"""Which commands a shell call executes (orch.shellparts): what a cited command is matched against."""

from __future__ import annotations

import pytest

from orch import shellparts
from orch.shellparts import ran

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

REPRO = "python3 -c 'from stats import mean; mean([])' 2>&1 | grep -q ZeroDivisionError"
RUN: dict[str, tuple[str, str]] = {
    # (the call, a command it executes)
    "whole-call": (REPRO, REPRO),
    "after-cd": (f"cd /w && {REPRO}", REPRO),
    "a-list-part": (f"cd /w || exit 1\n{REPRO}; echo done", REPRO),
    "in-a-subshell-with-redirects": (f'( {REPRO} ) > "$o" 2>&1; code=$?', REPRO),
    "a-pipeline-stage": (f"{REPRO} | tail -n 3", REPRO),
    "an-if-condition": ("if grep -nF -- 'a b' f.py; then found=1; else found=0; fi", "grep -nF -- 'a b' f.py"),
    "a-substitution": ("x=$(grep -c a f)", "grep -c a f"),
    "a-substitution-in-a-string": ('echo "$(grep -c a f)"', "grep -c a f"),
    "several-statements": (
        "( while [ ! -e g ]; do sleep 0.1; done; ls -l ) > o",
        "while [ ! -e g ]; do sleep 0.1; done; ls -l",
    ),
    "statements-on-lines": ("a\nb\nc", "a; b"),
    "extra-whitespace": ("cd /w &&   ls    -l", "ls -l"),
    "part-of-a-longer-list": ("a && b && c", "b && c"),
    "before-its-redirection": ("cd /w && pytest -q 2>&1 | tail -n 5", "pytest -q"),
    "with-its-redirection-after-a-list": ("cd /w && pytest -q 2>&1 | tail -n 5", "pytest -q 2>&1 | tail -n 5"),
    "a-line-continuation": ("ls \\\n  -l", "ls -l"),
    "after-then": ("if true; then ls -l; fi", "ls -l"),
}
MENTIONED: dict[str, tuple[str, str]] = {
    # (the call, a command it only mentions)
    "echoed": (f'echo "{REPRO}"', REPRO),
    "echoed-unquoted": ("echo ls -l", "ls -l"),
    "an-argument": ("python3 -c 'print(1)' 'ls -l'", "ls -l"),
    "a-heredoc": ("cat <<'EOF'\nls -l\nEOF", "ls -l"),
    "a-comment": ("true # ls -l", "ls -l"),
    "an-argument-that-looks-like-a-redirect": ("sleep 2", "sleep"),
    "a-prefix-of-a-command": ("ls -l -a", "ls -l"),
    "a-quoted-separator": ("echo ';' ls -l", "ls -l"),
    "a-string-content": ('echo "x; ls -l"', "ls -l"),
    "unparseable": ("echo 'x; ls -l", "ls -l"),
    "lines-are-not-words": ("echo\nfoo bar", "echo foo bar"),
    "an-if-is-not-a-sequence": ("if a; then b; fi", "a; b"),
}


@pytest.mark.parametrize(("call", "command"), RUN.values(), ids=RUN.keys())
def test_commands_a_call_runs(call: str, command: str) -> None:
    assert ran(command, call)


@pytest.mark.parametrize(("call", "command"), MENTIONED.values(), ids=MENTIONED.keys())
def test_commands_a_call_only_mentions(call: str, command: str) -> None:
    assert not ran(command, call)


@pytest.mark.parametrize(
    ("line", "joinable"),
    [
        ("echo a", True),
        ("a && b || c", True),
        ('echo "#" > out', True),
        ("if x; then y; fi", True),
        ("echo a # note", False),  # the comment would swallow what `;` joins after it
        ("cat <<EOF", False),  # its body is on the next lines
        ("if x; then", False),
        ("sleep 1 &", False),
        ("echo 'open", False),
    ],
)
def test_which_lines_a_semicolon_may_join(line: str, joinable: bool) -> None:
    assert shellparts.joinable(line) is joinable
