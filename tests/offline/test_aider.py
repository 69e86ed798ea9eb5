"""The scripted model's answers for aider (orch/offline/aider.py): steps as edit and shell blocks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orch.offline.aider import answer, one_line
from orch.shellparts import ran

SYSTEM = {"role": "system", "content": "Act as an expert developer. Use *SEARCH/REPLACE blocks*."}


def body(*messages: dict[str, str]) -> dict[str, object]:
    return {"model": "gpt-4.1", "stream": True, "messages": [SYSTEM, *messages]}


def script(*steps: dict[str, str]) -> str:
    return "```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n"


# Quotes, backslashes, printf escapes, `%` and an `if` across lines.
SCRIPT = (
    'cd "$1" || exit 1\nx=\'it\'\\\'\'s\'; if [ -n "$x" ]; then\n  printf "%s \\\\n%%\\n" "$x" > out\nfi\necho done'
)


# Whole commands a line each (an offline verifier's check): joined with `;`, each still readable.
LINES = (
    'cd "$1" || exit 1\nif grep -nF -- x /dev/null; then found=1; else found=0; fi\n'
    '( echo hi ) > o 2>&1; c=$?\necho "$found $c"'
)


@pytest.mark.parametrize("text", [SCRIPT, LINES, "echo one", "echo 'a\\nb' | tr -d x"])
def test_a_multi_line_script_runs_as_one_command_as_it_would_whole(tmp_path: Path, text: str) -> None:
    """aider runs each line of a shell block on its own: a script goes as one line, with the same effect."""
    line = one_line(text)
    assert "\n" not in line
    for name, command in (("whole", text), ("one-line", line)):
        folder = tmp_path / name
        folder.mkdir()
        # aider runs a line with `$SHELL -i -c`: any POSIX shell; the script itself gets bash.
        done = subprocess.run(["sh", "-c", command, "sh", str(folder)], capture_output=True, text=True, cwd=folder)
        (folder / "stdout").write_text(done.stdout + str(done.returncode))
    assert (tmp_path / "whole" / "stdout").read_text() == (tmp_path / "one-line" / "stdout").read_text()
    whole, single = (tmp_path / "whole" / "out"), (tmp_path / "one-line" / "out")
    assert whole.exists() == single.exists() and (not whole.exists() or whole.read_text() == single.read_text())


def test_every_step_goes_into_one_answer_and_command_output_is_not_a_prompt() -> None:
    steps = script(
        {"bash": "orch bus post r 'hi'"},
        {"write": "/tmp/x/result.md", "content": "ok"},
        {"reply": "First."},
        {"reply": "Second."},
    )
    first = answer(body({"role": "user", "content": steps}))
    assert first.text.count("orch step: ") == 2 and first.text.endswith("First.")
    assert "```bash\norch bus post r 'hi'\n```" in first.text and "<<<<<<< SEARCH" in first.text
    # The next request: aider's own notes and the commands' output (then "Ok") are not prompts: only the
    # real one passes the first reply.
    history = [
        {"role": "user", "content": steps},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "I updated the files."},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "Output from orch bus post r 'hi'\nposted\n"},
        {"role": "assistant", "content": "Ok"},
        {"role": "user", "content": "and then?"},
    ]
    assert answer(body(*history)).text == "Second."


def test_whole_command_lines_stay_readable_so_a_cited_command_is_found_in_the_call() -> None:
    line = one_line(LINES)
    assert "printf" not in line and ran("grep -nF -- x /dev/null", line) and ran("echo hi", line)
    assert "printf '%b'" in one_line(SCRIPT)  # a line that is no whole command (an `if` across lines)
    assert "printf '%b'" in one_line("echo a # note\necho b")  # a comment would swallow what follows
