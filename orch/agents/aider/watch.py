"""aider's stand-in for hooks: the pinned aider has none, so this watcher, started beside it in its pane, turns
what aider does leave behind into orch hook events (through orch/run/hookwriter.py).

    python3 -S watch.py [--pane SOCKET] HOOKWRITER STATE_FILE CHAT_HISTORY READY_FILE [PROMPT_FILE]

Its pane is reached through the run's tmux server ($TMUX, $TMUX_PANE), or under local strict isolation,
where that server is out of reach, through `--pane SOCKET`: the relay's socket for this worker's own pane
alone (orch.backends.local.relay: read the screen, paste, Enter; one JSON request line, one answer line).

- ready: aider's input prompt (`> `) on the pane's screen (tmux capture-pane on $TMUX_PANE): SessionStart,
  then READY_FILE; then the first prompt, if any, is typed in (aider has no prompt-and-stay flag):
  pasted as one bracketed paste, then Enter, re-sent if aider did not take it;
- a submission: aider appends each prompt to its chat history file as `#### ` lines the moment it
  takes it: UserPromptSubmit with the prompt (the acknowledgement `orch send` waits for);
- end of turn: the input prompt back on screen after a submission: Stop. (aider's
  --notifications-command also fires, but also at confirmations in mid-turn: it writes a Notification.)

Plain script, standard library only. It exits when aider does (its parent: the pane's shell execs aider).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

SESSION = "aider-chat-history"
"""aider keeps no session id: this name stands for the worker's chat history file (what a resume restores)."""
PROMPT_RE = re.compile(r"^(?:[\w-]+)?> ?$")
POLL = 0.2
ENTER_RETRY = 3.0
ENTER_ATTEMPTS = 4


def emit(hookwriter: str, state: str, payload: dict[str, object]) -> None:
    subprocess.run(
        [sys.executable, "-S", hookwriter, "event", state], input=json.dumps(payload), text=True, check=False
    )


def tmux(*args: str, stdin: str | None = None) -> str:
    """A tmux command on this pane's server ($TMUX, set by tmux in the pane)."""
    done = subprocess.run(["tmux", *args], input=stdin, capture_output=True, text=True, check=False)
    return done.stdout


class Pane:
    """This worker's own pane: through the run's tmux server, or (`socket_path`) the relay's pane socket."""

    def __init__(self, socket_path: str | None, hookwriter: str) -> None:
        self.socket_path = socket_path
        self.target = os.environ.get("TMUX_PANE", "")
        self.client: Any = None
        if socket_path:  # the relay's protocol has one client, the hook writer's (a script: loaded by path)
            spec = importlib.util.spec_from_file_location("orch_hookwriter", hookwriter)
            assert spec is not None and spec.loader is not None
            self.client = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(self.client)

    def _ask(self, request: dict[str, str]) -> str:
        """One request to the relay (the hook writer's client); its answer's screen ("" if refused or gone)."""
        assert self.socket_path is not None and self.client is not None
        return str(self.client.pane_request(self.socket_path, request).get("screen", ""))

    def screen(self) -> str:
        if self.socket_path:
            return self._ask({"op": "screen"})
        return tmux("capture-pane", "-p", "-t", self.target)

    def paste(self, text: str) -> None:
        if self.socket_path:
            self._ask({"op": "paste", "text": text})
            return
        buffer = f"orch-aider-{os.getpid()}"
        tmux("load-buffer", "-b", buffer, "-", stdin=text)
        tmux("paste-buffer", "-p", "-d", "-b", buffer, "-t", self.target)

    def enter(self) -> None:
        if self.socket_path:
            self._ask({"op": "enter"})
        else:
            tmux("send-keys", "-t", self.target, "Enter")

    def at_prompt(self) -> bool:
        lines = [line.rstrip() for line in self.screen().splitlines() if line.strip()]
        return bool(lines) and PROMPT_RE.match(lines[-1]) is not None

    def type_prompt(self, text: str) -> None:
        self.paste(text)
        time.sleep(0.2)  # the paste must land before the Enter (a TUI reads them as one otherwise)
        self.enter()


class History:
    """New `#### ` lines of aider's chat history file, one submission per run of them."""

    def __init__(self, path: str) -> None:
        self.path, self.offset = path, 0
        with contextlib.suppress(OSError):
            self.offset = os.path.getsize(path)  # a resumed worker's old history is not new input

    def read(self) -> tuple[list[str], bool]:
        """The submissions since the last read, and whether anything else (aider's reply) came after them."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return [], False
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        found: list[str] = []
        current: list[str] | None = None
        after = False
        for line in complete.splitlines():
            if line.startswith("#### ") or line == "####":
                current = current if current is not None else []
                current.append(line[5:].removesuffix("  "))  # aider's markdown line break
                after = False
            else:
                if current is not None:
                    found.append("\n".join(current))
                    current = None
                after = after or bool(line.strip())
        if current is not None:
            found.append("\n".join(current))
        return found, after


def main(argv: list[str]) -> int:
    pane_socket = None
    if argv[1:2] == ["--pane"] and len(argv) > 2:
        pane_socket, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    hookwriter, state, history_file, ready_file = argv[1:5]
    pane = Pane(pane_socket, hookwriter)
    prompt = None
    if len(argv) == 6:
        with open(argv[5], encoding="utf-8") as fh:
            prompt = fh.read()
    parent = os.getppid()
    history = History(history_file)
    ready = busy = replied = False
    typed_at, attempts = 0.0, 0
    while os.getppid() == parent:
        time.sleep(POLL)
        submissions, after = history.read()
        for text in submissions:
            emit(hookwriter, state, {"hook_event_name": "UserPromptSubmit", "prompt": text, "session_id": SESSION})
            busy, replied, prompt = True, False, None
        replied = replied or after
        idle = pane.at_prompt()
        if not ready and idle:
            ready = True
            emit(hookwriter, state, {"hook_event_name": "SessionStart", "source": "startup", "session_id": SESSION})
            with open(ready_file, "w", encoding="utf-8") as fh:
                fh.write(str(time.time()))
        if ready and prompt is not None and time.monotonic() - typed_at > ENTER_RETRY:
            if attempts == 0:
                pane.type_prompt(prompt)
            elif attempts < ENTER_ATTEMPTS:
                pane.enter()
            typed_at, attempts = time.monotonic(), attempts + 1
        if busy and replied and idle:  # the reply is logged and the input prompt is back
            busy = False
            emit(hookwriter, state, {"hook_event_name": "Stop", "session_id": SESSION})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
