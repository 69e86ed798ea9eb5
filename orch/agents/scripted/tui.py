"""A tiny Claude-Code-like TUI agent: a real terminal program for fast tests of the tmux layer.

    python -m orch.agents.scripted.tui [--model] ["first prompt"]

Like Claude Code it puts the TTY in raw mode, enables bracketed paste and shows a prompt
(`scripted> `). Pasted text goes into the draft verbatim (its newlines do not submit), Enter submits
the draft as one prompt, C-u clears it. It reports state as Claude Code's hooks would, as JSON lines
appended to $ORCH_STATE_FILE: SessionStart, UserPromptSubmit, PreToolUse/PostToolUse, Stop, SessionEnd.

The "work" for a prompt: every line starting with `$ `, in the prompt and in a `*.task.md` file the
prompt names, is run with `sh -c` in the cwd. `/exit` ends the session (status 0); `/crash` exits
with status 3. Test knobs: ORCH_SCRIPTED_DROP_ENTERS=k ignores the first k Enter keys, ORCH_SCRIPTED_NEWLINE_ENTERS=k
takes them as a new line in the draft; `--hold FILE` (its adapter names one in the worker's config dir) waits before
the SessionStart while FILE exists: a slow boot a test ends.

With `--model` (offline runs) a prompt is not run as `$ ` lines: it goes to the model behind
$ANTHROPIC_BASE_URL (the run's gateway), whose tool calls are run here (orch.agents.scripted.turns).
"""

from __future__ import annotations

import codecs
import os
import re
import subprocess
import sys
import termios
import tty
import uuid
from pathlib import Path
from typing import Any

from orch.agents.scripted.turns import ModelSession, TurnFailed
from orch.errors import OrchError
from orch.run.hookwriter import append_event
from orch.settings.internal import SCRIPTED_DROP_ENTERS, SCRIPTED_NEWLINE_ENTERS, STATE_FILE

PROMPT = "scripted> "
PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # arrow keys and friends: ignored
PARTIAL_CSI = re.compile(r"\x1b(\[[0-?]*[ -/]*)?")  # a sequence cut by read(): wait for the rest
TASK_FILE = re.compile(r"[^\s'\"`]+\.task\.md")
MORE = "... "
"""The draft's next line, after an Enter taken as a new line (ORCH_SCRIPTED_NEWLINE_ENTERS)."""
CTRL_C, CTRL_U, BACKSPACES = "\x03", "\x15", ("\x7f", "\x08")


