"""orch.notify.decide: which records make a notice, of which reason, saying what; routine progress never."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from orch.fleet.workerstate import RETRYABLE_ERRORS
from orch.jobs.state import ChangeStage
from orch.notify.decide import RATE_ERRORS, REFUSED_CHANGES, Decider
from orch.notify.notice import TEXT_CHARS, Notice, Reason
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, HookEvent
from tests.notify.hostile import HOSTILE, carries

pytestmark = pytest.mark.pure

RUN = RunFolder.for_name("demo")


def decider(controlled: bool = True, **kwargs: Any) -> Decider:
    return Decider(RUN, {1: "claude", 2: "codex"}, controlled, **kwargs)


def hook(name: str, ts: float = 100.0, **fields: Any) -> HookEvent:
    if isinstance(fields.get("tool_input"), dict):
        fields["tool_input"] = json.dumps(fields["tool_input"])  # as the hook writer logs it
    return HookEvent.model_validate({"ts": ts, "hook_event_name": name, **fields})


def event(name: Event, worker: int | None = None, ts: float = 100.0, **data: Any) -> ControllerEvent:
    return ControllerEvent(ts=dt.datetime.fromtimestamp(ts, dt.UTC), event=name, worker=worker, data=data)


def test_the_facts_copied_across_layers_agree() -> None:
    assert set(RATE_ERRORS) == RETRYABLE_ERRORS
    assert set(REFUSED_CHANGES) == {ChangeStage.REJECTED.value, ChangeStage.CONFLICT.value, ChangeStage.FAILED.value}


def test_a_prompt_the_policy_left_on_screen_is_one_notice_per_wait() -> None:
    d = decider()
    asked = d.hook(2, hook("PermissionRequest", tool_name="Bash", tool_input={"command": "rm -rf build"}))
    assert asked == Notice(
        run="demo",
        worker=2,
        agent="codex",
        reason=Reason.PERMISSION,
        text="Bash: rm -rf build",
        action="orch attach demo 2 --write",
        ts=100.0,
    )
    assert asked.title() == "orch demo: W2 (codex) waits on a permission"
    assert d.hook(2, hook("Notification", notification_type="permission_prompt")) is None  # the same wait
    assert list(d.open.values()) == [asked]
    assert d.hook(2, hook("PreToolUse", tool_name="Bash")) is None and not d.open  # answered: over
    again = d.hook(2, hook("PermissionRequest", ts=200.0, tool_name="Bash", tool_input={"command": "make"}))
    assert again is not None and again.text == "Bash: make"


@pytest.mark.parametrize(
    "record",
    [
        hook("PermissionRequest", tool_name="Bash", orch_decision="allow"),
        hook("PermissionRequest", tool_name="WebFetch", orch_decision="deny"),
        hook("Notification", notification_type="idle_prompt"),
        hook("Stop"),
        hook("PreToolUse", tool_name="Bash"),
        hook("StopFailure", error="server_error"),
        hook("ProcessExit", status=3),  # a controller restarts it: only its giving up is a notice
    ],
    ids=["allowed", "denied", "idle", "stop", "tool", "api-error", "crash-restarted"],
)
def test_routine_progress_and_answered_prompts_are_never_a_notice(record: HookEvent) -> None:
    d = decider()
    assert d.hook(1, record) is None and not d.open


@pytest.mark.parametrize(
    ("record", "reason", "text"),
    [
        (hook("PermissionRequest", tool_name="AskUserQuestion", tool_input={"questions": [{"question": "Which DB?"}]}),
         Reason.QUESTION, "AskUserQuestion: Which DB?"),
        (hook("Notification", notification_type="elicitation_dialog", message="Pick a branch"),
         Reason.QUESTION, "Pick a branch"),
        (hook("PermissionRequest", tool_name="WebFetch", tool_input={"url": "http://x.example/a", "prompt": "sum"}),
         Reason.PERMISSION, "WebFetch: http[:]//x[.]example/a"),
        (hook("Notification", notification_type="permission_prompt", message="Allow shell?", agent_event="Gemini"),
         Reason.PERMISSION, "Allow shell?"),
        (hook("PermissionRequest", tool_name="Edit", tool_input='{"file_path": "a.py", "old'),
         Reason.PERMISSION, 'Edit: {"file_path": "a.py", "old'),
    ],
    ids=["ask-tool", "elicitation", "webfetch", "gemini-notice", "cut-input"],
)  # fmt: skip
def test_what_a_worker_waits_on(record: HookEvent, reason: Reason, text: str) -> None:
    notice = decider().hook(1, record)
    assert notice is not None and (notice.reason, notice.text) == (reason, text)


def test_a_hostile_wait_reaches_no_one_as_written() -> None:
    notice = decider().hook(1, hook("PermissionRequest", tool_name="Bash", tool_input={"command": HOSTILE}))
    assert notice is not None and carries(notice.text) == [] and len(notice.text) <= TEXT_CHARS
    assert carries(notice.model_dump_json()) == []


def test_the_notifiers_secrets_are_redacted() -> None:
    d = decider(secrets=["hooks.slack.com/services/T0/B0/sekrit-path"])
    notice = d.hook(
        1,
        hook(
            "PermissionRequest",
            tool_name="Bash",
            tool_input={"command": "curl hooks.slack.com/services/T0/B0/sekrit-path"},
        ),
    )
    assert notice is not None and "sekrit" not in notice.text


@pytest.mark.parametrize(
    ("record", "reason", "text", "action"),
    [
        (event(Event.WORKER_OUT, 1, reason="exit status 3; restart limit (2) reached"), Reason.CRASHED,
         "out of the run: exit status 3; restart limit (2) reached", "orch attach demo 1 --write"),
        (event(Event.OVER_CAP, 2, cap="memory", used=5, limit=4, reason="over its memory cap: resident memory 5 bytes"),
         Reason.OVER_CAP, "over its memory cap: resident memory 5 bytes", "orch attach demo 2 --write"),
        (event(Event.CHANGE_ENDED, 1, change="fix", status="REJECTED", reason="scope: tests/x.py"),
         Reason.CHANGE_REFUSED, "change fix REJECTED: scope: tests/x.py", "orch watch demo"),
        (event(Event.CHANGE_ENDED, 1, change="fix", status="CONFLICT", reason="after 2 rebases"),
         Reason.CHANGE_REFUSED, "change fix CONFLICT: after 2 rebases", "orch watch demo"),
        (event(Event.BUDGET_WARNING, reason="80% of the fleet's max_cost_usd spent ($0.80 of $1)"),
         Reason.BUDGET_WARNING, "80% of the fleet's max_cost_usd spent ($0.80 of $1)", "orch watch demo"),
        (event(Event.BUDGET_EXCEEDED, reason="the fleet's cost $1.0100 passed the budget $1"),
         Reason.BUDGET_SPENT, "the fleet's cost $1.0100 passed the budget $1", "orch watch demo"),
        (event(Event.FINISHED, exit_code=4, status="incomplete", reason="stats-F1 UNVERIFIED", cost_usd=0.5),
         Reason.RUN_ENDED, "incomplete (exit 4): stats-F1 UNVERIFIED; cost $0.50", f"open {RUN.report_html}"),
        (event(Event.FINISHED, exit_code=0, status="passed", reason="all tasks done", cost_usd=0.5, unbilled="offline"),
         Reason.RUN_ENDED, "passed (exit 0): all tasks done; cost $0.50, nothing billed", f"open {RUN.report_html}"),
    ],
    ids=["out", "cap", "rejected", "conflict", "budget-80", "budget-spent", "end", "end-offline"],
)  # fmt: skip
def test_controller_events_that_need_a_person(record: ControllerEvent, reason: Reason, text: str, action: str) -> None:
    notice = decider().controller(record)
    assert notice is not None and (notice.reason, notice.text, notice.action) == (reason, text, action)


@pytest.mark.parametrize(
    "record",
    [
        event(Event.CHANGE_ENDED, 1, change="fix", status="LANDED"),
        event(Event.CHANGE_ENDED, 1, change="fix", status="REBASING"),
        event(Event.JOB_FAILED, 1, job="t1"),
        event(Event.CRASH_SEEN, 1, why="exit 3", restart_in=1),
        event(Event.PERMISSION_WAIT, 1, tool="Bash"),  # the hook log says it first
        event(Event.NOTIFIED, 1, reason="permission"),
    ],
    ids=lambda e: e.event.value,
)
def test_other_controller_events_are_not(record: ControllerEvent) -> None:
    assert decider().controller(record) is None


def test_a_crash_is_a_notice_only_where_no_controller_restarts_it() -> None:
    notice = decider(controlled=False).hook(1, hook("ProcessExit", status=137))
    assert notice is not None and notice.reason is Reason.CRASHED and notice.text == "its agent was killed by signal 9"
    for stopped in (0, 129, 130, 143):  # a clean exit, `orch kill`'s hangup, Ctrl-C, a terminate
        assert decider(controlled=False).hook(1, hook("ProcessExit", status=stopped)) is None


def test_a_rate_limit_that_holds_the_fleet() -> None:
    d = decider(rate_limit_after=300)
    assert d.hook(1, hook("StopFailure", ts=100.0, error="rate_limit")) is None
    assert d.controller(event(Event.RATE_LIMITED, 2, ts=150.0, reason="rate limited")) is None
    assert d.next_due() == 400.0 and d.due(399.0) is None
    notice = d.due(401.0)
    assert notice is not None and notice.reason is Reason.RATE_LIMITED and notice.worker is None
    assert notice.text == "no worker answered for 5 min; last: W2: rate limited"
    assert d.due(1000.0) is None and d.next_due() is None  # said once
    d.hook(1, hook("PostToolUse", ts=1001.0))  # a worker got an answer: over
    assert not d.open and d.next_due() is None


def test_an_answer_before_the_deadline_ends_the_hold() -> None:
    d = decider(rate_limit_after=300)
    d.hook(1, hook("StopFailure", ts=100.0, error="overloaded"))
    d.hook(2, hook("Stop", ts=200.0))
    assert d.next_due() is None and d.due(1000.0) is None


def test_a_link_joins_the_command() -> None:
    notice = decider(link="https://watch.example/").hook(1, hook("PermissionRequest", tool_name="Bash"))
    assert notice is not None
    assert notice.action == "orch attach demo 1 --write or https://watch.example/?run=demo#w1"
