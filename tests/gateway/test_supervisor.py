"""The supervisor's restart policy (tenacity): a server child that keeps dying young is restarted after a
pause doubling from 0.1 s to 5 s; a long life resets it; a failure at start is not retried. (The real
restarts of a killed child: tests/gateway/test_faults.py, tests/fleet/test_gateway.py.)"""

from __future__ import annotations

import pytest

from orch.errors import OrchError
from orch.gateway.supervisor import restarts

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_a_child_dying_young_is_restarted_after_a_doubling_pause_of_at_most_5_s() -> None:
    pauses: list[float] = []
    young = iter([True] * 9 + [False])
    restarts(pauses.append)(lambda: next(young))
    assert pauses == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert next(young, None) is None  # the long life ended the streak


def test_a_long_life_restarts_at_once_and_the_next_streak_starts_at_0_1_s() -> None:
    pauses: list[float] = []
    lives = iter([True, True, False, True, False])
    for _streak in range(2):  # the supervisor's loop: one `restarts` per streak
        restarts(pauses.append)(lambda: next(lives))
    assert pauses == pytest.approx([0.1, 0.2, 0.1])
    assert next(lives, None) is None


def test_a_failed_start_is_raised_as_it_is() -> None:
    def fails() -> bool:
        raise OrchError("the gateway's server did not start (exit 1)")

    with pytest.raises(OrchError, match="did not start"):
        restarts(lambda _: None)(fails)
