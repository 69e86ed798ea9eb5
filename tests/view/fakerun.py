"""A run folder as `orch run` leaves it mid-way, written record by record (no fleet started): for the view's
pure tests. The files are the real records (RunInfo, ControllerState, FleetSpec, UsageSnapshot, hook lines)."""

from __future__ import annotations

import json
import time

from orch.gateway.modeldir import UsageLine, UsageSnapshot, WorkerUsage
from orch.jobs.findings import Finding, Severity, Verdict, VerdictReport
from orch.jobs.state import (
    AcceptedFinding,
    AcceptedVerdict,
    ChangeBook,
    ChangeStage,
    ControllerState,
    Job,
    JobStatus,
    Stance,
    WorkerBook,
    save_state,
)
from orch.lead.controller import write_spec
from orch.run import bus
from orch.run.events import Event
from orch.run.files import append_line, atomic_write
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunStatus
from orch.spec.model import FleetSpec, Role
from tests.helpers import run_info


def hook(run: RunFolder, n: int, name: str, ts: float | None = None, **fields: object) -> None:
    line = {"ts": ts if ts is not None else time.time(), "hook_event_name": name, **fields}
    append_line(run.state(n), json.dumps(line))


HOSTILE_REASON = 'scope: <script>window.pwned=1</script><img src=x onerror="window.pwned=1">'
"""A rejected change's reason as a lying writer could shape it (its detail names the files it touched)."""


def lead_run(name: str = "lr", workers: int = 3, changes: bool = False) -> RunFolder:
    """A lead run: worker 1 found F1 (done), workers 2 and 3 verify it (one CONFIRMED, one still on it).
    With `changes`, worker 1 also wrote two changes: `fix` landed, `fix2` was REJECTED with a hostile reason."""
    run = RunFolder.for_name(name)
    info = run_info(name, workers=workers, workdir="/tmp")
    info.status = RunStatus.RUNNING
    run.create(info)
    t0 = time.time() - 120
    spec = FleetSpec.model_validate(
        {"agent": "scripted", "workers": workers, "tasks": [{"id": "pages", "goal": "look"}],
         "budget": {"max_cost_usd": 5.0}, "timeouts": {"run": 3600}}
    )  # fmt: skip
    write_spec(run, spec)
    finding = Finding(id="F1", claim="paginate skips the first page", severity=Severity.HIGH)
    state = ControllerState(
        run=name,
        started=t0,
        jobs=[
            Job(id="pages", role=Role.FINDER, task="pages", worker=1, status=JobStatus.DONE, sent_at=t0 + 1,
                ended_at=t0 + 40),
            Job(id="pages-F1.v1", role=Role.VERIFIER, finding="pages-F1", round=2, stance=Stance.VERIFY, worker=2,
                status=JobStatus.DONE, sent_at=t0 + 41, ended_at=t0 + 80),
            Job(id="pages-F1.v2", role=Role.VERIFIER, finding="pages-F1", round=2, stance=Stance.VERIFY, worker=3,
                status=JobStatus.RUNNING, sent_at=t0 + 41),
        ],
        workers=[
            WorkerBook(n=1, agent="scripted", model="claude-a"),
            WorkerBook(n=2, agent="scripted", model="claude-b"),
            WorkerBook(n=3, agent="scripted", model="claude-b", job="pages-F1.v2"),
            *[WorkerBook(n=n, agent="scripted") for n in range(4, workers + 1)],
        ],
        findings=[AcceptedFinding(id="pages-F1", job="pages", task="pages", finder=1, finding=finding)],
        verdicts=[
            AcceptedVerdict(job="pages-F1.v1", finding="pages-F1", verifier=2, round=2, stance=Stance.VERIFY,
                            report=VerdictReport(job="pages-F1.v1", finding="F1", verdict=Verdict.CONFIRMED,
                                                 reason="reproduced")),
        ],
    )  # fmt: skip
    if changes:
        state.changes = [
            ChangeBook(id="fix", task="fix", writer=1, base="b0", stage=ChangeStage.LANDED, commit="c1"),
            ChangeBook(id="fix2", task="fix", writer=1, base="b1", stage=ChangeStage.REJECTED, reason=HOSTILE_REASON),
        ]
    save_state(run, state)
    usage = UsageSnapshot(
        offline=True,
        billed=False,
        pricing="shipped",
        updated=time.time(),
        workers={
            1: WorkerUsage(cost_usd=0.5, by_job={"pages": UsageLine(cost_usd=0.5)}),
            2: WorkerUsage(cost_usd=0.25, by_job={"pages-F1.v1": UsageLine(cost_usd=0.25)}),
            3: WorkerUsage(cost_usd=0.125),
        },
        total=UsageLine(cost_usd=0.875),
    )
    run.model_dir.mkdir(exist_ok=True)
    atomic_write(run.model_usage, usage.model_dump_json())
    for n in range(1, workers + 1):
        hook(run, n, "SessionStart", ts=t0)
    hook(run, 1, "Stop", ts=t0 + 40)
    hook(run, 3, "UserPromptSubmit", ts=t0 + 42, prompt="verify")
    hook(run, 3, "PreToolUse", ts=t0 + 50, tool_name="Bash")
    run.done(1).touch()
    bus.post(run, 1, "found F1 in pages.py")
    bus.post(run, 3, "checking F1 now")
    run.log_event(ControllerEvent(event=Event.ASSIGNED, worker=1, data={"job": "pages", "role": "finder"}))
    run.log_event(ControllerEvent(event=Event.FINDING_ACCEPTED, worker=1,
                                  data={"finding": "pages-F1", "claim": "paginate skips the first page"}))  # fmt: skip
    return run
