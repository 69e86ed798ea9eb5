"""Who is who under strict isolation, and the privileges a container's init gives up for good."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orch.errors import SandboxError
from orch.lead.changes.checkuids import CHECK_UIDS
from orch.run import uids
from orch.run.folder import MAX_WORKERS


def test_no_new_privs_holds_for_the_process_and_what_it_starts() -> None:
    """The init's first step where the engine cannot set it (a swarm task): the process and its children
    can never gain a privilege by exec again."""
    code = "import subprocess; from orch.run.uids import no_new_privs; no_new_privs(); subprocess.run(['cat', STATUS])"
    code = code.replace("STATUS", repr("/proc/self/status"))
    status = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "NoNewPrivs:\t1" in status


def test_drop_argv_keeps_only_what_it_names() -> None:
    argv = uids.drop_argv(1000, 1000, (*uids.SWITCH_CAPS, uids.READ_ALL))
    assert "--inh-caps=-all,+setuid,+setgid,+setpcap,+dac_read_search" in argv
    assert "--no-new-privs" in argv and argv[-1] == "--"


def test_a_runs_range_is_its_names_far_from_host_users_subuids_and_2_31() -> None:
    base = uids.range_base("demo", set())
    assert base == uids.range_base("demo", set()) != uids.range_base("other", set())  # a name's, every time
    assert base >= uids.RANGES_FIRST and base + uids.RANGE_SIZE <= uids.RANGES_END <= 2**31
    assert (base - uids.RANGES_FIRST) % uids.RANGE_SIZE == 0
    assert uids.RANGES_FIRST > 600_100_000  # past useradd's last subuid range (SUB_UID_MAX)
    # Room for the workers, the container's checks' uid and a root run's check pool (checkuids.first_uid on).
    assert MAX_WORKERS + 2 + CHECK_UIDS <= uids.RANGE_SIZE


def test_a_range_another_run_overlaps_is_skipped() -> None:
    mine = uids.range_base("demo", set())
    beside = uids.range_base("demo", {mine})
    assert beside == mine + uids.RANGE_SIZE  # the next one
    assert uids.range_base("demo", {mine, beside}) == beside + uids.RANGE_SIZE
    # A base set by hand, off the ranges' boundaries, keeps both ranges it overlaps from a run.
    assert uids.range_base("demo", {mine + 5}) == beside + uids.RANGE_SIZE


def test_no_range_left_is_one_clear_error() -> None:
    every = {uids.RANGES_FIRST + i * uids.RANGE_SIZE for i in range(uids.RANGES)}
    with pytest.raises(SandboxError, match="every worker uid range is taken"):
        uids.range_base("demo", every)


def test_an_engine_in_a_user_namespace_gets_small_ranges_below_its_map() -> None:
    """Rootless and userns-remap engines map only uids below 65536: each run still gets a range of its own there
    (no longer every run the default's), holding neither the run's uid nor the gateway's."""
    base = uids.range_base("demo", set(), mapped=True)
    assert base >= uids.MAPPED_FIRST and base + uids.MAPPED_SIZE <= uids.MAPPED_END < 61000
    assert MAX_WORKERS + 1 < uids.MAPPED_SIZE  # the workers and the checks' uid
    assert uids.range_base("demo", {base}, mapped=True) == base + uids.MAPPED_SIZE
    inside = base + 7  # a run's uid that falls in the name's range
    assert uids.range_base("demo", set(), mapped=True, reserved={inside}) == base + uids.MAPPED_SIZE
    every = {uids.MAPPED_FIRST + i * uids.MAPPED_SIZE for i in range((uids.MAPPED_END - uids.MAPPED_FIRST) // 128)}
    with pytest.raises(SandboxError, match="every worker uid range is taken"):
        uids.range_base("demo", every, mapped=True)
