"""The user's copy of a swarm run's folder: the collector's logged passes applied in order make the run's
folder, the task's run.json merged into this side's record, a file the copy lost taken whole."""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO

from orch.backends.swarm import home
from orch.backends.swarm.names import HOME_MOUNT
from orch.backends.swarm.record import SwarmInfo, SwarmLife, SwarmRunInfo
from orch.backends.swarm.syncer import Link, Pusher
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, DockerRunInfo, LocalRunInfo, RunStatus
from tests.backends.swarm.conftest import TOKEN, Served


def _reader(served: Served) -> home.Reader:
    """The collector's volume read as the manager's engine reads it (by its path in the collector's task)."""

    def read(path: Path) -> IO[bytes]:
        local = served.home.root / path.relative_to(HOME_MOUNT)
        return io.BytesIO(local.read_bytes()) if local.is_file() else io.BytesIO(b"")

    return read


def _records(root: Path) -> tuple[DockerRunInfo, SwarmRunInfo]:
    planned = LocalRunInfo(name=root.name, agent="scripted", workers=1, workdir="/workspace", permission_mode="default",
                           tmux_socket="t", orch_version="0")  # fmt: skip
    task = DockerRunInfo.of(
        planned, container=ContainerInfo(name=f"orch-{root.name}", image="i", host_run_dir=str(root))
    )
    swarm = SwarmInfo(image="i", lives=[SwarmLife(life=1, service="s1", node="orch-sw-w1")])
    return task, SwarmRunInfo.of(task, swarm=swarm)


def test_passes_come_to_the_users_copy_with_run_json_merged(collector: Served, tmp_path: Path) -> None:
    task_run = RunFolder(tmp_path / "task" / "demo")
    task_info, mine = _records(task_run.root)
    task_info.status = RunStatus.RUNNING
    task_run.create(task_info)
    task_run.events.write_text('{"event": "a"}\n')
    pusher = Pusher(task_run, Link(collector.target, TOKEN, 1), {})
    assert pusher.once()
    with task_run.events.open("a") as f:
        f.write('{"event": "b"}\n')
    assert pusher.once()
    Link(collector.target, TOKEN, 1).end(0)

    users = RunFolder(tmp_path / "home" / "demo")
    users.create(mine)
    pulled = home.pull(_reader(collector), users, mine)
    assert pulled.passes == 2 and pulled.ended == 0 and pulled.info.swarm.seq == 2
    assert users.events.read_text() == '{"event": "a"}\n{"event": "b"}\n'
    merged = users.info()
    assert isinstance(merged, SwarmRunInfo) and merged.status is RunStatus.RUNNING  # the task's word
    assert merged.swarm.lives[0].node == "orch-sw-w1"  # this side's record kept
    assert home.pull(_reader(collector), users, merged).passes == 0


def test_a_run_marked_lost_here_stays_lost_and_a_diverged_file_is_taken_whole(
    collector: Served, tmp_path: Path
) -> None:
    task_run = RunFolder(tmp_path / "task" / "demo")
    task_info, mine = _records(task_run.root)
    task_info.status = RunStatus.RUNNING
    task_run.create(task_info)
    task_run.events.write_text("one\n")
    pusher = Pusher(task_run, Link(collector.target, TOKEN, 1), {})
    assert pusher.once()
    users = RunFolder(tmp_path / "home" / "demo")
    users.create(mine)
    mine = home.pull(_reader(collector), users, mine).info
    users.events.write_text("something this side wrote\n")  # as if the copy had gone its own way
    mine.swarm.lost, mine.status = "node orch-sw-w1 is down: heartbeat failure", RunStatus.FAILED
    with task_run.events.open("a") as f:
        f.write("two\n")
    task_run.write_info(task_info)
    assert pusher.once()
    after = home.pull(_reader(collector), users, mine).info
    assert users.events.read_text() == "one\ntwo\n" and after.status is RunStatus.FAILED


def test_passes_this_side_has_applied_leave_the_collectors_log(collector: Served, tmp_path: Path) -> None:
    task_run = RunFolder(tmp_path / "task" / "demo")
    task_info, mine = _records(task_run.root)
    task_run.create(task_info)
    pusher = Pusher(task_run, Link(collector.target, TOKEN, 1), {})
    users = RunFolder(tmp_path / "home" / "demo")
    users.create(mine)

    def ack(seq: int) -> None:  # what home.acker puts into the collector's volume through the manager's engine
        collector.home.acked.write_text(f"{seq}\n")

    def logged() -> list[int]:
        return sorted(int(p.stem) for p in collector.home.passes.glob("*.tar"))

    for n in range(3):
        with task_run.events.open("a") as f:
            f.write(f'{{"event": "e{n}"}}\n')
        assert pusher.once()
        if n == 0:
            mine = home.pull(_reader(collector), users, mine, ack).info  # takes pass 1, acks it
    assert logged() == [2, 3]  # the collector dropped the pass this side applied, at its next pass
    mine = home.pull(_reader(collector), users, mine, ack).info
    assert mine.swarm.seq == 3 and users.events.read_text() == '{"event": "e0"}\n{"event": "e1"}\n{"event": "e2"}\n'
    with task_run.events.open("a") as f:
        f.write('{"event": "e3"}\n')
    assert pusher.once() and logged() == [4]
