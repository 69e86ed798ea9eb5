"""orch.notify.throttle: no flood reaches anyone, whatever a worker fakes."""

from __future__ import annotations

import pytest

from orch.notify.notice import Notice, Reason
from orch.notify.throttle import BURST, DEDUPE, REFILL, Throttle

pytestmark = pytest.mark.pure


def notice(text: str, reason: Reason = Reason.PERMISSION, worker: int = 1) -> Notice:
    return Notice(run="r", worker=worker, reason=reason, text=text, action="orch attach r 1 --write", ts=0.0)


def test_a_worker_faking_a_thousand_prompts_gets_three_through_then_one_a_minute() -> None:
    throttle = Throttle()
    sent = [throttle.admit(notice(f"ask {i}"), now=0.0) for i in range(1000)]
    assert sum(s is not None for s in sent) == BURST
    later = throttle.admit(notice("ask again"), now=REFILL)
    assert later is not None and later.suppressed == 1000 - BURST  # says what was held back
    assert throttle.admit(notice("and again"), now=REFILL + 1) is None


def test_the_same_notice_is_sent_once_within_the_window() -> None:
    throttle = Throttle()
    assert throttle.admit(notice("same"), now=0.0) is not None
    assert throttle.admit(notice("same"), now=DEDUPE - 1) is None
    assert throttle.admit(notice("same", worker=2), now=1.0) is not None  # another worker's is another notice
    assert throttle.admit(notice("same"), now=DEDUPE + 1) is not None


def test_reasons_have_their_own_buckets_and_the_end_is_never_held() -> None:
    throttle = Throttle()
    for i in range(BURST):
        throttle.admit(notice(f"ask {i}"), now=0.0)
    assert throttle.admit(notice("out", Reason.CRASHED), now=0.0) is not None
    for i in range(10):
        assert throttle.admit(notice(f"end {i}", Reason.RUN_ENDED), now=0.0) is not None
