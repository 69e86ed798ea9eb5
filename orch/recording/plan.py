"""`orch run SPEC --replay RUN_OR_CASSETTE`: run a spec again against a recording of an earlier run
(this module: a run folder; an exported file, `orch record export`'s: orch.recording.transfer).

The run's gateway answers every model request from the recording (orch.gateway.recording.replay), so no model
API is called and nothing is billed. For the answers to fit, the replay does what the recorded
controller did: it reuses the recording's nonce (job tokens, and so briefs, are the same) and hands
each job to the worker that took it in the recording, in the order that worker took them (the plan;
orch.lead.decisions.pick follows it).

A cassette is checked before anything is created: it must be a run folder (or a copy of one) holding
the same fleet spec (its name and workdir aside), a controller state, and a readable recording.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orch.errors import UsageError
from orch.jobs.state import Assignment, ControllerState
from orch.run.events import Event
from orch.run.folder import NAME_RE, RunFolder
from orch.run.records import ControllerEvent
from orch.spec.model import FleetSpec
from orch.text import first_error

M = TypeVar("M", bound=BaseModel)

IGNORED = ("name", "workdir", "fail_on")
"""Spec fields a replay may change: the run's name, where the tree under audit lives (replay matching puts a
placeholder for it), and which confirmed findings fail the run (`--fail-on`: it asks the models nothing)."""


@dataclass(frozen=True)
class Cassette:
    root: Path
    """The recorded run folder (or a copy of one)."""
    nonce: str
    plan: list[Assignment]


def find(where: str) -> Path:
    """A path to a run folder (or a copy), else the name of a run."""
    path = Path(where).expanduser()
    if path.is_dir():
        return path.resolve()
    if NAME_RE.fullmatch(where) and RunFolder.for_name(where).root.is_dir():
        return RunFolder.for_name(where).root
    raise UsageError(
        f"no recording at {where!r}",
        hint="give a file from `orch record export`, a run name, or the path of a run folder (or a copy)",
    )


def load(where: str, spec: FleetSpec) -> Cassette:
    """The cassette at `where`, checked against the spec to replay; a one-line UsageError if it will not do."""
    root = find(where)
    recorded = read_spec_of(root)
    differ = spec_differences(spec, recorded)
    if differ:
        raise UsageError(
            f"the recording at {root} was made from another spec (it differs in: {', '.join(differ)})",
            hint="replay a recording with the spec it was made from",
        )
    state = _read(RunFolder(root).controller_state, ControllerState, root)
    # Here: a replay's modules (the gateway's APIs, normalising, translating) are for the runs that replay.
    from orch.gateway.recording.replay import Replayer

    Replayer(root, str(root), str(recorded.workdir))  # a missing, empty or corrupt recording says which file
    events = RunFolder(root).events
    plan = plan_from_events(_events(events)) if events.is_file() else []
    return Cassette(root=root, nonce=state.nonce, plan=plan or plan_from_state(state))


def read_spec_of(root: Path) -> FleetSpec:
    """The spec a recorded run folder was made from."""
    return _read(RunFolder(root).fleet_spec, FleetSpec, root)


def spec_differences(spec: FleetSpec, recorded: FleetSpec) -> list[str]:
    """The top-level spec fields (but IGNORED) in which two specs differ."""
    mine, theirs = _comparable(spec), _comparable(recorded)
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def _comparable(spec: FleetSpec) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(spec.model_dump_json())
    return {k: v for k, v in data.items() if k not in IGNORED}


def plan_from_events(events: Iterable[ControllerEvent]) -> list[Assignment]:
    """Who took which job, in the order the recorded controller handed them out (its ASSIGNED events)."""
    out = []
    for e in events:
        job = e.data.get("job")
        if e.event == Event.ASSIGNED and e.worker is not None and isinstance(job, str):
            out.append(Assignment(job=job, worker=e.worker))
    return out


def plan_from_state(state: ControllerState) -> list[Assignment]:
    """The same from the recorded controller state (no events file): by when each brief was sent."""
    taken = [j for j in state.jobs if j.worker is not None]
    taken.sort(key=lambda j: (j.sent_at is None, j.sent_at or 0.0))
    return [Assignment(job=j.id, worker=j.worker) for j in taken if j.worker is not None]


def _read(path: Path, model: type[M], root: Path) -> M:
    try:
        return model.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"{root} is not a recording of `orch run`: it has no {path.name}", hint="give a run folder (or a copy)"
        ) from None
    except (OSError, ValidationError, ValueError) as exc:
        first = first_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise UsageError(f"the recording's {path} is unreadable: {first}") from None


def _events(path: Path) -> list[ControllerEvent]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(ControllerEvent.model_validate_json(line))
        except ValidationError:
            continue  # a torn last line, or another version's event: the plan needs ASSIGNED lines only
    return out