class ScriptedAgent:
    def __init__(
        self, state_file: str, drop_enters: int, model: tuple[str, str] | None = None, newline_enters: int = 0
    ) -> None:
        self.state_file = state_file
        self.drop_enters = drop_enters
        self.newline_enters = newline_enters
        self.model = ModelSession(*model, self.emit, lambda text: self.write(text + "\n")) if model else None
        self.session_id = str(uuid.uuid4())
        self.draft = ""
        self.in_paste = False
        self.paste = ""
        self.pastes = 0

    def write(self, text: str) -> None:
        # Raw mode turns off output processing: we add the carriage returns ourselves.
        os.write(1, text.replace("\r\n", "\n").replace("\n", "\r\n").encode())

    def emit(self, event: str, **fields: Any) -> None:
        payload = {"hook_event_name": event, "session_id": self.session_id, "cwd": str(Path.cwd()), **fields}
        append_event(self.state_file, payload)

    def run(self, first_prompt: str | None) -> int:
        self.write("\x1b[?2004h")  # bracketed paste on: tmux `paste-buffer -p` only brackets if asked
        self.emit("SessionStart", source="startup", model="scripted")
        self.write("scripted agent ready\n")
        if first_prompt:
            self.write(PROMPT + first_prompt + "\n")
            code = self.handle(first_prompt)
            if code is not None:
                return code
        self.write(PROMPT)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        while True:
            data = os.read(0, 65536)
            if not data:
                return 0  # the terminal went away
            pending, code = self.feed(pending + decoder.decode(data))
            if code is not None:
                return code

    def feed(self, buf: str) -> tuple[str, int | None]:
        """Consume keys; return what must wait for more input, and an exit code when done."""
        i = 0
        while i < len(buf):
            if self.in_paste:
                end = buf.find(PASTE_END, i)
                if end < 0:
                    keep = next((k for k in range(len(PASTE_END) - 1, 0, -1) if buf.endswith(PASTE_END[:k])), 0)
                    self.paste += buf[i : len(buf) - keep]
                    return buf[len(buf) - keep :], None
                self.paste += buf[i:end]
                i = end + len(PASTE_END)
                self.end_paste()
                continue
            ch = buf[i]
            if ch == "\x1b":
                rest = buf[i:]
                if rest.startswith(PASTE_START):
                    self.in_paste, self.paste = True, ""
                    i += len(PASTE_START)
                elif match := CSI.match(rest):
                    i += match.end()
                elif PARTIAL_CSI.fullmatch(rest):
                    return rest, None
                else:
                    i += 1  # a lone Esc
                continue
            i += 1
            if ch in "\r\n":
                if self.drop_enters > 0:
                    self.drop_enters -= 1
                    continue
                if self.newline_enters > 0:
                    self.newline_enters -= 1
                    self.draft += "\n"
                    self.write("\n" + MORE)  # shown: a terminal capture drops trailing blank lines
                    continue
                code = self.submit()
                if code is not None:
                    return "", code
            elif ch in (CTRL_U, CTRL_C):
                self.draft = ""
                self.write("\r\x1b[K" + PROMPT)
            elif ch in BACKSPACES:
                if self.draft:
                    self.draft = self.draft[:-1]
                    self.write("\b \b")
            elif ch.isprintable():
                self.draft += ch
                self.write(ch)
        return "", None

    def end_paste(self) -> None:
        # Terminals (and tmux paste-buffer) send newlines as CR: turn them back into LF.
        text = self.paste.replace("\r\n", "\n").replace("\r", "\n")
        self.in_paste, self.paste = False, ""
        self.draft += text
        self.pastes += 1
        lines = text.count("\n") + 1
        # Like Claude Code: a multi-line paste shows as a placeholder, not as its text.
        self.write(f"[Pasted text #{self.pastes} +{lines} lines]" if lines > 1 else text)

    def submit(self) -> int | None:
        prompt, self.draft = self.draft, ""
        if not prompt.strip():
            self.write("\r\x1b[K" + PROMPT)
            return None
        self.write("\n")
        return self.handle(prompt)

    def handle(self, prompt: str) -> int | None:
        """Do one prompt's work; an exit code when the session ends."""
        command = prompt.strip()
        if command == "/exit":
            self.emit("SessionEnd", reason="prompt_input_exit")
            return 0
        if command == "/crash":
            self.write("crashing on purpose\n")
            return 3
        self.emit("UserPromptSubmit", prompt=prompt)
        self.write("✽ Working… (esc to interrupt)\n")
        if self.model is not None:
            self.model_turn(prompt)
            return None
        commands = [line[2:] for line in prompt.splitlines() if line.startswith("$ ")]
        if match := TASK_FILE.search(prompt):
            try:
                text = Path(match[0]).read_text()
            except OSError as exc:
                self.write(f"cannot read {match[0]}: {exc.strerror}\n")
            else:
                commands += [line[2:] for line in text.splitlines() if line.startswith("$ ")]
        for cmd in commands:
            self.run_command(cmd)
        summary = f"ran {len(commands)} command(s)"
        self.emit("Stop", last_assistant_message=summary)
        self.write(f"done: {summary}\n{PROMPT}")
        return None

    def model_turn(self, prompt: str) -> None:
        assert self.model is not None
        try:
            said = self.model.turn(prompt)
        except TurnFailed as exc:
            self.emit("StopFailure", error=exc.error)
            self.write(f"API error ({exc.error}): {exc}\n{PROMPT}")
            return
        self.emit("Stop", last_assistant_message=said)
        self.write(f"{said}\n{PROMPT}")

    def run_command(self, command: str) -> None:
        tool_input = {"command": command}
        self.emit("PreToolUse", tool_name="Bash", tool_input=tool_input)
        self.write(f"$ {command}\n")
        proc = subprocess.run(
            ["sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        output = proc.stdout.decode(errors="replace")
        self.write(output if not output or output.endswith("\n") else output + "\n")
        response = {"exit_code": proc.returncode, "output": output}
        self.emit("PostToolUse", tool_name="Bash", tool_input=tool_input, tool_response=response)


def _hold(path: Path) -> None:
    """Wait while `path` exists (a test's slow boot)."""
    if not path.exists():
        return
    from orch.waits import wait_until

    wait_until(lambda: not path.exists(), 3600.0, f"{path} to be removed", watch=path.parent)


def main(argv: list[str]) -> int:
    try:
        state_file, drop_enters = STATE_FILE.get(), SCRIPTED_DROP_ENTERS.get()
        newline_enters = SCRIPTED_NEWLINE_ENTERS.get()
    except OrchError as exc:
        print(f"scripted agent: {exc.one_line()}", file=sys.stderr)
        return 2
    if state_file is None:
        print(f"scripted agent: set {STATE_FILE.name} to the hook state file", file=sys.stderr)
        return 2
    args = argv[1:]
    if args[:1] == ["--hold"] and len(args) > 1:
        _hold(Path(args[1]))
        args = args[2:]
    model = None
    if args[:1] == ["--model"]:
        # The gateway's variables are named by the adapter (Claude Code's): importing them here would load
        # the adapters and their pydantic records, a fifth of a CPU second at every worker's start.
        if len(args) < 3:
            print("scripted agent: --model needs the names of the base URL and key variables", file=sys.stderr)
            return 2
        base_env, key_env, args = args[1], args[2], args[3:]
        base, key = os.environ.get(base_env), os.environ.get(key_env)
        if not base or not key:
            print(f"scripted agent: --model needs {base_env} and {key_env}", file=sys.stderr)
            return 2
        model = (base, key)
    agent = ScriptedAgent(str(state_file), drop_enters, model, newline_enters)
    saved = None
    if os.isatty(0):
        saved = termios.tcgetattr(0)
        tty.setraw(0)
    try:
        return agent.run(args[0] if args else None)
    finally:
        if saved is not None:
            os.write(1, b"\x1b[?2004l")
            termios.tcsetattr(0, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
