"""Applying passes to a copy: the copy ends equal to the run folder; a hostile or torn pass writes nothing
outside it, or nothing at all."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from orch.backends.swarm.passes import APPEND, MANIFEST, PassError, baseline_of, make_pass, scan
from orch.backends.swarm.receive import apply_pass

pytestmark = pytest.mark.pure  # files only


def _tree(root: Path) -> dict[str, bytes | str | None]:
    """Every path under `root`: a file's content, a link's target, None for a folder."""
    out: dict[str, bytes | str | None] = {}
    for rel in scan(root):
        path = root / rel
        out[rel] = os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
    return out


def _pass(members: list[tuple[tarfile.TarInfo, bytes]], life: int = 1, deleted: list[str] | None = None) -> io.BytesIO:
    """A pass written by hand (a hostile sender's)."""
    buf = io.BytesIO()
    manifest = f'{{"life": {life}, "members": {len(members)}, "deleted": {deleted or []!r}}}'.replace("'", '"').encode()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = tarfile.TarInfo(MANIFEST)
        head.size = len(manifest)
        tar.addfile(head, io.BytesIO(manifest))
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    buf.seek(0)
    return buf


def _file(name: str, data: bytes = b"x", append: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    if append is not None:
        info.pax_headers = {APPEND: str(append)}
    return info, data


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, b""


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    (root / "outbox" / "agent-1").mkdir(parents=True)
    (root / "events.jsonl").write_text('{"event": "a"}\n')
    (root / "outbox" / "agent-1" / "result.md").write_text("found it\n")
    (root / "outbox" / "agent-1" / "latest").symlink_to("result.md")
    return root


def test_passes_bring_a_copy_up_to_the_run_and_a_repeated_one_changes_nothing(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    out, base, _ = make_pass(run, {}, life=1)
    apply_pass(copy, out, life=1)
    assert _tree(copy) == _tree(run)
    with (run / "events.jsonl").open("a") as f:
        f.write('{"event": "b"}\n')
    (run / "outbox" / "agent-1" / "result.md").unlink()
    (run / "outbox" / "agent-1" / "latest").unlink()
    (run / "worktrees" / "w").mkdir(parents=True)
    (run / "worktrees" / "w" / "f.py").write_text("print()\n")
    out, base, _ = make_pass(run, base, life=1)
    body = out.read()
    done = apply_pass(copy, io.BytesIO(body), life=1)
    assert "events.jsonl" in done.changed and done.deleted == ["outbox/agent-1/latest", "outbox/agent-1/result.md"]
    assert _tree(copy) == _tree(run)
    again = apply_pass(copy, io.BytesIO(body), life=1)  # taken twice (a retry): the tail is not added again
    assert not again.stale and _tree(copy) == _tree(run)


def test_a_tail_that_does_not_continue_the_copy_is_stale(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    apply_pass(copy, make_pass(run, {}, life=1)[0])
    (copy / "events.jsonl").write_text("something else entirely\n")
    done = apply_pass(copy, _pass([_file("events.jsonl", b"tail\n", append=15)]))
    assert done.stale == ["events.jsonl"] and (copy / "events.jsonl").read_text() == "something else entirely\n"


def test_a_torn_or_foreign_pass_changes_nothing(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    (run / "big.bin").write_bytes(os.urandom(100_000))
    body = make_pass(run, {}, life=2)[0].read()
    with pytest.raises(PassError, match="life 2"):
        apply_pass(copy, io.BytesIO(body), life=3)
    for cut in (len(body) // 2, 700, 100):  # inside the big file, inside the first members, inside the manifest
        with pytest.raises(PassError):
            apply_pass(copy, io.BytesIO(body[:cut]), life=2)
    with pytest.raises(PassError, match="manifest"):
        apply_pass(copy, io.BytesIO(b"\0" * 1024), life=2)
    assert not any(copy.iterdir())


@pytest.mark.parametrize(
    "member",
    [
        _file("../escaped"),
        _file("/tmp/escaped"),
        _file("a/../../escaped"),
        _file("a//b"),
        _link("out", "../escaped"),
        _link("out", "/etc/passwd"),
    ],
    ids=["dotdot", "absolute", "inner-dotdot", "empty-part", "link-up", "link-absolute"],
)
def test_a_hostile_member_is_refused_and_writes_nothing_outside(
    tmp_path: Path, member: tuple[tarfile.TarInfo, bytes]
) -> None:
    copy = tmp_path / "nest" / "copy"
    done = apply_pass(copy, _pass([member]))
    assert done.refused == [member[0].name] and not done.changed
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["copy", "nest"]


def test_nothing_is_written_through_a_link_in_the_copy(tmp_path: Path) -> None:
    copy, outside = tmp_path / "copy", tmp_path / "outside"
    outside.mkdir()
    apply_pass(copy, _pass([_link("box", "inner"), (_dir("inner"), b"")]))
    (copy / "evil").symlink_to(outside, target_is_directory=True)  # as if made behind the receiver's back
    done = apply_pass(copy, _pass([_file("box/x"), _file("evil/y"), _file("evil", b"plain")], deleted=["evil/z"]))
    assert done.refused == ["box/x", "evil/y"] and done.changed == ["evil"]
    assert not any(outside.iterdir()) and (copy / "evil").read_bytes() == b"plain"


def test_divert_leaves_a_member_to_the_caller(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    done = apply_pass(copy, make_pass(run, {}, life=1)[0], divert=lambda rel: rel == "events.jsonl")
    assert "events.jsonl" in done.changed and not (copy / "events.jsonl").exists()


def test_a_restored_copy_sends_only_what_changes_after(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    apply_pass(copy, make_pass(run, {}, life=1)[0])
    base = baseline_of(copy)
    (copy / "new.txt").write_text("n")
    _, _, count = make_pass(copy, base, life=2)
    assert count == 1


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info
