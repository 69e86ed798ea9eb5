"""`orch record export NAME -o FILE` and `orch run SPEC --replay FILE`: a recording that travels.

The file (orch.gateway.recording.archive: one gzip stream, a header line, then the exchanges) holds everything a
replay reads from a recorded run folder: the exchanges, the spec it was made from and its fingerprint,
the recorded controller's nonce and plan (who took which job, in order), where it ran (its run folder
and workdir, which answers name), and the orch and agent versions. Nothing else: no run.json, no gateway
state, no logs, so no credential and no worker token can ride along.

A replay from a file is checked before anything is created: the file whole (gzip CRC, every line a valid
record), the spec the same but for its name and workdir, and the same orch and agent versions (another
agent version asks other questions, so the replay would miss). Each refusal is one line naming the
difference.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from orch import __version__
from orch.agents.registry import get_adapter
from orch.errors import UsageError
from orch.gateway.recording import archive
from orch.gateway.recording.exchanges import cassette_exchanges, recorded_folders
from orch.jobs.state import Assignment, load_state
from orch.recording import plan
from orch.run.folder import RunFolder
from orch.run.records import Strict, utcnow
from orch.spec.model import FleetSpec
from orch.text import first_error


class RecordingHeader(Strict):
    """Line 1 of an exported recording."""

    format: Literal["orch-recording"] = "orch-recording"
    version: Literal[1] = 1
    """archive.FORMAT and archive.VERSION (the gateway checks them before this model is read)."""
    run: str
    """The recorded run's name."""
    created: dt.datetime = Field(default_factory=utcnow)
    orch_version: str
    agents: dict[str, str | None]
    """Each agent of the fleet and its CLI version where the workers ran (None: not known)."""
    spec_fingerprint: str
    """sha256 of the spec as replay compares it (its name and workdir aside): `spec_fingerprint`."""
    spec: FleetSpec
    run_dir: str
    """The recorded run folder where it ran: answers naming it are given the replay's instead."""
    workdir: str
    nonce: str = Field(pattern=r"^[0-9a-f]{4,64}$")
    """The recorded controller's (hex): it goes into every brief, so a crafted file cannot put text there."""
    plan: list[Assignment]
    exchanges: int = Field(ge=1)


@dataclass(frozen=True)
class Exported:
    path: Path
    exchanges: int
    size: int


def spec_fingerprint(spec: FleetSpec) -> str:
    """What a recording must match: the spec but for its name and workdir (plan.IGNORED)."""
    comparable = json.loads(spec.model_dump_json())
    text = json.dumps({k: v for k, v in comparable.items() if k not in plan.IGNORED}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def export(run: RunFolder, out: Path) -> Exported:
    """Write run's recording to `out` (atomically). A run that has not ended, or has no recording, is refused."""
    if out.exists() and out.is_dir():
        raise UsageError(f"{out} is a folder", hint="give the file to write, e.g. -o demo.orchrec.gz")
    state = load_state(run)
    if state.outcome is None:
        raise UsageError(
            f"run {run.name} has not ended: its recording is not whole yet",
            hint=f"orch wait / orch run --resume {run.name}",
        )
    spec = plan.read_spec_of(run.root)
    cassette = plan.load(str(run.root), spec)  # the same checks as a replay of the run folder
    exchanges = cassette_exchanges(run.root)
    recorded_run, recorded_workdir = recorded_folders(run.root)
    info = run.info()
    agents: dict[str, str | None] = {agent: info.agent_versions.get(agent) for agent in info.agents()}
    if info.agent_version and agents.get(info.agent) is None:  # run.json of a run before agent_versions
        agents[info.agent] = info.agent_version
    header = RecordingHeader(
        run=run.name,
        orch_version=info.orch_version,
        agents=agents,
        spec_fingerprint=spec_fingerprint(spec),
        spec=spec,
        run_dir=recorded_run,
        workdir=recorded_workdir or str(spec.workdir),
        nonce=cassette.nonce,
        plan=cassette.plan,
        exchanges=len(exchanges),
    )
    try:
        count = archive.write(out, json.loads(header.model_dump_json()), exchanges)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Exported(out, count, out.stat().st_size)


def current_versions(spec: FleetSpec, pinned_agents: bool) -> dict[str, str | None]:
    """The agent CLI versions a run of `spec` would get: on this machine its binaries' own; on a backend whose
    workers run orch's pinned versions (`Backend.pinned_agents`: the worker image's), those."""
    agents = dict.fromkeys(group.agent for group in spec.groups())
    out: dict[str, str | None] = {}
    for agent in agents:
        adapter = get_adapter(agent)
        pinned = adapter.facts.install.version if adapter.facts.install is not None else None
        out[agent] = pinned if pinned_agents and pinned else adapter.version()
    return out


def version_differences(header: RecordingHeader, versions: Mapping[str, str | None]) -> list[str]:
    """`what: here (recorded: there)` for each version that differs; one unknown on either side is no difference."""
    differ = []
    if header.orch_version != __version__:
        differ.append(f"orch {__version__} (recorded: {header.orch_version})")
    for agent, recorded in header.agents.items():
        mine = versions.get(agent)
        if recorded and mine and recorded != mine:
            differ.append(f"{agent} {mine} (recorded: {recorded})")
    return differ


def read_header(path: Path) -> tuple[RecordingHeader, int]:
    """The file's header, validated, and how many exchanges it holds (all of them checked)."""
    raw, exchanges = archive.read(path)
    try:
        header = RecordingHeader.model_validate(raw)
    except ValidationError as exc:
        raise UsageError(
            f"corrupt recording {path}: header: {first_error(exc)}",
            hint="export it again with `orch record export`",
        ) from None
    if header.exchanges != len(exchanges):
        raise UsageError(
            f"corrupt recording {path}: the header says {header.exchanges} exchanges, it holds {len(exchanges)}"
        )
    return header, len(exchanges)


def load_file(path: Path, spec: FleetSpec, versions: Mapping[str, str | None]) -> plan.Cassette:
    """The exported recording at `path`, checked against the spec and the versions to replay with."""
    header, _ = read_header(path)
    if header.spec_fingerprint != spec_fingerprint(spec):
        differ = plan.spec_differences(spec, header.spec) or ["its fingerprint"]
        raise UsageError(
            f"the recording {path} was made from another spec (it differs in: {', '.join(differ)})",
            hint="replay a recording with the spec it was made from",
        )
    differ = version_differences(header, versions)
    if differ:
        raise UsageError(
            f"the recording {path} was made with other versions: {'; '.join(differ)}",
            hint="install the recorded versions, or record again with these",
        )
    return plan.Cassette(root=path.resolve(), nonce=header.nonce, plan=list(header.plan))


def cassette(where: str, spec: FleetSpec, pinned_agents: bool) -> plan.Cassette:
    """`--replay WHERE`: an exported recording file, else a run (name or folder)."""
    path = Path(where).expanduser()
    if path.is_file():
        return load_file(path, spec, current_versions(spec, pinned_agents))
    return plan.load(where, spec)
