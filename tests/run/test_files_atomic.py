"""orch/run/files.py's atomic writes: a reader sees the old file or the new one, never a part, and a write that
fails leaves the old file and no temp file beside it."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from orch.run.files import atomic_stream, atomic_write, atomic_write_all

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_atomic_write_replaces_the_file_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("old")
    atomic_write(path, "new", mode=0o600)
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_atomic_write_all_writes_none_when_one_cannot_be_written(tmp_path: Path) -> None:
    good, blocked = tmp_path / "good", tmp_path / "blocked"
    good.write_text("old")
    blocked.mkdir()  # a directory where a file should go
    with pytest.raises(IsADirectoryError):
        atomic_write_all({good: "new", blocked: "x"})
    assert good.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "good"]


def test_atomic_stream_shows_the_new_file_only_once_the_block_ends(tmp_path: Path) -> None:
    path = tmp_path / "rec.gz"
    path.write_bytes(b"old")
    with atomic_stream(path) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(b"line 1\n")
        assert path.read_bytes() == b"old"  # a reader meanwhile sees the old file whole
        gz.write(b"line 2\n")
    assert gzip.decompress(path.read_bytes()) == b"line 1\nline 2\n"
    assert path.stat().st_mode & 0o777 == 0o644 and [p.name for p in tmp_path.iterdir()] == ["rec.gz"]


def test_a_failed_atomic_stream_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.gz"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="export failed"), atomic_stream(path) as raw:
        raw.write(b"half")
        raise RuntimeError("export failed")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["rec.gz"]
