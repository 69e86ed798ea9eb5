"""The portable recording: one gzip file that `orch record export` writes and `orch run --replay FILE` reads.

Line 1 is a header (JSON, versioned: `format` and `version`), every other line an Exchange, in the order
replay needs (worker by worker, each worker's exchanges as recorded). One gzip stream: its CRC and
length make a torn or altered file an error, never a silent half-recording. What the header holds
beyond the fields read here (the spec, the plan, the versions) is the lead's (orch.recording.transfer);
the gateway reads only where the recording ran, to give answers this run's folders.

A recording holds the request bodies and the answers, never headers (they carry credentials) nor the
run's gateway tokens (they are in request paths' `/t/<token>/` prefix, which the gateway strips first).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from orch.errors import UsageError
from orch.gateway.modeldir import Exchange
from orch.run.files import atomic_stream
from orch.text import first_error, shorten

FORMAT = "orch-recording"
VERSION = 1
SUFFIX = ".orchrec.gz"
"""The suggested file name ending (any name is read)."""
MAX_UNPACKED = 1 << 30
"""A recording may come from anywhere (a repository, an artifact): one that unpacks past this (1 GiB) is
refused rather than allowed to fill the memory (a gzip bomb)."""


class Where(BaseModel):
    """The header's fields the gateway reads (the rest is the lead's: orch.recording.transfer)."""

    model_config = ConfigDict(extra="ignore")

    format: str
    version: int
    run_dir: str
    """The recorded run folder, as it was named where the recording ran."""
    workdir: str


def write(path: Path, header: dict[str, Any], exchanges: Iterable[Exchange]) -> int:
    """Write the recording atomically (a temp file in the same folder, then renamed): a failed export
    leaves no half file. Returns the number of exchanges written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with atomic_stream(path) as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        gz.write((json.dumps(header, separators=(",", ":")) + "\n").encode())
        for exchange in exchanges:
            gz.write((exchange.model_dump_json() + "\n").encode())
            count += 1
    return count


def _corrupt(path: Path, why: str) -> UsageError:
    return UsageError(f"corrupt recording {path}: {why}", hint="export it again with `orch record export`")


def read(path: Path) -> tuple[dict[str, Any], list[Exchange]]:
    """The header (checked for format and version only) and every exchange; a one-line UsageError for a
    file that is not a whole recording of this format."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read recording {path}: {exc.strerror or exc}") from None
    if not data.startswith(b"\x1f\x8b"):
        raise _corrupt(path, "not gzip")
    text = _unpack(path, data)
    lines = text.decode(errors="replace").splitlines()
    header = _header(path, lines[0] if lines else "")
    exchanges: list[Exchange] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            exchanges.append(Exchange.model_validate_json(line))
        except ValidationError as exc:
            raise _corrupt(path, f"line {number}: {shorten(first_error(exc), 160)}") from None
    if not exchanges:
        raise _corrupt(path, "it holds no exchange")
    return header, exchanges


def _unpack(path: Path, data: bytes) -> bytes:
    """The one gzip stream `write` makes, unpacked to at most MAX_UNPACKED bytes."""
    decoder = zlib.decompressobj(wbits=31)  # 31: gzip header and CRC checked
    try:
        text = decoder.decompress(data, MAX_UNPACKED + 1)
    except zlib.error as exc:
        raise _corrupt(path, f"torn or altered ({exc})") from None
    if len(text) > MAX_UNPACKED:
        raise _corrupt(path, f"it unpacks past {MAX_UNPACKED >> 20} MiB")
    if not decoder.eof:
        raise _corrupt(path, "torn or altered (it ends before its gzip stream does)")
    if decoder.unused_data:
        raise _corrupt(path, "torn or altered (data after its gzip stream)")
    return text


def _header(path: Path, line: str) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _corrupt(path, f"line 1 is not an {FORMAT} header")
    version = header.get("version")
    if version != VERSION:
        raise UsageError(
            f"recording {path} is format version {version!r}; this orch reads version {VERSION}",
            hint="export it again with this orch version",
        )
    try:
        Where.model_validate(header)
    except ValidationError as exc:
        raise _corrupt(path, f"header: {first_error(exc)}") from None
    return header


def where(header: dict[str, Any]) -> tuple[str, str]:
    """(run folder, workdir) where the recording ran."""
    found = Where.model_validate(header)
    return found.run_dir, found.workdir
