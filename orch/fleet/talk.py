"""Talking to running workers: one submission per message, acknowledged by the agent's own hook."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orch import escape
from orch.agents.registry import get_adapter
from orch.contracts import AgentAdapter
from orch.errors import DeliveryError, UsageError, WaitTimeoutError
from orch.fleet.tmux import PaneInfo, TmuxServer
from orch.fleet.workerstate import ENDED, derive_state
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.run.terminal import transcript
from orch.run.workerprotocol import pointer_text, protocol_footer
from orch.waits import wait_until

log = logging.getLogger(__name__)

MAX_PARALLEL_SENDS = 8
# Enter is re-sent after 2, 4, 8 and 16 s without a UserPromptSubmit: a TUI that has just
# booted sometimes drops the first Enter, and a lost Enter should cost seconds, not a whole timeout.
ACK_TIMEOUT = 2.0
ENTER_ATTEMPTS = 4
# A worker whose screen says it drops typed text (a Gemini CLI session still loading its old chat after a
# restart takes a second or two, more under load) is waited for this long before anything is typed.
INPUT_TIMEOUT = 30.0
# A TUI that has just drawn its input box can still drop a paste (its key handler comes a moment later): a
# paste whose draft stays empty on screen is pasted again.
PASTE_ATTEMPTS = 3
PASTE_POLL = 0.02
"""How often the screen is looked at for the paste (a tmux client each, 2-8 ms): TUIs showed it 20-300 ms after it,
Enter waits for the look that sees it, and that look comes half an interval late on average."""
PASTE_RETRY = 0.5
"""Seconds before an agent with a paste window (AgentFacts.paste_window) has its Enter pressed again."""
ENTER_POLL = 0.03
"""How often its screen is looked at meanwhile: a new line in its draft says the Enter was not taken."""
ACKNOWLEDGED, NEW_LINE = "acknowledged", "new line"


def live_pane(run: RunFolder, n: int) -> tuple[TmuxServer, PaneInfo]:
    info = run.info()
    run.check_worker(n)
    server = TmuxServer(info.tmux_socket)
    if not server.alive():
        raise DeliveryError(f"run {run.name!r} is not running", hint=f"start it again with `orch up {run.name}`")
    pane = server.pane(n)
    state, detail = derive_state(run.last_hook_event(n), pane)
    if state in ENDED:
        raise DeliveryError(f"worker {n} is not running ({state.value}: {detail})")
    return server, pane


def send(run: RunFolder, n: int, text: str, ack_timeout: float = ACK_TIMEOUT) -> None:
    """Deliver `text` (any length, multi-line) as one submission and confirm it via the hook."""
    if not text.strip():
        raise UsageError("empty message", hint="give the text to send")
    if "\x00" in text:
        raise UsageError("message contains NUL bytes", hint="send UTF-8 text")
    _deliver(run, n, text, *live_pane(run, n), ack_timeout)


def _deliver(run: RunFolder, n: int, text: str, server: TmuxServer, pane: PaneInfo, ack_timeout: float) -> None:
    seen = len(run.hook_events(n))

    def acknowledged() -> bool:
        return any(e.hook_event_name == "UserPromptSubmit" for e in run.hook_events(n)[seen:])

    adapter, screen = _wait_for_input(run, n, server, pane)
    for paste in range(1, PASTE_ATTEMPTS + 1):
        before = screen if paste == 1 else server.capture(pane.pane_id)  # the first: the screen just looked at
        server.paste(pane.pane_id, text.rstrip("\n"))

        def landed(before: str = before) -> bool:
            screen = server.capture(pane.pane_id)
            return screen != before and not adapter.draft_empty(screen)

        # Enter must come as a separate key after the paste has landed, or it joins the paste.
        try:
            wait_until(landed, 2.0 * paste, "the paste to show", interval=PASTE_POLL)
            break
        except WaitTimeoutError:
            if paste < PASTE_ATTEMPTS and adapter.draft_empty(server.capture(pane.pane_id)):
                # Its input box says the draft is still empty: the paste was dropped, none of it can repeat.
                log.info("worker %s dropped the paste (its draft is empty): pasting again", n)
                continue
            log.info("paste to worker %s did not show; sending Enter anyway", n)
            break
    waits = [ack_timeout * 2**k for k in range(ENTER_ATTEMPTS)]
    window = adapter.facts.paste_window
    if window:  # the agent's own timer after a paste, which no screen or hook shows ending
        time.sleep(window)
        # A cold or loaded TUI can still take the Enter inside its window (Gemini CLI's first brief after its
        # boot, seen at load 15) as a new line: pressed again as soon as its draft shows that, or after
        # PASTE_RETRY, not after the acknowledgement's 2 s. Such an agent ignores an Enter on an empty prompt,
        # so a second Enter after a taken one does nothing.
        waits = [PASTE_RETRY, *waits]
    for attempt, wait in enumerate(waits, start=1):
        entered = time.time()  # this attempt's Enter: the agent's own time starts once it took it
        try:
            if window and attempt == 1:
                if not _enter_in_window(adapter, server, pane, acknowledged, wait):
                    log.info("worker %s took Enter as a new line (inside its paste window): pressing it again", n)
                    continue
            else:
                server.send_keys(pane.pane_id, "Enter")
                wait_until(acknowledged, wait, "the acknowledgement", watch=run.state_dir)
        except WaitTimeoutError:
            log.info("worker %s did not acknowledge Enter (attempt %s)", n, attempt)
            continue
        said = {"chars": len(text), "enters": attempt, "entered": round(entered, 3)}
        run.log_event(ControllerEvent(event=Event.SENT, worker=n, data=said))
        return
    server.send_keys(pane.pane_id, "C-u")  # clear the stuck draft so the next send starts clean
    run.log_event(ControllerEvent(event=Event.SEND_FAILED, worker=n, data={"chars": len(text)}))
    raise DeliveryError(
        f"worker {n} did not acknowledge the message after {ENTER_ATTEMPTS} tries",
        hint=f"see `orch read {run.name} {n}`: it may be stuck on a dialog",
    )


def _enter_in_window(
    adapter: AgentAdapter, server: TmuxServer, pane: PaneInfo, acknowledged: Callable[[], bool], wait: float
) -> bool:
    """Enter, just after an agent's paste window: True once its hook says the prompt went in, False as soon as its
    screen moves on with text still in its draft (the Enter became a new line); WaitTimeoutError after `wait`."""
    typed = server.capture(pane.pane_id)
    server.send_keys(pane.pane_id, "Enter")

    def answered() -> str | None:
        if acknowledged():
            return ACKNOWLEDGED
        screen = server.capture(pane.pane_id)
        return NEW_LINE if screen != typed and not adapter.draft_empty(screen) else None

    return wait_until(answered, wait, "the Enter", interval=ENTER_POLL) == ACKNOWLEDGED


def _wait_for_input(run: RunFolder, n: int, server: TmuxServer, pane: PaneInfo) -> tuple[AgentAdapter, str]:
    """Wait while worker n's screen says its agent drops typed text though its hooks say idle (its adapter's
    deaf screens): a paste then would be lost, and the Enters after it would submit nothing. Its adapter, and the
    screen that said it takes input (a tmux client each look: the paste compares against it)."""
    adapter = get_adapter(run.info().agent_of(n))

    def takes_input() -> tuple[str] | None:  # a tuple: a blank screen is still an answer
        screen = server.capture(pane.pane_id)
        return (screen,) if adapter.takes_input(screen) else None

    seen = takes_input()
    if seen is not None:
        return adapter, seen[0]
    log.info("worker %s drops typed text for now (its screen says so): waiting", n)
    try:
        return adapter, wait_until(takes_input, INPUT_TIMEOUT, "the worker to take input")[0]
    except WaitTimeoutError:
        raise DeliveryError(
            f"worker {n} is not taking input after {INPUT_TIMEOUT:g}s (its screen says so): nothing was typed",
            hint=f"see `orch read {run.name} {n}`",
        ) from None


def brief(run: RunFolder, n: int, text: str) -> Path:
    """Write `agent-N.task.md` (with the worker protocol) and send the one-line pointer to it."""
    server, pane = live_pane(run, n)
    write_brief(run, n, text)
    _deliver(run, n, pointer_text(run, n), server, pane, ACK_TIMEOUT)  # the pane just looked at: not again
    return run.task(n)


def write_brief(run: RunFolder, n: int, text: str) -> Path:
    """Write `agent-N.task.md` (with the worker protocol); its pointer is sent (`brief`) or put on the command line
    of the worker's restart (a writer moved into its worktree: orch.lead.dispatch)."""
    if not text.strip():
        raise UsageError("empty brief", hint="write the task into the brief file")
    info = run.info()
    run.check_worker(n)
    atomic_write(run.task(n), text.rstrip("\n") + protocol_footer(run, n, info.workers))
    run.log_event(ControllerEvent(event=Event.BRIEFED, worker=n, data={"task": str(run.task(n))}))
    return run.task(n)


