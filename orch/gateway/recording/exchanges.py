"""The recording: its format, and a cassette's exchanges and where they were recorded (replay and
`orch record export` read it).

The format: `model/exchanges-<n>.jsonl.gz`, one Exchange per line, each line its own gzip member.

One member per line means a crash mid-write tears at most that member: the reader skips a torn member
(at the end, or followed by members a restarted gateway appended) and keeps every whole one. A member
that decodes but is not an Exchange is corruption, and an error naming the file and the line.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import zlib
from pathlib import Path

from pydantic import ValidationError

from orch.errors import UsageError
from orch.gateway.modeldir import Exchange
from orch.gateway.recording import archive
from orch.run.folder import RunFolder
from orch.text import first_error, shorten

GZIP_MAGIC = b"\x1f\x8b\x08"
CHUNK = 1 << 16

# One lock per process: the server appends from many requests at once, and one write() per member
# under it keeps members whole and in order.
_APPEND_LOCK = threading.Lock()


def append_exchange(path: Path, exchange: Exchange) -> None:
    """Append `exchange` to `path` as one gzip member and flush it (a reader sees whole members only)."""
    # Level 1: every request carries the whole conversation so far, and the gateway writes one per answer;
    # on a 170 KB conversation of code it is ~6x as fast as level 9 (the default) for a member ~25% larger.
    member = gzip.compress((exchange.model_dump_json() + "\n").encode(), compresslevel=1, mtime=0)
    with _APPEND_LOCK, path.open("ab") as fh:
        fh.write(member)
        fh.flush()


def _decode_member(data: memoryview, pos: int) -> tuple[bytes, int] | None:
    """The member starting at `pos` and where the next one starts; None if it is torn. Fed in chunks, so a
    long file costs linear time (unused_data is at most one chunk)."""
    decoder = zlib.decompressobj(wbits=31)  # 31: gzip header and CRC checked
    parts: list[bytes] = []
    try:
        while not decoder.eof and pos < len(data):
            chunk = data[pos : pos + CHUNK]
            parts.append(decoder.decompress(chunk))
            pos += len(chunk) - len(decoder.unused_data)
    except zlib.error:
        return None
    return (b"".join(parts), pos) if decoder.eof else None


def _members(raw: bytes) -> list[bytes | None]:
    """The decompressed members of `raw` in order; None for a torn one (skipped up to the next magic)."""
    data = memoryview(raw)
    members: list[bytes | None] = []
    pos = 0
    while pos < len(data):
        decoded = _decode_member(data, pos)
        if decoded is not None:
            members.append(decoded[0])
            pos = decoded[1]
            continue
        members.append(None)
        # A torn member: the next one (if a restarted writer appended more) starts at the next magic.
        found = raw.find(GZIP_MAGIC, pos + 1)
        pos = len(data) if found < 0 else found
    return members


def read_exchanges(path: Path) -> list[Exchange]:
    """Every whole Exchange in `path`, oldest first. Raises UsageError for a file that is not this format."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read exchanges file {path}: {exc.strerror or exc}") from None
    if data and not data.startswith(GZIP_MAGIC):
        raise UsageError(
            f"corrupt exchanges file {path} line 1: not gzip",
            hint="a recording is what a run's gateway wrote: one gzip member per exchange",
        )
    exchanges: list[Exchange] = []
    line = 0
    for member in _members(data):
        if member is None:
            line += 1  # torn by a crash: that exchange is lost, the rest is good
            continue
        for text in member.decode(errors="replace").splitlines():
            line += 1
            if not text.strip():
                continue
            try:
                exchanges.append(Exchange.model_validate_json(text))
            except ValidationError as exc:
                reason = shorten(first_error(exc), 160)
                raise UsageError(f"corrupt exchanges file {path} line {line}: {reason}") from None
    return exchanges


def _folder(cassette: Path) -> RunFolder:
    """The run folder of a cassette: the folder given, or the one whose model dir was given."""
    if not cassette.exists():
        raise UsageError(f"replay cassette {cassette} does not exist", hint="give a run folder (or a copy of one)")
    folder = RunFolder(cassette)
    if not folder.model_dir.is_dir() and RunFolder(cassette.parent).model_dir == cassette:
        return RunFolder(cassette.parent)
    return folder


def recorded_folders(root: Path) -> tuple[str, str]:
    """Where the recording ran: (run folder, workdir). A cassette in place is its own run folder; its
    run.json says the workdir; a gateway `started` event saying `run_dir`/`workdir` overrides both
    (kept across copies)."""
    folder = RunFolder(root)
    run_dir, workdir = str(root), ""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(folder.run_json.read_text())
        workdir = str(info.get("workdir") or "") if isinstance(info, dict) else ""
    with contextlib.suppress(OSError):
        for line in folder.model_log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                data = event.get("data") if isinstance(event, dict) and event.get("event") == "started" else None
                if isinstance(data, dict):
                    run_dir = str(data.get("run_dir") or run_dir)
                    workdir = str(data.get("workdir") or workdir)
    return run_dir, workdir


def recording(cassette: Path) -> tuple[list[Exchange], tuple[str, str]]:
    """A cassette's exchanges (each worker's in order, worker by worker) and where it was recorded (run
    folder, workdir): from an exported file (orch.gateway.recording.archive), or from a run folder's model dir."""
    if cassette.is_file():
        header, exchanges = archive.read(cassette)
        return exchanges, archive.where(header)
    folder = _folder(cassette)
    files = folder.recordings()
    if not files:
        raise UsageError(
            f"replay cassette {cassette} has no recording (no exchanges file in {folder.model_dir})",
            hint="record a run first: a run's gateway records every exchange",
        )
    exchanges = [e for path in files for e in read_exchanges(path)]
    if not exchanges:
        raise UsageError(f"replay cassette {cassette} is empty: its exchanges files hold no exchange")
    return exchanges, recorded_folders(folder.root)


def cassette_exchanges(cassette: Path) -> list[Exchange]:
    """What `orch record export` copies: a run folder's exchanges in replay's order."""
    return recording(cassette)[0]


class Recorder:
    """model/exchanges-<n>.jsonl.gz: every completed exchange of worker n, appended in the format above."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder

    def append(self, exchange: Exchange) -> None:
        append_exchange(self.folder.exchanges(exchange.worker), exchange)
