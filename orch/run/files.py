"""Reading and writing files the way a run folder needs: atomic writes (readers see the old file or the new
one), single-write appends, a worker's file read once and never through a link, orch's records, a user's
text, and the incremental tail of an append-only JSONL file. Which files: orch.run.folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from orch import escape
from orch.errors import NotFoundError, OrchError, UsageError
from orch.text import first_error


@contextlib.contextmanager
def _staging(path: Path, mode: int) -> Iterator[tuple[BinaryIO, Path]]:
    """A temp file beside `path` to write, and its name: on disk with `mode` once the block ends, not yet
    renamed; removed if the block fails."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, Path(tmp)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _staged(path: Path, data: str | bytes, mode: int) -> Path:
    """`data` in a temp file beside `path`, on disk, not yet renamed."""
    with _staging(path, mode) as (fh, tmp):
        fh.write(data.encode() if isinstance(data, str) else data)
    return tmp


@contextlib.contextmanager
def atomic_stream(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """atomic_write for what is written piece by piece: readers see the old file until the block ends, then
    the new one; a block that fails leaves the old one and no temp file."""
    with _staging(path, mode) as (fh, tmp):
        yield fh
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write to a temp file in the same folder, then rename: readers see the old or the new file."""
    atomic_write_all({path: data}, mode)


def atomic_write_all(files: Mapping[Path, str | bytes], mode: int = 0o644) -> None:
    """Write several files as one: every one is staged before any is renamed, so a file that cannot be
    written (a read-only folder, a full disk, a directory in its place) leaves all of them as they were."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            staged.append((_staged(path, data, mode), path))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append one line (a JSON document: orch.escape.json_line keeps it one line for every reader) with a single
    write(2) on an O_APPEND fd (atomic for our line sizes)."""
    data = (escape.json_line(line.rstrip("\n")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


MAX_OUTPUT = 4 << 20
"""The most the controller reads of one file a worker wrote (findings, verdict, result)."""


class UnsafeOutput(Exception):
    """A file a worker wrote that the controller will not read: a link, not a regular file, or too big."""


def read_worker_file(path: Path, limit: int = MAX_OUTPUT) -> bytes:
    """Read a file in a worker's outbox once, as the controller: never through a link (a hostile worker
    could point one at a file only the controller may read), only a regular file, at most `limit` bytes.
    FileNotFoundError if it is absent; UnsafeOutput, saying why, if it must not be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeOutput(f"{path.name} is a symbolic link: write a plain file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeOutput(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafeOutput(f"{path.name} is larger than {limit} bytes")
    return data


M = TypeVar("M", bound=BaseModel)
M_co = TypeVar("M_co", covariant=True)


class ReadsJson(Protocol[M_co]):
    """What reads a union of models from JSON (a TypeAdapter, orch.run.records.RUN_INFO)."""

    def validate_json(self, text: str, /) -> M_co: ...


def read_model(path: Path, model: type[M] | ReadsJson[M], missing: OrchError) -> M:
    """A JSON file orch wrote, as its model (or union of models): `missing` if absent, a one-line UsageError
    if malformed."""
    validate = model.model_validate_json if isinstance(model, type) else model.validate_json
    try:
        return validate(path.read_text())
    except FileNotFoundError:
        raise missing from None
    except ValidationError as exc:
        raise UsageError(f"{path} is malformed: {first_error(exc)}") from None


def read_text_input(path: Path) -> str:
    """Read a user-supplied text file: must exist, be UTF-8 and not binary."""
    if not path.is_file():
        raise NotFoundError(f"file not found: {path}", hint="check the path")
    raw = path.read_bytes()
    return decode_text(raw, str(path))


def decode_text(raw: bytes, what: str) -> str:
    if b"\x00" in raw:
        raise UsageError(f"{what} looks binary (contains NUL bytes)", hint="send UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} is not UTF-8 text (byte {exc.start})", hint="convert it to UTF-8") from None


class JsonlTail(Generic[M]):
    """An append-only JSONL file of records (a worker's hook log, the gateway's events and ledger), parsed
    once: each read parses only the complete lines added since the last; garbage lines are skipped."""

    def __init__(self, path: Path, model: type[M]) -> None:
        self.path, self.model = path, model
        self.offset = 0
        self._records: list[M] = []

    def records(self) -> Sequence[M]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self._records
        if size < self.offset:  # replaced: read again from the start
            self.offset, self._records = 0, []
        if size > self.offset:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(size - self.offset)
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
            self.offset += len(complete)
            for line in complete.splitlines():
                try:
                    self._records.append(self.model.model_validate(json.loads(line)))
                except (ValueError, ValidationError):
                    continue
        return self._records


def merged_log(here: bytes, there: bytes) -> bytes:
    """A JSON-lines log (events.jsonl) copied back from where the run runs (`there`: a remote engine's volume, a
    swarm run's collector), keeping the whole lines only this side wrote (`here`: `orch run`'s run-created line,
    a relaunch, a container's removal), each before the first of theirs that is later (by `ts`), theirs in their
    own order. Without this, every copy back replaced this side's lines with theirs."""
    theirs = there.splitlines(keepends=True)
    known = set(theirs)
    own = [line for line in here.splitlines(keepends=True) if line.endswith(b"\n") and line not in known]
    if not own:
        return there
    out: list[bytes] = []
    for line in theirs:
        while own and _ts(own[0]) <= _ts(line):
            out.append(own.pop(0))
        out.append(line)
    if theirs and not theirs[-1].endswith(b"\n"):  # their torn last line stays last, whole once they finish it
        out.insert(len(out) - 1, b"".join(own))
        own = []
    return b"".join(out + own)


def _ts(line: bytes) -> dt.datetime:
    """A line's `ts` (the earliest time when it has none a reader can parse)."""
    try:
        value = json.loads(line).get("ts")
        when = dt.datetime.fromisoformat(value) if isinstance(value, str) else EARLIEST
    except (ValueError, AttributeError):
        return EARLIEST
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)
