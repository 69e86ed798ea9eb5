"""`orch run`'s running commentary: the controller's events, one short line each, as they land in
events.jsonl. It reads the file, not the controller, so it works the same for a controller in this
process and for one inside the run's container (the folder is bind-mounted here)."""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from pydantic import ValidationError

from orch import escape
from orch.jobs.verification import CONFIRM_ROUND
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.text import shorten
from orch.waits import IN_MODIFY, Inotify

WAKE_UP = 0.5  # seconds: the thread's backstop when inotify is missing or a write was not seen
CLAIM_CHARS = 70


ANSWERED = {Event.PERMISSION_ALLOWED: "allowed", Event.PERMISSION_DENIED: "denied"}


def _permission(e: ControllerEvent, d: dict[str, Any]) -> str:
    return f"{ANSWERED[e.event]} a {d.get('tool') or 'tool'} call ({d.get('job')})"


def _assigned(e: ControllerEvent, d: dict[str, Any]) -> str:
    if not d.get("finding"):
        return f"assigned {d['job']} ({d['role']})"
    stage = "to confirm" if d.get("round") == CONFIRM_ROUND else "to check"
    return f"assigned {d['job']} ({d['role']}: {stage} {d['finding']})"


def _checks_ended(e: ControllerEvent, d: dict[str, Any]) -> str | None:
    if d.get("error"):
        return f"change {d['change']}: its {d['work']} checks could not run ({shorten(d['error'], CLAIM_CHARS)})"
    if d.get("work") != "gate":
        return None  # the integration's word is change-integrated's
    regressed = d.get("regressions") or []
    return f"change {d['change']}: " + (f"regressed {', '.join(regressed)}" if regressed else "its checks passed")


def _change_taken(e: ControllerEvent, d: dict[str, Any]) -> str:
    gate = "; checks to run" if d.get("checking") else ""
    gate += "" if d.get("checks_ok", True) else "; a check regressed"  # runs before the checks left the loop
    if d.get("scope"):
        gate += f"; out of scope: {shorten('; '.join(d['scope']), CLAIM_CHARS)}"
    kept = f"; keeps the reviews of {d['kept_reviews']}" if d.get("kept_reviews") else ""
    return f"took change {d['job']} ({d.get('diffstat') or 'no diffstat'}){gate}{kept}"


def _review_word(verdict: str) -> str:
    return {"CONFIRMED": "approved", "REFUTED": "rejected"}.get(verdict, verdict)


# Each shown event's text (after its time and worker); events not here, or None, are not shown (a
# verifier's verdict line says it finished).
TEXTS: dict[Event, Callable[[ControllerEvent, dict[str, Any]], str | None]] = {
    Event.ASSIGNED: _assigned,
    Event.BRIEF_FAILED: lambda e, d: f"brief for {d['job']} not delivered: {shorten(d.get('error'), CLAIM_CHARS)}",
    Event.JOB_ACCEPTED: lambda e, d: f"finished {d['job']}" if d.get("role") != "verifier" else None,
    Event.FINDING_ACCEPTED: lambda e, d: f"found {d['finding']}: {shorten(d.get('claim'), CLAIM_CHARS)}",
    Event.VERDICT_ACCEPTED: lambda e, d: f"{d['verdict']} {d['finding']} ({d['job']})",
    Event.CONFIRM_ROUND: lambda e, d: f"{d['finding']} survived its refutation: confirm round {', '.join(d['jobs'])}",
    Event.OUTPUT_REJECTED: lambda e, d: (
        f"{d['job']}: output rejected ({len(d.get('problems', []))} problem(s)), told what is wrong"
    ),
    Event.NUDGE_SENT: lambda e, d: f"nudged on {d['job']} (idle without its done flag)",
    Event.RATE_LIMITED: lambda e, d: f"{d['reason']} on {d['job']}: continuing in {d['wait']:g}s",
    Event.API_ERROR: lambda e, d: f"{d['reason']} on {d['job']}: continuing in {d['wait']:g}s",
    Event.PERMISSION_ALLOWED: _permission,
    Event.PERMISSION_DENIED: _permission,
    Event.PERMISSION_WAIT: lambda e, d: f"waits on a permission prompt ({d.get('tool')}): `orch attach --write`",
    Event.CRASH_SEEN: lambda e, d: f"crashed ({shorten(d.get('why'), CLAIM_CHARS)}); restart in {d['restart_in']:g}s",
    Event.RESTARTED_WORKER: lambda e, d: f"restarted (session resumed; restart {d['restarts']})",
    Event.WORKER_OUT: lambda e, d: f"out of the run: {shorten(d.get('reason'), CLAIM_CHARS)}",
    Event.WORKER_CAPPED: lambda e, d: f"past its budget cap (${d['cost_usd']:.2f}): no further jobs",
    Event.BUDGET_EXCEEDED: lambda e, d: (
        f"budget exceeded: {shorten(d.get('reason'), 200)}" + ("; no further jobs" if e.worker is not None else "")
    ),
    Event.GATEWAY_UNANSWERED: lambda e, d: f"the model gateway did not answer ({shorten(d.get('error'), 120)})",
    Event.JOB_FAILED: lambda e, d: f"{d['job']} failed: {shorten(d.get('reason'), CLAIM_CHARS)}",
    Event.VERIFIER_REPLACED: lambda e, d: f"{d['job']} goes to another verifier: {d['replacement']}",
    Event.FLEET_RELAUNCHING: lambda e, d: "the fleet's tmux server is gone: relaunching it (sessions resumed)",
    Event.ABORTED: lambda e, d: f"stopping the run: {shorten(d.get('reason'), 200)}",
    Event.WORKER_MOVED: lambda e, d: f"started afresh in {d['workdir']} for {d['job']}",
    Event.CHANGE_TAKEN: _change_taken,
    Event.REVIEW_OPENED: lambda e, d: f"change {d['change']} passed its gate: review {', '.join(d['jobs'])}",
    Event.REVIEW_ACCEPTED: lambda e, d: f"{_review_word(d['verdict'])} change {d['change']} ({d['job']})",
    Event.CHANGE_INTEGRATED: lambda e, d: (
        f"change {d['change']}: {d['result']}"
        + (f" ({shorten(d.get('detail'), CLAIM_CHARS)})" if d.get("detail") else "")
    ),
    Event.CHANGE_ENDED: lambda e, d: (
        f"change {d['change']} ({d['task']}) {d['status']}"
        + (f": {shorten(d['reason'], CLAIM_CHARS)}" if d.get("reason") else "")
    ),
    Event.REBASE_OPENED: lambda e, d: f"change {d['change']} goes back to its writer: rebase job {d['job']}",
    Event.CHECKS_STARTED: lambda e, d: f"change {d['change']}: {d['work']} checks started",
    Event.CHECKS_ENDED: _checks_ended,
    Event.CHANGE_QUEUED: lambda e, d: f"change {d['change']} approved: in the integration queue ({d['ahead']} ahead)",
    Event.WATCH_ACTION: lambda e, d: (
        f"{d['action']} from orch watch ({d['by']}): {'done' if d['ok'] else 'failed'}: {shorten(d.get('said'), 120)}"
    ),
}


