"""Waiting for a fleet's workers to boot: each one's SessionStart hook and its adapter's ready marker, a
worker that dies meanwhile named with its last words, and a dialog that shows anyway answered."""

from __future__ import annotations

import re
import time
from pathlib import Path

from orch.agents.registry import get_adapter
from orch.contracts import AgentAdapter
from orch.errors import SandboxError, WaitTimeoutError
from orch.fleet.tmux import PaneInfo, TmuxServer
from orch.fleet.workerstate import ENDED, derive_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunInfo
from orch.run.terminal import record_pane_sizes
from orch.text import join_numbers
from orch.waits import wait_until

BOOT_TIMEOUT = 90.0
"""Seconds `orch up` (and a resume, a restart) waits for the workers to boot (`--boot-timeout`)."""
DIALOG_GRACE = 2.0  # seconds before a booting worker's screen is checked for dialogs
DIALOG_EVERY_MAX = 8.0
"""A booting worker's screen is looked at again after 2, 4, then every 8 s: each look is a tmux client, and the
checks come with every hook event of the fleet (a look at every pending screen each time was twenty tmux
clients a worker in an up of 32, bench `roles`)."""


def wait_booted(
    run: RunFolder,
    info: RunInfo,
    server: TmuxServer,
    timeout: float,
    seen: dict[int, int] | None = None,
    ended: dict[int, str] | None = None,
) -> None:
    """Wait for every worker's SessionStart hook and its adapter's ready marker (ignoring the first
    `seen[n]` events of worker n, written by an earlier life of the run, and any event of its session
    `ended[n]`: a respawned agent's SessionEnd may land after the new life began); answer known dialogs if
    one shows anyway. First each pane's size is recorded: final now that every pane is tiled, it is what each
    worker's log is rendered at once the run is stopped (orch.run.terminal)."""
    record_pane_sizes(run, server.pane_sizes())
    pending = set(range(1, info.workers + 1))
    skip = seen or {}
    old = ended or {}
    started = time.monotonic()
    look_at = dict.fromkeys(pending, started + DIALOG_GRACE)  # when a late worker's screen is looked at next
    every = dict.fromkeys(pending, DIALOG_GRACE)
    answered: dict[int, float] = {}

    def check() -> bool:
        panes = server.panes()
        for n in sorted(pending):
            adapter = get_adapter(info.agent_of(n))
            events = [e for e in run.hook_events(n)[skip.get(n, 0) :] if not e.session_id or e.session_id != old.get(n)]
            marker = adapter.ready_marker(run, n)
            if any(e.hook_event_name == "SessionStart" for e in events) and (marker is None or _present(marker)):
                pending.discard(n)
                continue
            pane = panes.get(n)
            state, detail = derive_state(events[-1] if events else None, pane)
            if pane is None or state in ENDED:
                screen = server.capture(pane.pane_id, 20) if pane else ""
                # The agent's last words, not tmux's "Pane is dead (status N, ...)" below them.
                said = [ln for ln in screen.splitlines() if ln.strip() and not ln.startswith("Pane is dead")]
                last = said[-1] if said else "no output"
                raise SandboxError(f"worker {n} exited while booting ({detail}): {last.strip()[:200]}")
            # Seeding prevents dialogs; screens are only scraped for a worker that is late to boot (after 2, 4,
            # then every 8 s), or, at every check until then, whose agent shows a screen at every start (Codex's in
            # a folder orch keeps untrusted).
            now = time.monotonic()
            late = now - started > DIALOG_GRACE
            early = not late and any(d.every_start for d in adapter.facts.dialogs)
            # An answered screen may still show for a moment: not answered again before the grace is over.
            if (early or now >= look_at[n]) and now - answered.get(n, -DIALOG_GRACE) > DIALOG_GRACE:
                if late:
                    every[n] = min(every[n] * 2, DIALOG_EVERY_MAX)
                    look_at[n] = now + every[n]
                if answer_dialogs(run, adapter, server, n, pane, late):
                    answered[n] = now
        return not pending

    try:
        wait_until(check, timeout, "workers to boot", interval=0.2, watch=run.state_dir)
    except WaitTimeoutError:
        raise WaitTimeoutError(
            f"workers {join_numbers(pending)} did not boot within {timeout:g}s",
            hint=f"look at their screens in {run.logs_dir}",
        ) from None


def _present(marker: Path) -> bool:
    """Whether a ready marker is there. It is in the worker's own config dir: under strict isolation the
    worker could make it a link the controller may not follow, which must not end the wait (nor `orch up`)."""
    try:
        return marker.exists()
    except OSError:
        return False


def answer_dialogs(
    run: RunFolder, adapter: AgentAdapter, server: TmuxServer, n: int, pane: PaneInfo, late: bool = True
) -> bool:
    """Fallback watchdog: recognise a blocking dialog on screen and answer it (only the `every_start` ones while
    not `late`). True if one was."""
    dialogs = [d for d in adapter.facts.dialogs if late or d.every_start]
    if not dialogs:
        return False
    screen = server.capture(pane.pane_id)
    for dialog in dialogs:
        if re.search(dialog.pattern, screen):
            server.send_keys(pane.pane_id, *dialog.keys)
            event = Event.START_SCREEN_ANSWERED if dialog.every_start else Event.DIALOG_ANSWERED
            run.log_event(ControllerEvent(event=event, worker=n, data={"dialog": dialog.name}))
            return True
    return False