def brief_many(run: RunFolder, briefs: Mapping[int, str]) -> dict[int, DeliveryError | None]:
    """Brief several workers at once (worker -> text); each one's delivery error, or None.

    Each send waits for its worker's acknowledgement, so one after another the last of N workers would
    start N sends late; panes are independent, so the sends run side by side.
    """
    if not briefs:
        return {}

    def deliver(n: int) -> DeliveryError | None:
        try:
            brief(run, n, briefs[n])
        except DeliveryError as exc:
            return exc
        return None

    with ThreadPoolExecutor(max_workers=min(len(briefs), MAX_PARALLEL_SENDS)) as pool:
        return dict(zip(briefs, pool.map(deliver, briefs), strict=True))


def read(run: RunFolder, n: int, lines: int | None = None) -> str:
    """Worker n's screen (with `lines`, its last lines, scrollback included); once the run's tmux server is gone,
    its terminal log rendered as its terminal showed it (orch.run.terminal)."""
    info = run.info()
    run.check_worker(n)
    server = TmuxServer(info.tmux_socket)
    # What the worker's agent put on its screen, shown, never replayed: no escape sequence of its reaches the terminal.
    if server.alive():
        return escape.terminal_text(server.capture(server.pane(n).pane_id, lines))
    # The server is gone: the transcript is the evidence.
    try:
        out = transcript(run, n)
    except FileNotFoundError:
        raise UsageError(f"run {run.name!r} is not running and worker {n} left no transcript") from None
    return escape.terminal_text("\n".join(out[-lines:] if lines else out))
