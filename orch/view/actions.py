"""What a lead can do from `orch watch`: send, nudge, restart, kill (attach takes the terminal itself).

Each action runs the `orch` command a user would type (`orch send NAME N --file -`, `orch restart`,
`orch kill`), as a child process: the same code path as the CLI, wherever the run lives (this machine,
its container, a remote engine), its output captured so it cannot scribble over the view. Each is then
logged in events.jsonl as Event.WATCH_ACTION, with who asked (the TUI or the page) and how it ended.
"""

from __future__ import annotations

import subprocess
import sys
from enum import StrEnum

from orch.errors import OrchError, UsageError
from orch.jobs.state import load_state
from orch.lead.briefs import nudge_text
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, Strict
from orch.text import shorten

ACTION_TIMEOUT = 120.0  # seconds: a send waits for its acknowledgement, a kill for the agents to exit
MAX_MESSAGE = 16_000


class Action(StrEnum):
    SEND = "send"
    NUDGE = "nudge"
    RESTART = "restart"
    KILL = "kill"


class Outcome(Strict):
    action: Action
    worker: int | None
    ok: bool
    said: str
    """The command's last line (its confirmation, or its one-line error)."""


def orch_argv(*args: str) -> list[str]:
    """`orch ARGS` as this interpreter runs it (the installed script may not be on PATH)."""
    return [sys.executable, "-c", "from orch.cli.main import main; main()", *args]


GENERIC_NUDGE = (
    "orch: your task is not finished: there is no done flag yet. Continue working autonomously; when you are "
    "finished, write your result and then create the done flag, as your brief says."
)


def nudge_message(run: RunFolder, n: int) -> str:
    """What the controller itself says to a worker idle on its job (or, with no controller, a generic nudge)."""
    try:
        state = load_state(run)
    except OrchError:
        return GENERIC_NUDGE
    book = next((b for b in state.workers if b.n == n), None)
    if book is None or book.job is None:
        return GENERIC_NUDGE
    return nudge_text(run, state.job(book.job), n)


def perform(run: RunFolder, action: Action, worker: int | None = None, text: str = "", by: str = "tui") -> Outcome:
    """Do one action through the CLI and log it; an Outcome always (a failure is said, never raised)."""
    info = run.info()
    if action is not Action.KILL and (worker is None or not 1 <= worker <= info.workers):
        raise UsageError(f"worker {worker} is out of range", hint=f"use 1 to {info.workers}")
    stdin = None
    if action is Action.SEND:
        if not text.strip():
            raise UsageError("empty message", hint="type the text to send")
        if len(text) > MAX_MESSAGE or "\x00" in text:
            raise UsageError("message too long or binary", hint=f"send under {MAX_MESSAGE} characters of text")
        args, stdin = ["send", run.name, str(worker), "--file", "-"], text
    elif action is Action.NUDGE:
        args, stdin = ["send", run.name, str(worker), "--file", "-"], nudge_message(run, worker or 0)
    elif action is Action.RESTART:
        args = ["restart", run.name, str(worker)]
    else:
        args = ["kill", run.name]
    try:
        proc = subprocess.run(
            orch_argv(*args), input=stdin, capture_output=True, text=True, timeout=ACTION_TIMEOUT, check=False
        )
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        ok, said = proc.returncode == 0, (lines[-1] if lines else f"exit {proc.returncode}")
    except subprocess.TimeoutExpired:
        ok, said = False, f"`orch {args[0]}` did not finish within {ACTION_TIMEOUT:g}s"
    outcome = Outcome(action=action, worker=worker, ok=ok, said=shorten(said, 200))
    if run.root.is_dir():  # a kill keeps the folder; a vanished run has nowhere to log
        run.log_event(
            ControllerEvent(
                event=Event.WATCH_ACTION,
                worker=worker,
                data={"action": action.value, "by": by, "ok": ok, "said": outcome.said, "chars": len(stdin or "")},
            )
        )
    return outcome