def describe(event: ControllerEvent) -> str | None:
    """The commentary line for one event, or None for one not worth a line."""
    text = TEXTS.get(event.event)
    if text is None:
        return None
    try:
        body = text(event, event.data)
    except (KeyError, TypeError, ValueError):  # an event from another orch version: its name will do
        body = event.event
    if body is None:
        return None
    who = f"W{event.worker}" if event.worker is not None else "  "
    # The whole line, not each worker-written part: a claim, a reason, a path name can be anywhere in it.
    return f"{event.ts.astimezone().strftime('%H:%M:%S')} {who:>3} {escape.terminal(body)}"


class Commentary:
    """Echoes the events appended to a run's events.jsonl after it was opened, from a thread, until
    closed; `close` prints what is left, so the last lines come before the caller's result."""

    def __init__(self, run: RunFolder, echo: Callable[[str], None]) -> None:
        self._echo = echo
        self._path = run.events
        self._fh: BinaryIO = run.events.open("rb")
        self._fh.seek(0, 2)
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        try:
            self._notifier: Inotify | None = Inotify()
            self._notifier.add_watch(run.events, IN_MODIFY)
        except OSError:
            self._notifier = None
        self._thread = threading.Thread(target=self._loop, name="orch-commentary", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._drain()
                if self._notifier is not None:
                    self._notifier.wait(WAKE_UP)
                else:
                    self._stop.wait(WAKE_UP)
        finally:
            if self._notifier is not None:  # the thread's own: closed only once it no longer waits on it
                self._notifier.close()

    def _drain(self) -> None:
        with self._lock:
            if self._fh.closed:
                return
            self._pending += self._text.decode(self._fh.read())
            self._reopen()
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                try:
                    shown = describe(ControllerEvent.model_validate_json(line))
                except ValidationError:
                    continue  # not ours to judge here: `orch run` reports on the run, not on this file
                if shown is not None:
                    self._echo(shown)

    def _reopen(self) -> None:
        """events.jsonl replaced whole (a rename over it: a swarm run's copy brought home): read the new file on
        from where the old one ended, and watch it instead."""
        try:  # a stat each drain, opened only once it names another file
            if os.stat(self._path).st_ino == os.fstat(self._fh.fileno()).st_ino:
                return
            new = self._path.open("rb")
        except OSError:
            return
        read = self._fh.tell()
        self._fh.close()
        self._fh = new
        new.seek(min(read, os.fstat(new.fileno()).st_size))  # the log only grows: its copy holds what was read
        self._pending += self._text.decode(new.read())
        if self._notifier is not None and not self._stop.is_set():
            with contextlib.suppress(OSError):
                self._notifier.add_watch(self._path, IN_MODIFY)

    def close(self) -> None:
        """Print what is left and stop; the thread ends by itself within WAKE_UP (not waited for)."""
        self._stop.set()
        self._drain()
        with self._lock:
            self._fh.close()

    def __enter__(self) -> Commentary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
