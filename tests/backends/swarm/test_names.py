"""orch.backends.swarm.names: a run name Swarm's objects cannot carry is refused before anything is made."""

from __future__ import annotations

import pytest

from orch.backends.swarm.names import SWARM_NAME_MAX, check_name, collector_name, secret_name
from orch.errors import UsageError
from orch.run.folder import validate_name

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("name", ["a", "audit-shop", "team1_app", "x" * SWARM_NAME_MAX])
def test_a_name_swarm_takes_passes_and_its_objects_fit(name: str) -> None:
    check_name(name)
    assert len(collector_name(name)) <= 63 and len(secret_name(name, "orch-boot", 99)) <= 64


@pytest.mark.parametrize("name", ["audit.v2", "x" * (SWARM_NAME_MAX + 1), "trailing-", "under_"])
def test_a_run_name_valid_here_but_not_for_swarm_is_refused_in_one_line(name: str) -> None:
    validate_name(name)  # a run folder takes it
    with pytest.raises(UsageError) as caught:
        check_name(name)
    assert "\n" not in str(caught.value) and repr(name) in str(caught.value)
