"""`orch run --replay`'s cassette (orch.recording.plan): the plan it takes from a recording, and the checks
that turn a wrong, missing or corrupt cassette into one line, exit 2, nothing created."""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pytest
import yaml

from orch.errors import UsageError
from orch.gateway.modeldir import Exchange, ExchangeKey
from orch.gateway.recording.exchanges import append_exchange
from orch.jobs.state import Assignment, ControllerState, Job, save_state
from orch.lead.controller import initial_state, write_spec
from orch.recording import plan
from orch.recording.transfer import spec_fingerprint
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import runs_dir
from orch.run.records import ControllerEvent
from orch.spec.model import FailOn, FleetSpec, Role, TaskSpec
from tests.helpers import orch, run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def _spec(workdir: Path, goal: str = "determine whether g holds") -> FleetSpec:
    return FleetSpec(workdir=workdir, tasks=[TaskSpec(id="t1", goal=goal)], workers=2, offline=True)


def _exchange(worker: int) -> Exchange:
    return Exchange(
        seq=1,
        ts=1.0,
        worker=worker,
        method="POST",
        path="/v1/messages",
        request={"messages": [{"role": "user", "content": "hi"}]},
        status=200,
        stream=False,
        body="{}",
        key=ExchangeKey(kind="side", conversation="c", turn=1),
    )


def _recording(tmp_path: Path, spec: FleetSpec, name: str = "recorded") -> RunFolder:
    """A run folder as a finished `orch run` leaves it: spec, state, events, and a recording."""
    run = RunFolder.for_name(name)
    run.create(run_info(name, workers=2))
    write_spec(run, spec)
    state = initial_state(run, spec)
    state.nonce = "c0ffee00"
    save_state(run, state)
    for worker, job in ((2, "t1"), (1, "t1-F1.v1"), (2, "t1-F2.v1")):
        run.log_event(ControllerEvent(event=Event.ASSIGNED, worker=worker, data={"job": job, "role": "x"}))
    run.model_dir.mkdir()
    append_exchange(run.exchanges(1), _exchange(1))
    return run


def test_a_cassette_gives_the_nonce_and_the_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    run = _recording(tmp_path, spec)
    for where in ("recorded", str(run.root)):  # by run name, or by path
        cassette = plan.load(where, spec.model_copy(update={"name": "other", "workdir": tmp_path / "elsewhere"}))
        assert cassette.root == run.root and cassette.nonce == "c0ffee00"
        assert cassette.plan == [Assignment(job="t1", worker=2), Assignment(job="t1-F1.v1", worker=1),
                                 Assignment(job="t1-F2.v1", worker=2)]  # fmt: skip
    state = initial_state(RunFolder.for_name("new"), spec, cassette)
    assert (state.nonce, state.replay_of, state.replay) == ("c0ffee00", str(run.root), cassette.plan)


def test_without_events_the_plan_comes_from_the_recorded_state() -> None:
    state = ControllerState(run="r")
    state.jobs = [
        Job(id="late", role=Role.VERIFIER, worker=1, sent_at=20.0),
        Job(id="never", role=Role.VERIFIER),
        Job(id="early", role=Role.FINDER, worker=2, sent_at=10.0),
    ]
    assert plan.plan_from_state(state) == [Assignment(job="early", worker=2), Assignment(job="late", worker=1)]


def _break(kind: str, run: RunFolder) -> None:
    if kind == "no-fleet-spec":
        run.fleet_spec.unlink()
    elif kind == "corrupt-state":
        run.controller_state.write_text("{not json")
    elif kind == "no-recording":
        run.exchanges(1).unlink()
    elif kind == "corrupt-recording":
        run.exchanges(1).write_bytes(gzip.compress(b"not an exchange\n"))


BROKEN = {
    "another-spec": "was made from another spec (it differs in: tasks)",
    "no-fleet-spec": "is not a recording of `orch run`: it has no fleet.json",
    "corrupt-state": "controller.json is unreadable",
    "no-recording": "has no recording",
    "corrupt-recording": "exchanges-1.jsonl.gz",
}


@pytest.mark.parametrize(("kind", "message"), BROKEN.items(), ids=BROKEN.keys())
def test_a_cassette_that_will_not_do_is_one_line(tmp_path: Path, kind: str, message: str) -> None:
    spec = _spec(tmp_path)
    run = _recording(tmp_path, spec)
    _break(kind, run)
    asked = _spec(tmp_path, goal="something else") if kind == "another-spec" else spec
    with pytest.raises(UsageError) as caught:
        plan.load(str(run.root), asked)
    assert message in str(caught.value), caught.value
    assert "\n" not in caught.value.one_line()


def test_no_such_cassette(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no recording at"):
        plan.load(str(tmp_path / "nope"), _spec(tmp_path))


@pytest.mark.parametrize("kind", ["missing", "another-spec"])
def test_orch_run_replay_of_a_bad_cassette_creates_nothing(tmp_path: Path, kind: str) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    recorded = _spec(workdir.resolve(), goal="something else")
    where = str(_recording(tmp_path, recorded).root) if kind == "another-spec" else str(tmp_path / "nope")
    spec_file = tmp_path / "fleet.yaml"
    spec_file.write_text(yaml.safe_dump({"workdir": str(workdir), "offline": True, "workers": 2, "tasks": [
        {"id": "t1", "goal": "determine whether g holds"}]}))  # fmt: skip
    result = orch("run", spec_file, "--local", "--replay", where)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    left = sorted(p.name for p in runs_dir().iterdir()) if runs_dir().is_dir() else []
    assert left == (["recorded"] if kind == "another-spec" else [])


def test_a_replay_may_fail_on_other_findings_than_its_recording() -> None:
    """`orch run --replay FILE --fail-on high` (the action's `fail-on`): which confirmed findings fail the run asks
    the models nothing, so the recording still fits."""
    spec = FleetSpec(tasks=[TaskSpec(goal="g")])
    stricter = spec.model_copy(update={"fail_on": FailOn.HIGH})
    assert plan.spec_differences(stricter, spec) == [] and spec_fingerprint(stricter) == spec_fingerprint(spec)


def test_a_run_that_does_not_replay_loads_no_replay_code() -> None:
    """`orch run` imports this module for every run; the replayer (the gateway's APIs, normalising, translating)
    is imported only by a replay's `load`, not at the module's top."""
    tree = ast.parse(Path(plan.__file__).read_text())
    top = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert "orch.recording.plan" not in top and "orch.jobs.state" in top  # what the module's top imports
    assert "orch.gateway.recording.replay" not in top
