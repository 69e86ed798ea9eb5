"""A run folder's changes as passes: what is sent (whole, a tail, nothing), in which order, and what never is."""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path

import pytest

from orch.backends.swarm.passes import APPEND, MANIFEST, Manifest, baseline_of, inside, make_pass, open_under, scan

pytestmark = pytest.mark.pure  # files only


def _members(source: io.BufferedIOBase | object) -> tuple[Manifest, dict[str, tarfile.TarInfo], dict[str, bytes]]:
    with tarfile.open(fileobj=source, mode="r:") as tar:  # type: ignore[call-overload]
        infos = tar.getmembers()
        head = tar.extractfile(infos[0])
        assert infos[0].name == MANIFEST and head is not None
        manifest = Manifest.model_validate_json(head.read())
        data = {}
        for info in infos[1:]:
            if info.isfile():
                got = tar.extractfile(info)
                assert got is not None
                data[info.name] = got.read()
        return manifest, {i.name: i for i in infos[1:]}, data


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    (root / "outbox" / "agent-1").mkdir(parents=True)
    (root / "events.jsonl").write_text('{"event": "a"}\n')
    (root / "controller.json").write_text("{}")
    (root / "outbox" / "agent-1" / "result.md").write_text("found it\n")
    return root


def test_a_first_pass_carries_everything_and_a_second_nothing(run: Path) -> None:
    out, taken, count = make_pass(run, {}, life=1)
    manifest, infos, data = _members(out)
    assert manifest.life == 1 and manifest.members == len(infos) == count
    assert set(infos) == {"outbox", "outbox/agent-1", "events.jsonl", "controller.json", "outbox/agent-1/result.md"}
    assert data["outbox/agent-1/result.md"] == b"found it\n"
    out, taken2, count = make_pass(run, taken, life=1)
    assert count == 0 and taken2 == taken


def test_a_grown_file_sends_its_tail_and_a_rewritten_one_whole(run: Path) -> None:
    base = baseline_of(run)
    with (run / "events.jsonl").open("a") as f:
        f.write('{"event": "b"}\n')
    (run / "controller.json").write_text('{"round": 2}')  # same inode, rewritten in place
    out, _, _ = make_pass(run, base, life=1)
    _, infos, data = _members(out)
    assert infos["events.jsonl"].pax_headers[APPEND] == str(len('{"event": "a"}\n'))
    assert data["events.jsonl"] == b'{"event": "b"}\n'
    assert APPEND not in infos["controller.json"].pax_headers and data["controller.json"] == b'{"round": 2}'


def test_a_file_rewritten_to_a_longer_one_in_place_goes_whole(run: Path) -> None:
    base = baseline_of(run)
    (run / "events.jsonl").write_text('{"event": "X"}\n{"event": "b"}\n')  # grew, but not by an append
    _, infos, data = _members(make_pass(run, base, life=1)[0])
    assert APPEND not in infos["events.jsonl"].pax_headers
    assert data["events.jsonl"] == b'{"event": "X"}\n{"event": "b"}\n'


def test_removed_paths_are_listed_and_first_paths_come_first(run: Path) -> None:
    base = baseline_of(run)
    (run / "outbox" / "agent-1" / "result.md").unlink()
    (run / "a.txt").write_text("a")
    (run / "controller.json").write_text('{"round": 3}')
    manifest, infos, _ = _members(make_pass(run, base, life=1, first=["controller.json"])[0])
    assert manifest.deleted == ["outbox/agent-1/result.md"]
    assert list(infos) == ["controller.json", "a.txt"]


def test_a_link_out_of_the_folder_and_sockets_are_never_sent(run: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("canary")
    box = run / "outbox" / "agent-1"
    (box / "out").symlink_to(secret)
    (box / "up").symlink_to("../../../secret")
    (box / "in").symlink_to("result.md")
    (box / "dir-link").symlink_to(tmp_path, target_is_directory=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(run / "bus.sock"))
        os.mkfifo(run / "fifo")
        _, infos, data = _members(make_pass(run, {}, life=1)[0])
    assert "outbox/agent-1/in" in infos and infos["outbox/agent-1/in"].linkname == "result.md"
    for name in ("outbox/agent-1/out", "outbox/agent-1/up", "outbox/agent-1/dir-link", "bus.sock", "fifo"):
        assert name not in infos
    assert not any(b"canary" in content for content in data.values())


def test_skip_leaves_paths_out(run: Path) -> None:
    _, infos, _ = _members(make_pass(run, {}, life=1, skip=lambda rel: rel.startswith("outbox"))[0])
    assert set(infos) == {"events.jsonl", "controller.json"}


def test_open_under_refuses_a_link_anywhere_on_the_way(run: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x").write_text("canary")
    (run / "outbox" / "agent-2").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            open_under(fd, "outbox/agent-2/x")
        os.close(open_under(fd, "outbox/agent-1/result.md"))
    finally:
        os.close(fd)
    assert "outbox/agent-2/x" not in scan(run)


@pytest.mark.parametrize(
    ("rel", "target", "ok"),
    [
        ("a/link", "b", True),
        ("a/link", "../b", True),
        ("a/link", "../../b", False),
        ("link", "../b", False),
        ("a/link", "/etc/passwd", False),
        ("a/link", "", False),
        ("a/b/link", "../../c/../d", True),
    ],
)
def test_inside(rel: str, target: str, ok: bool) -> None:
    assert inside(rel, target) is ok
