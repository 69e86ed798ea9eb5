"""What a notification says: its reason class and the Notice every channel renders.

A Notice is made by orch.notify.decide from the run folder's records, with its worker-written part (`text`,
what the worker waits on) already made safe by orch.escape.notice: redacted, one line, no control
characters, mentions and links defanged, at most TEXT_CHARS characters. Each channel escapes it once more
for its own markup (orch.notify.bodies). Everything else in a Notice is orch's own: the run's name
(checked against NAME_RE), a worker number, an agent's registry name, a reason, a command.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from orch.run.records import Strict

TEXT_CHARS = 140
"""At most this much of what a worker waits on reaches a person."""


class Reason(StrEnum):
    """Why a person is needed (docs/notify.md says what each means). Routine progress is never one."""

    PERMISSION = "permission"
    """A worker waits on a permission prompt the run's policy does not answer."""
    QUESTION = "question"
    """A worker waits on a question for a person (an MCP elicitation, an ask-the-user tool)."""
    CRASHED = "crashed"
    """A worker crashed beyond its restarts (a run with no controller: the first crash)."""
    OVER_CAP = "over-cap"
    """A worker broke one of its caps (processes, memory, disk, the run folder) and was stopped."""
    CHANGE_REFUSED = "change-refused"
    """A writer's change will not land: rejected, failed, or a conflict after its last rebase."""
    BUDGET_WARNING = "budget-warning"
    """80 % of a budget cap is spent."""
    BUDGET_SPENT = "budget-spent"
    """A budget cap is spent: the gateway refuses that worker, or the whole fleet."""
    RATE_LIMITED = "rate-limited"
    """A rate limit has held the fleet (no worker got an answer) for longer than `rate_limit_after`."""
    RUN_ENDED = "run-ended"
    """The run ended: its outcome, cost and report."""


WORDS = {
    Reason.PERMISSION: "waits on a permission",
    Reason.QUESTION: "waits on a question",
    Reason.CRASHED: "crashed",
    Reason.OVER_CAP: "broke a cap",
    Reason.CHANGE_REFUSED: "a change will not land",
    Reason.BUDGET_WARNING: "80% of a budget spent",
    Reason.BUDGET_SPENT: "budget spent",
    Reason.RATE_LIMITED: "held by a rate limit",
    Reason.RUN_ENDED: "run ended",
}
"""Each reason in a few words, for titles."""

WAITS = (Reason.PERMISSION, Reason.QUESTION)
"""Reasons that last only while the worker waits: over once it moves on."""


class Notice(Strict):
    """One notification, as every channel gets it (the command hook and a JSON webhook get it as JSON)."""

    run: str
    worker: int | None = None
    agent: str | None = None
    reason: Reason
    text: str = Field(max_length=TEXT_CHARS)
    """What it is waiting on (or what happened), made safe: orch.escape.notice."""
    action: str
    """The command (or URL) that acts on it: `orch attach RUN N --write`, the report's path..."""
    ts: float
    """When it happened (the hook event's or the controller event's time)."""
    suppressed: int = 0
    """Notices of this reason held back by the rate limit since the last one delivered."""

    @property
    def key(self) -> str:
        """What makes two notices the same one (deduplicated within a window)."""
        return f"{self.reason.value}:{self.worker or 0}:{self.text}"

    def title(self) -> str:
        """`orch RUN: W2 (claude) waits on a permission`: orch's own words only."""
        who = f"W{self.worker} ({self.agent or 'agent'}) " if self.worker is not None else ""
        return f"orch {self.run}: {who}{WORDS[self.reason]}"

    def body(self) -> str:
        """The text, the suppressed count and the action, one line each."""
        lines = [self.text] if self.text else []
        if self.suppressed:
            lines.append(f"(and {self.suppressed} more held back)")
        lines.append(f"-> {self.action}")
        return "\n".join(lines)

    def line(self) -> str:
        """The whole notice on one line (a terminal's OSC text, a log)."""
        return " | ".join([self.title(), *self.body().splitlines()])
