"""The verification policy: who may verify a finding, and what the verdicts add up to.

Rules (the reason orch exists: workers lie, so a finding counts only after another worker tried to
tear it apart):
- a finding's verifiers are never its finder; a worker verifies a finding at most once per round;
- with `prefer_other_agent`, a verifier of another agent or model than the finder is chosen when
  the fleet has one (the job waits for such a worker rather than taking a same-agent one); in round 3 a
  worker that did not already judge the finding in round 2 is preferred the same way;
- a round settles CONFIRMED (or REFUTED) when at least `quorum` valid verdicts say so and they
  outnumber the opposite verdict; anything else (too few valid verdicts, a split, UNVERIFIABLE) is
  UNVERIFIED;
- find-verify: round 2 decides. find-refute-confirm: round 2 tries to refute; survivors (not REFUTED)
  go to round 3, which must CONFIRM them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from orch.jobs.findings import Verdict
from orch.jobs.state import ControllerState, FindingStatus, Job, JobStatus, Stance
from orch.spec.model import FleetSpec, Role, Rounds

VERIFY_ROUND = 2
CONFIRM_ROUND = 3


def settle(verdicts: Iterable[Verdict], quorum: int) -> FindingStatus:
    votes = list(verdicts)
    confirmed = votes.count(Verdict.CONFIRMED)
    refuted = votes.count(Verdict.REFUTED)
    if confirmed >= quorum and confirmed > refuted:
        return FindingStatus.CONFIRMED
    if refuted >= quorum and refuted > confirmed:
        return FindingStatus.REFUTED
    return FindingStatus.UNVERIFIED


def round_status(state: ControllerState, finding: str, round_: int, quorum: int) -> FindingStatus:
    """PENDING while a job of that round is open, else what its valid verdicts settle to."""
    if any(not j.terminal for j in state.jobs_for(finding, round_)):
        return FindingStatus.PENDING
    return settle((v.report.verdict for v in state.verdicts_for(finding, round_)), quorum)


def finding_status(state: ControllerState, spec: FleetSpec, finding: str) -> FindingStatus:
    quorum = spec.verification.needed()
    first = round_status(state, finding, VERIFY_ROUND, quorum)
    if spec.verification.rounds is Rounds.FIND_VERIFY or first in (FindingStatus.PENDING, FindingStatus.REFUTED):
        return first
    if not state.jobs_for(finding, CONFIRM_ROUND):
        return FindingStatus.PENDING  # round 3 not created yet
    return round_status(state, finding, CONFIRM_ROUND, quorum)


def needs_confirm_round(state: ControllerState, spec: FleetSpec, finding: str) -> bool:
    """True once round 2 settled without refuting and round 3 has no jobs yet."""
    if spec.verification.rounds is not Rounds.FIND_REFUTE_CONFIRM or state.jobs_for(finding, CONFIRM_ROUND):
        return False
    first = round_status(state, finding, VERIFY_ROUND, spec.verification.needed())
    return first not in (FindingStatus.PENDING, FindingStatus.REFUTED)


def first_stance(spec: FleetSpec) -> Stance:
    return Stance.REFUTE if spec.verification.rounds is Rounds.FIND_REFUTE_CONFIRM else Stance.VERIFY


def job_id(finding: str, stance: Stance, slot: int) -> str:
    return f"{finding}.{stance.value[0]}{slot}"


def new_verification_jobs(state: ControllerState, finding: str, round_: int, stance: Stance, count: int) -> list[Job]:
    taken = {j.id for j in state.jobs_for(finding)}
    jobs: list[Job] = []
    slot = 1
    while len(jobs) < count:
        candidate = job_id(finding, stance, slot)
        if candidate not in taken:
            jobs.append(Job(id=candidate, role=Role.VERIFIER, finding=finding, round=round_, stance=stance))
        slot += 1
    return jobs


def eligible(state: ControllerState, job: Job, alive: Collection[int]) -> list[int]:
    """Workers allowed to take verification `job`: alive, not the finder, not already on it this round."""
    assert job.finding is not None
    finder = state.finding(job.finding).finder
    busy_with_it = {
        j.worker
        for j in state.jobs_for(job.finding, job.round)
        if j.id != job.id and j.worker is not None and j.status is not JobStatus.CANCELLED
    }
    return [n for n in sorted(alive) if n != finder and n not in busy_with_it]


def preference(state: ControllerState, spec: FleetSpec, job: Job, n: int) -> tuple[int, int]:
    """Lower is better: (same agent/model as the finder, already judged it in round 2)."""
    assert job.finding is not None
    finder = state.finding(job.finding).finder
    agent_models = spec.agent_models()
    same_agent = int(spec.verification.prefer_other_agent and agent_models.get(n) == agent_models.get(finder))
    judged = {j.worker for j in state.jobs_for(job.finding, VERIFY_ROUND) if j.status is JobStatus.DONE}
    again = int(job.round == CONFIRM_ROUND and n in judged)
    return same_agent, again


def choose_verifier(
    state: ControllerState, spec: FleetSpec, job: Job, alive: Collection[int], free: Collection[int]
) -> int | None:
    """The worker for verification `job` now, or None (wait). Never the finder."""
    return least_busy(state, eligible(state, job, alive), free, lambda n: preference(state, spec, job, n))


def least_busy(
    state: ControllerState, candidates: Iterable[int], free: Collection[int], rank: Callable[[int], tuple[int, ...]]
) -> int | None:
    """Of the candidates of the best (lowest) rank, the free one with the fewest jobs so far, then the lowest
    number; None when none of those is free: the job waits for one rather than go to a worse-ranked worker."""
    ranks = {n: rank(n) for n in candidates}
    if not ranks:
        return None
    best = min(ranks.values())
    ready = [n for n, r in ranks.items() if r == best and n in free]
    load = {n: sum(1 for j in state.jobs if j.worker == n) for n in ready}
    return min(ready, key=lambda n: (load[n], n), default=None)
