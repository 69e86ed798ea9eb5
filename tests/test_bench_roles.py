"""The `roles` benchmark's accounting (bench/taskstats.py, bench/cpuwindow.py, bench/rolemap.py): the kernel's
exit record read at its fixed offsets, each process's share of a window from its boundaries and its exits, the
fleet told from strangers by its line, and each process given its role. Synthetic inputs: no process starts."""

from __future__ import annotations

import struct

import pytest

from bench import rolemap
from bench.cpuwindow import Live, Mark, Proc, attribute
from bench.taskstats import Exit, parse

pytestmark = pytest.mark.pure


def _stats(pid: int, tgid: int, ppid: int, comm: bytes, utime_us: int, stime_us: int, version: int = 16) -> bytes:
    raw = bytearray(560)
    struct.pack_into("=H", raw, 0, version)
    raw[80 : 80 + len(comm)] = comm
    struct.pack_into("=IIII", raw, 120, 0, 0, pid, ppid)
    struct.pack_into("=QQ", raw, 152, utime_us, stime_us)
    struct.pack_into("=Q", raw, 344, 1_700_000_000)
    struct.pack_into("=I", raw, 368, tgid)
    return bytes(raw)


def test_an_exit_record_is_read_at_the_kernels_offsets() -> None:
    record = parse(_stats(12, 10, 9, b"python3", 30_000, 8_000))
    assert record == Exit(pid=12, tgid=10, ppid=9, uid=0, comm="python3", started=1_700_000_000.0, cpu=0.038)
    assert parse(_stats(12, 10, 9, b"x", 1, 1, version=12)) is None  # no ac_tgid before version 13
    assert parse(b"\x10\x00" + b"\x00" * 100) is None


def _live(
    pid: int,
    ppid: int,
    comm: str,
    cpu: float,
    argv: tuple[str, ...] = (),
    threads: dict[int, tuple[str, float]] | None = None,
) -> Live:
    return Live(pid, ppid, comm, argv, 100.0, cpu, threads or {pid: (comm, cpu)})


def _exit(pid: int, tgid: int, ppid: int, comm: str, cpu: float) -> Exit:
    return Exit(pid, tgid, ppid, 0, comm, 100.0, cpu)


def test_a_window_counts_each_process_once_from_its_boundaries_and_exits() -> None:
    """A controller alive throughout, an agent born inside, its short hook (two processes: exec'd shell and
    python), a thread of the controller ending inside, a stranger's process, and an orphan the bench reaped."""
    begin = Mark(
        0.0,
        0,
        0.0,
        {10: _live(10, 1, "orch", 1.0, ("python3", "orch", "run"), {10: ("orch", 0.6), 11: ("orch-watchdog", 0.4)})},
    )
    end_live = {
        10: _live(10, 1, "orch", 1.5, ("python3", "orch", "run"), {10: ("orch", 0.9), 11: ("orch-watchdog", 0.6)}),
        20: _live(20, 10, "claude", 2.0),
    }
    exits = [
        _exit(30, 30, 20, "python3", 0.03),  # the hook, under the agent's shell
        _exit(29, 29, 20, "sh", 0.01),
        _exit(12, 10, 1, "orch", 0.2),  # a thread of the live controller: in its own total already
        _exit(40, 40, 7777, "make", 5.0),  # a stranger
        _exit(50, 50, 999, "cat", 0.02),  # re-parented to the bench (its reaper)
    ]
    got = {p.pid: p for p in attribute(begin, Mark(1.0, len(exits), 3.0, end_live), exits, root=999)}
    assert set(got) == {10, 20, 30, 29, 50}
    assert got[10].cpu == pytest.approx(0.5) and got[10].threads["orch-watchdog"] == pytest.approx(0.2)
    assert got[20].cpu == 2.0 and not got[20].exited
    assert got[30].exited and got[30].parent is got[20]


