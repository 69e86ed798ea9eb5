"""No flood reaches anyone: notices deduplicated and rate-limited per reason (a notifier serves one run).

A notice the same as one sent within DEDUPE seconds (same reason, worker and text) is dropped. Each
reason then has a bucket of BURST notices, refilled by one every REFILL seconds; a notice that finds it
empty is held back, and counted on the next one of its reason that goes (`suppressed`). The run's end
is never held back. A worker that fakes a permission prompt a thousand times gets three through, then
one a minute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orch.notify.notice import Notice, Reason

BURST = 3
REFILL = 60.0
DEDUPE = 600.0


@dataclass
class _Bucket:
    tokens: float
    at: float
    held: int = 0


@dataclass
class Throttle:
    burst: float = BURST
    refill: float = REFILL
    """Seconds per notice once the burst is spent (bench/notify.py sets both out of its way)."""
    buckets: dict[Reason, _Bucket] = field(default_factory=dict)
    sent: dict[str, float] = field(default_factory=dict)

    def admit(self, notice: Notice, now: float) -> Notice | None:
        """The notice to send (with the count held back before it), or None: dropped or held back."""
        if notice.reason is Reason.RUN_ENDED:
            return notice
        bucket = self.buckets.setdefault(notice.reason, _Bucket(self.burst, now))
        last = self.sent.get(notice.key)
        if last is not None and now - last < DEDUPE:
            return None
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) / self.refill)
        bucket.at = now
        if bucket.tokens < 1:
            bucket.held += 1
            return None
        bucket.tokens -= 1
        self.sent = {k: t for k, t in self.sent.items() if now - t < DEDUPE}
        self.sent[notice.key] = now
        held, bucket.held = bucket.held, 0
        return notice.model_copy(update={"suppressed": held}) if held else notice
