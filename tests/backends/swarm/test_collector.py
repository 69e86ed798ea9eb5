"""The collector over real HTTP on loopback: passes of the current life applied and logged, others refused,
the whole folder served back for a new task, and a stop between logging and applying caught up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.backends.swarm.collector import Home, State
from orch.backends.swarm.passes import baseline_of, make_pass
from orch.backends.swarm.receive import apply_pass
from orch.backends.swarm.syncer import Fenced, Link, Pusher
from orch.run.folder import RunFolder
from tests.backends.swarm.conftest import TOKEN, Served, serve


def _run(root: Path) -> RunFolder:
    run = RunFolder(root / "run")
    run.outbox(1).mkdir(parents=True)
    run.events.write_text('{"event": "a"}\n')
    run.result(1).write_text("found\n")
    return run


def _same(a: Path, b: Path) -> None:
    assert {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()} == {
        p.relative_to(b): p.read_bytes() for p in b.rglob("*") if p.is_file()
    }


def test_passes_come_home_in_order_and_are_logged(collector: Served, tmp_path: Path) -> None:
    run = _run(tmp_path)
    pusher = Pusher(run, Link(collector.target, TOKEN, 1), {})
    assert pusher.once()
    with run.events.open("a") as f:
        f.write('{"event": "b"}\n')
    assert pusher.once() and pusher.once()  # the third pass has nothing to send: none is made
    _same(run.root, collector.home.run)
    assert sorted(p.name for p in collector.home.passes.iterdir()) == ["00000001.tar", "00000002.tar"]
    assert State.load(collector.home).seq == 2
    # The user's copy: the logged passes, applied in order, make the same folder.
    mirror = tmp_path / "mirror"
    for log in sorted(collector.home.passes.iterdir()):
        with log.open("rb") as body:
            apply_pass(mirror, body)
    _same(run.root, mirror)


def test_another_lifes_token_or_pass_is_refused(collector: Served, tmp_path: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(Fenced):
        Pusher(run, Link(collector.target, "token-of-life-0", 1), {}).once()
    assert not Pusher(run, Link(collector.target, TOKEN, 2), {}).once()  # the right token, a pass of another life
    assert not any(collector.home.run.iterdir()) and not any(collector.home.passes.iterdir())


def test_a_new_task_gets_the_whole_folder_and_workspace(collector: Served, tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert Pusher(run, Link(collector.target, TOKEN, 1), {}).once()
    (collector.home.workspace / "src").mkdir()
    (collector.home.workspace / "src" / "app.py").write_text("print('hi')\n")
    restored, workspace = tmp_path / "restored", tmp_path / "ws"
    link = Link(collector.target, TOKEN, 1)
    link.fetch("/run", restored)
    link.fetch("/workspace", workspace)
    _same(run.root, restored)
    assert (workspace / "src" / "app.py").read_text() == "print('hi')\n"
    with pytest.raises(Fenced):
        Link(collector.target, "nope", 1).fetch("/run", tmp_path / "nothing")


def test_a_tail_the_collector_cannot_take_is_sent_whole_next(collector: Served, tmp_path: Path) -> None:
    run = _run(tmp_path)
    pusher = Pusher(run, Link(collector.target, TOKEN, 1), {})
    assert pusher.once()
    (collector.home.run / "events.jsonl").write_text("diverged\n")
    with run.events.open("a") as f:
        f.write('{"event": "b"}\n')
    assert not pusher.once()  # stale: the collector's copy did not end where the tail starts
    assert pusher.once()
    _same(run.root, collector.home.run)


def test_a_pass_logged_but_not_applied_is_applied_at_the_next_start(tmp_path: Path) -> None:
    home = Home(tmp_path / "collector")
    run = _run(tmp_path)
    body, _, _ = make_pass(run.root, {}, life=1)
    home.passes.mkdir(parents=True)
    home.pass_file(1).write_bytes(body.read())
    served = serve(home)
    try:
        _same(run.root, home.run)
        assert json.loads(home.state.read_text())["seq"] == 1
    finally:
        served.stop()


def test_the_end_is_recorded_for_its_life(collector: Served, tmp_path: Path) -> None:
    Link(collector.target, TOKEN, 1).end(4)
    assert State.load(collector.home).ended == {"life": 1, "code": 4}
    collector.stop()
    served = serve(collector.home, life=2, token="token-of-life-2")  # a new life: no end yet
    try:
        assert State.load(collector.home).ended is None
        assert baseline_of(collector.home.run) == {}
        assert Pusher(_run(tmp_path), Link(served.target, "token-of-life-2", 2), {}).once()
    finally:
        served.stop()