def test_a_process_alive_at_the_start_and_gone_at_the_end_counts_what_it_used_inside() -> None:
    begin = Mark(0.0, 0, 0.0, {10: _live(10, 1, "relay", 1.0, threads={10: ("relay", 0.7), 11: ("pool", 0.3)})})
    exits = [_exit(11, 10, 1, "pool", 0.5), _exit(10, 10, 1, "relay", 0.9)]
    (relay,) = attribute(begin, Mark(1.0, 2, 0.4, {}), exits, root=999)
    assert relay.cpu == pytest.approx(0.4) and relay.exited


def _tree(*chain: tuple[str, tuple[str, ...]]) -> Proc:
    """The last of a chain of processes, each the parent of the next."""
    parent = None
    for pid, (comm, argv) in enumerate(chain, start=100):
        proc = Proc(pid, pid - 1, comm, argv, 1.0, not argv, parent=parent)
        parent = proc
    assert parent is not None
    return parent


PANE = [("tmux: server", ("tmux",)), ("bwrap", ("bwrap",)), ("bwrap", ("bwrap",)), ("sh", ("sh", "-c", "x"))]


@pytest.mark.parametrize(
    ("chain", "role"),
    [
        ([*PANE, ("claude", ("claude",))], rolemap.AGENT),
        ([*PANE, ("claude", ("claude",)), ("bash", ()), ("git", ())], rolemap.AGENT),
        ([*PANE, ("claude", ("claude",)), ("sh", ()), ("python3", ())], rolemap.HOOKS),
        ([*PANE, ("claude", ("claude",)), ("sh", ()), ("mv", ())], rolemap.HOOKS),  # the status line
        ([*PANE, ("claude", ("claude",)), ("orch-hook", ())], rolemap.HOOKS),
        ([*PANE, ("claude", ("claude",)), ("bash", ()), ("orch", ())], rolemap.CLI),
        ([*PANE, ("claude", ("claude",)), ("tmux: client", ())], rolemap.AGENT),  # the agent's own tmux probe
        (PANE, rolemap.PORTALS),
        (PANE[:2], rolemap.SANDBOX),
        ([*PANE, ("python3", ("python3", "-S", "/x/portal.py"))], rolemap.PORTALS),
        ([("orch", ("python3", "/v/orch", "run", "s.yaml"))], rolemap.CONTROLLER),
        ([("orch", ("python3", "/v/orch", "run", "s.yaml")), ("tmux: client", ())], rolemap.TMUX),
        ([("orch", ("python3", "/v/orch", "run", "s.yaml")), ("claude", ())], rolemap.CONTROLLER),  # --version
        ([("orch", ("python3", "/v/orch", "kill", "r"))], rolemap.CLI),
        ([("python3", ("python3", "-m", "orch.gateway.server"))], rolemap.GATEWAY),
        ([("python3", ("python3", "-m", "orch.offline.modelserver"))], rolemap.MODEL),
        ([("python3", ("python3", "-m", "orch.backends.local.relay", "/r", "u"))], rolemap.RELAY),
        ([("tmux: server", ("tmux",)), ("cat", ())], rolemap.TMUX),
        ([("make", ())], rolemap.OTHER),
    ],
)
def test_each_process_has_its_role(chain: list[tuple[str, tuple[str, ...]]], role: str) -> None:
    assert rolemap.role(_tree(*chain)) == role


def test_the_watchdog_thread_is_split_off_and_the_model_left_out_of_the_share() -> None:
    controller = Proc(1, 0, "orch", ("python3", "orch", "run"), 1.0, False, {"orch": 0.7, "orch-watchdog": 0.3})
    agent = _tree(*PANE, ("claude", ("claude",)))
    agent.cpu = 8.0
    model = Proc(3, 0, "python3", ("python3", "-m", "orch.offline.modelserver"), 5.0, False)
    cpu, count = rolemap.split([controller, agent, model])
    assert cpu[rolemap.CONTROLLER] == pytest.approx(0.7) and cpu[rolemap.WATCHDOG] == pytest.approx(0.3)
    assert count[rolemap.CONTROLLER] == 1 and count[rolemap.MODEL] == 1
    assert rolemap.orch_share(cpu) == pytest.approx(1.0 / 9.0)
