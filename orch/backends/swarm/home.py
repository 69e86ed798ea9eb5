"""A swarm run's folder on the user's side, kept through the manager's engine alone: the run's first folder
and workspace put into its collector before its task starts, and everything after pulled back from the
collector's pass log (orch.backends.swarm.collector), pass after pass, in order.

The user's copy is applied the same passes the collector applied, so it ends the same folder, but for
run.json: the task's own (a container's record) is merged into this side's `SwarmRunInfo`, which keeps where
the run lives and how far its copy came.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import docker.errors
from docker.models.containers import Container

from orch.backends.docker.engine import explain
from orch.backends.docker.mounts import put_paths, put_tree
from orch.backends.swarm.collector import Home
from orch.backends.swarm.names import HOME_MOUNT
from orch.backends.swarm.receive import apply_pass
from orch.backends.swarm.record import SwarmRunInfo
from orch.backends.swarm.spec import uid_gid
from orch.errors import SandboxError
from orch.run.folder import RunFolder
from orch.run.records import RUN_INFO, RunStatus

HOME = Home(Path(HOME_MOUNT))


@dataclass(frozen=True)
class Pulled:
    """What a pull brought: the run's record now, how many passes, and how the run's task ended (None: it
    has not, as far as the collector knows)."""

    info: SwarmRunInfo
    passes: int
    ended: int | None


def seed(container: Container, run: RunFolder, info: SwarmRunInfo, workdir: Path) -> None:
    """The run folder as made here (its run.json the task's own) and the workdir into the collector's volume,
    owned by the run's uid there."""
    uid, gid = uid_gid(info.swarm)
    put_tree(container, str(HOME.run), run.root, uid, gid)
    put_tree(container, str(HOME.workspace), workdir, uid, gid)


def push(container: Container, info: SwarmRunInfo, files: list[Path]) -> None:
    """Files of the run folder's top level (the spec, the controller's state, the run's repository) into the
    collector's copy, before the task that reads them starts."""
    uid, gid = uid_gid(info.swarm)
    put_paths(container, str(HOME.run), files, uid, gid)


Reader = Callable[[Path], IO[bytes]]
"""One file of the collector's volume, by its path there (empty when it has none)."""


def pull(read: Reader, run: RunFolder, info: SwarmRunInfo, ack: Callable[[int], None] | None = None) -> Pulled:
    """The collector's passes this copy has not taken yet, applied in order; run.json merged. `ack`: told the
    last pass applied, once this copy has it (the collector then drops the passes up to it from its log)."""
    state = json.loads(read(HOME.state).read() or b"{}")
    seq, last = info.swarm.seq, int(state.get("seq", 0))
    merged = info
    for number in range(seq + 1, last + 1):
        body = read(HOME.pass_file(number))
        done = apply_pass(run.root, body, divert=lambda rel: rel == run.run_json.name)
        if run.run_json.name in done.changed:
            merged = _merge(_member(body, run.run_json.name), merged)
        for rel in done.stale:  # this copy's file differs from the collector's: take the collector's whole
            _replace(run.root / rel, read(HOME.run / rel))
        merged.swarm.seq = number
    run.write_info(merged)
    if ack is not None and last > seq:
        ack(last)
    ended = state.get("ended") or {}
    life = merged.swarm.life
    code = int(ended["code"]) if life is not None and ended.get("life") == life.life else None
    return Pulled(merged, last - seq, code)


def acker(container: Container, info: SwarmRunInfo) -> Callable[[int], None]:
    """Tells the collector the last pass this copy applied (a file put into its volume through the manager's
    engine: nothing else can write there)."""
    uid, gid = uid_gid(info.swarm)

    def ack(seq: int) -> None:
        with tempfile.TemporaryDirectory(prefix="orch-ack-") as tmp:
            acked = Path(tmp) / HOME.acked.name
            acked.write_text(f"{seq}\n")
            put_paths(container, str(HOME.root), [acked], uid, gid)

    return ack


def reader(container: Container) -> Reader:
    """The collector's files, read through the manager's engine (its container is on the manager)."""
    return lambda path: _file(container, path)


def _merge(task_json: bytes, local: SwarmRunInfo) -> SwarmRunInfo:
    """The task's view of the run with this side's swarm record; a run this side marked lost or stopped
    stays so whatever its task last said."""
    task_info = RUN_INFO.validate_json(task_json)
    merged = SwarmRunInfo.of(task_info, swarm=local.swarm)
    merged.workdir = task_info.workdir
    if local.swarm.lost is not None or local.status is RunStatus.STOPPED:
        merged.status = local.status
    return merged


def _file(container: Container, path: Path) -> IO[bytes]:
    """One file of the collector's volume, through the manager's engine."""
    try:
        stream, _ = container.get_archive(str(path))
    except docker.errors.NotFound:
        return io.BytesIO(b"")
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot read {path} from the run's collector: {explain(exc)}") from exc
    buf = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (read and closed by the caller)
    for chunk in stream:
        buf.write(chunk)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        member = tar.next()
        data = tar.extractfile(member) if member is not None and member.isfile() else None
        out = io.BytesIO(data.read() if data is not None else b"")
    buf.close()
    return out


def _member(body: IO[bytes], name: str) -> bytes:
    body.seek(0)
    with tarfile.open(fileobj=body, mode="r:") as tar:
        data = tar.extractfile(name)
        return data.read() if data is not None else b""


def _replace(path: Path, data: IO[bytes]) -> None:
    tmp = path.with_name(f".{path.name}.orch-pull")
    tmp.write_bytes(data.read())
    tmp.replace(path)
