"""A run's container's environment and its worker uid range (what needs no engine)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from orch.backends.docker import boot
from orch.run.records import ContainerOptions
from orch.settings.user import WORKER_UID_BASE

pytestmark = pytest.mark.pure


def test_a_user_who_set_the_uid_base_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_UID_BASE.name, "70000")
    assert boot.worker_uid_base(cast(Any, None), "demo", {70000}) == 70000  # the engine is not even asked


def test_the_container_gets_its_runs_range_or_a_records_from_before_ranges_the_default() -> None:
    env = boot.run_env(1000, 1000, ContainerOptions(worker_uid_base=0x7000_0400))
    assert env[WORKER_UID_BASE.name] == str(0x7000_0400)
    assert boot.run_env(1000, 1000, ContainerOptions())[WORKER_UID_BASE.name] == WORKER_UID_BASE.default


def test_a_containers_base_is_read_from_its_environment() -> None:
    assert boot.env_uid_base(["A=1", f"{WORKER_UID_BASE.name}=1879048192"]) == 1879048192
    assert boot.env_uid_base(["A=1"]) is None and boot.env_uid_base(None) is None
