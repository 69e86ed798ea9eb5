"""Which moments of a run need a person: a pure function of the run folder's records, in the order they came.

Fed every hook event of every worker (state/agent-<n>.jsonl) and every controller event (events.jsonl), a
Decider answers the Notice each one makes, if any, and keeps `open`: what needs a person now (the list
`orch watch` shows). Only these make a notice, each of its reason class (orch.notify.notice.Reason):
- a hook event that leaves a dialog on screen for a person (`HookEvent.unanswered`: the run's policy gave
  no answer), once per wait: the wait is over at the worker's next event that is not a notification;
- a controller event: a worker out of restarts, a cap broken, a change that will not land, a budget 80 %
  spent or spent, the run's end;
- a rate limit (a worker's turn ended on one, or the controller waits one out) with no worker answered
  since for `rate_limit_after` seconds (`due`); any worker's answered turn ends it;
- with no controller (`orch up`), a worker's agent that exited with a failure (nothing restarts it).
A worker can write anything into its own hook log, so it can fake a wait: that is a permission prompt
like any other, rate-limited by orch.notify.throttle; it cannot fake a controller event.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

from orch.notify import escape
from orch.notify.notice import TEXT_CHARS, WAITS, Notice, Reason
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, HookEvent

RATE_ERRORS = ("rate_limit", "overloaded")
"""A StopFailure's errors that mean a rate limit (orch.fleet.workerstate.RETRYABLE_ERRORS)."""
ANSWERED = ("PostToolUse", "Stop")
"""Hook events that say a worker's model answered: a rate limit no longer holds the fleet."""
QUESTION_TOOLS = ("AskUserQuestion", "question")
"""Tools that ask the person a question (Claude Code's, opencode's): a wait on them is a question."""
QUESTION_NOTICES = ("elicitation_dialog",)
"""Notifications of a question on screen (an MCP server's elicitation)."""
REFUSED_CHANGES = ("REJECTED", "CONFLICT", "FAILED")
"""A change's ends that mean it will not land (orch.jobs.state.ChangeStage; CONFLICT only after its last rebase)."""
STOPPED = (0, 128 + 1, 128 + 2, 128 + 15)
"""Exit statuses that are no crash: a clean exit, a hangup (`orch kill` ends the tmux server), an interrupt
(Ctrl-C in an attached pane), a terminate."""
INPUT_KEYS = ("command", "file_path", "path", "url", "pattern", "query", "prompt", "description")
"""The part of a tool's input that says what it is for, in this order."""


class Decider:
    """One run's decisions; `secrets` are redacted from every worker-written text."""

    def __init__(
        self,
        run: RunFolder,
        agents: dict[int, str],
        controlled: bool,
        rate_limit_after: float = 300.0,
        link: str | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        self.run, self.agents, self.controlled = run, agents, controlled
        self.rate_limit_after, self.link = rate_limit_after, link
        self.secrets = tuple(secrets)
        self.open: dict[str, Notice] = {}
        """What needs a person now, by key, oldest first."""
        self._waiting: dict[int, str] = {}
        self._rate_since: float | None = None
        self._rate_detail = ""
        self._rate_told = False

    # --- the inputs ---------------------------------------------------------------------------------
    def hook(self, n: int, event: HookEvent) -> Notice | None:
        if event.unanswered() or event.notification_type in QUESTION_NOTICES:
            if n in self._waiting:
                return None  # the same wait (Claude Code's PermissionRequest, then its Notification)
            question = event.tool_name in QUESTION_TOOLS or event.notification_type in QUESTION_NOTICES
            reason = Reason.QUESTION if question else Reason.PERMISSION
            notice = self._open(self._notice(reason, event.ts, waits_on(event), n))
            self._waiting[n] = notice.key
            return notice
        if event.hook_event_name != "Notification" and n in self._waiting:
            self.open.pop(self._waiting.pop(n), None)
        if event.hook_event_name == "StopFailure" and event.error in RATE_ERRORS:
            self._rate_limited(event.ts, f"W{n}: {event.error}")
        elif event.hook_event_name in ANSWERED and self._rate_since is not None:
            self._rate_over()
        if not self.controlled and event.hook_event_name == "ProcessExit" and event.status not in STOPPED:
            return self._open(self._notice(Reason.CRASHED, event.ts, exit_text(event.status), n))
        return None

    def controller(self, event: ControllerEvent) -> Notice | None:
        d, n, ts = event.data, event.worker, event.ts.timestamp()
        if event.event is Event.RATE_LIMITED:
            self._rate_limited(ts, f"W{n}: {d.get('reason') or 'rate limited'}")
            return None
        made = _from_controller(event)
        if made is None:
            return None
        reason, text = made
        return self._open(self._notice(reason, ts, text, n))

    def due(self, now: float) -> Notice | None:
        """The rate limit's notice, once it has held for `rate_limit_after` seconds."""
        deadline = self.next_due()
        if deadline is None or now < deadline or self._rate_since is None:
            return None
        self._rate_told = True
        held = int((now - self._rate_since) // 60)
        text = f"no worker answered for {held} min; last: {self._rate_detail}"
        return self._open(self._notice(Reason.RATE_LIMITED, now, text, None))

    def next_due(self) -> float | None:
        """When `due` may answer next (None: nothing pending)."""
        if self._rate_since is None or self._rate_told:
            return None
        return self._rate_since + self.rate_limit_after

    # --- what a notice says --------------------------------------------------------------------------
    def _notice(self, reason: Reason, ts: float, text: str, n: int | None) -> Notice:
        return Notice(
            run=self.run.name,
            worker=n,
            agent=self.agents.get(n) if n is not None else None,
            reason=reason,
            text=escape.plain(text, TEXT_CHARS, self.secrets),
            action=self.action(reason, n),
            ts=ts,
        )

    def action(self, reason: Reason, n: int | None) -> str:
        """The command (and the web view's address, when configured) that acts on a notice."""
        name = self.run.name
        if reason is Reason.RUN_ENDED:
            command = f"open {self.run.report_html}"
        elif n is not None and reason in (*WAITS, Reason.CRASHED, Reason.OVER_CAP):
            command = f"orch attach {name} {n} --write"
        else:
            command = f"orch watch {name}"
        if self.link is None:
            return command
        return f"{command} or {self.link.rstrip('/')}/?run={name}" + (f"#w{n}" if n is not None else "")

    def _open(self, notice: Notice) -> Notice:
        self.open.pop(notice.key, None)  # the newest last
        self.open[notice.key] = notice
        return notice

    # --- rate limits ---------------------------------------------------------------------------------
    def _rate_limited(self, ts: float, detail: str) -> None:
        if self._rate_since is None:
            self._rate_since = ts
        self._rate_detail = detail

    def _rate_over(self) -> None:
        self._rate_since, self._rate_told = None, False
        for key in [k for k, v in self.open.items() if v.reason is Reason.RATE_LIMITED]:
            del self.open[key]


def waits_on(event: HookEvent) -> str:
    """What a waiting worker waits on: its tool and the telling part of its input, or its notice's message."""
    extra: dict[str, Any] = event.model_extra or {}
    given = extra.get("tool_input")
    if isinstance(given, str):
        with contextlib.suppress(ValueError):  # else cut by the hook writer: the text as it is
            given = json.loads(given)
    what = given
    if isinstance(given, dict):
        questions = given.get("questions")
        if isinstance(questions, list) and questions and isinstance(questions[0], dict):
            what = questions[0].get("question", questions[0])
        else:
            what = next((given[k] for k in INPUT_KEYS if isinstance(given.get(k), str)), given.get("question", given))
    if what in (None, {}, ""):
        what = extra.get("message") or extra.get("details") or ""
    if not isinstance(what, str):
        what = json.dumps(what, ensure_ascii=False)
    tool = event.tool_name
    if tool is None:
        return what or "a tool"
    return f"{tool}: {what}" if what else tool


def exit_text(status: int | None) -> str:
    if status is not None and status > 128:
        return f"its agent was killed by signal {status - 128}"
    return f"its agent exited with status {status}"


def _from_controller(event: ControllerEvent) -> tuple[Reason, str] | None:
    """A controller event's reason and text (None: not one a person is needed for)."""
    d = event.data
    match event.event:
        case Event.WORKER_OUT:
            return Reason.CRASHED, f"out of the run: {d.get('reason')}"
        case Event.OVER_CAP:
            return Reason.OVER_CAP, str(d.get("reason") or f"over its {d.get('cap')} cap: {d.get('used')}")
        case Event.CHANGE_ENDED if d.get("status") in REFUSED_CHANGES:
            return Reason.CHANGE_REFUSED, f"change {d.get('change')} {d.get('status')}: {d.get('reason') or ''}"
        case Event.BUDGET_WARNING:
            return Reason.BUDGET_WARNING, str(d.get("reason"))
        case Event.BUDGET_EXCEEDED:
            return Reason.BUDGET_SPENT, str(d.get("reason"))
        case Event.FINISHED:
            cost = d.get("cost_usd")
            spent = f"; cost ${cost:.2f}" if isinstance(cost, int | float) else ""
            spent += ", nothing billed" if spent and d.get("unbilled") else ""  # an offline or replayed run
            outcome = f"{d.get('status') or 'ended'} (exit {d.get('exit_code')})"
            return Reason.RUN_ENDED, f"{outcome}: {d.get('reason')}{spent}"
    return None
