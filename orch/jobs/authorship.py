"""A verdict counts only as the worker's own tool call wrote it: what the gateway's ledger holds of the calls the
worker's model made on the job (which no worker can write) against the verdict file the controller reads.

A verifier's or reviewer's agent may run another worker's command (a finding's `reproduce`) in its own shell, and
whatever that leaves behind acts as the verifier over its own files: it could rewrite the verdict between the
agent's write and its done flag. So the verdict read from the outbox must be one the job's calls carry:
- a file-writing tool's content for that path (Claude Code's Write, Gemini CLI's write_file, opencode's write),
  and the edits after it (Edit, MultiEdit, replace, edit: old and new strings applied in order);
- a JSON document inside a call's input: a shell command's words and heredocs (`cat > f <<'EOF'`,
  `echo '{...}' > f`), base64 a command decodes, a patch's added lines (Codex's apply_patch), aider's edit blocks
  (the gateway ledgers them, orch.gateway.apis.openai_chat);
- or what a command orch itself knows the output of wrote (the offline verifier's `orch offline-verdict`, whose
  verdict the controller works out from the same inputs: `also`).
Documents are compared as parsed JSON (the same verdict, whatever its spacing). A verdict none of them carries is
forged: rejected, with an event. What this cannot see: a verdict the worker's own model wrote on purpose through
some other means (`python -c` with a dict literal, a file copied in place) reads as forged too, and the worker
is told to write it with one call that carries it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orch import shellparts
from orch.gateway.modeldir import LedgerEntry
from orch.jobs.findings import VerdictReport
from orch.text import strings_in

PATH_KEYS = ("file_path", "filePath", "path", "absolute_path")
"""Where file tools name their file."""
EDITS = (("old_string", "new_string"), ("oldString", "newString"))
"""Where edit tools put the text they replace and its replacement."""
BASE64_WORD = re.compile(r"^[A-Za-z0-9+/]{24,}={0,2}$")
MAX_SCAN = 1 << 16
"""The most of one call's text searched for JSON documents (a verdict is small)."""
OBJECT_START = re.compile(r'\{\s*"')
MAX_STARTS = 64


def authored(report: VerdictReport, path: Path, calls: Sequence[LedgerEntry], also: Iterable[object] = ()) -> bool:
    """Whether the verdict the controller read from `path` is one the worker's calls on the job wrote
    (`calls`: its tool_use entries, in order), or one of `also` (documents a command of orch's wrote)."""
    wanted = report.model_dump(mode="json")
    return any(_same(wanted, doc) for doc in [*also, *written(path, calls)])


def _same(wanted: dict[str, Any], doc: object) -> bool:
    if not isinstance(doc, dict) or "verdict" not in doc:
        return False
    try:
        return VerdictReport.model_validate(doc).model_dump(mode="json") == wanted
    except ValidationError:
        return False


def written(path: Path, calls: Sequence[LedgerEntry]) -> Iterator[object]:
    """The documents the calls wrote to `path` or carried: file tools' contents and edits, then every JSON object
    found in the calls' inputs."""
    content: str | None = None
    for call in calls:
        if call.kind != "tool_use" or not call.input:
            continue
        inp = call.input
        if _names(inp, path):
            if isinstance(inp.get("content"), str):
                content = inp["content"]
            elif content is not None:
                content = _edited(content, inp)
            if content is not None:
                yield from _documents(content)
        for text in strings_in(inp):
            yield from _carried(text[:MAX_SCAN])


def _names(inp: dict[str, Any], path: Path) -> bool:
    named = next((inp[k] for k in PATH_KEYS if isinstance(inp.get(k), str)), None)
    return named is not None and (Path(named) == path or (not Path(named).is_absolute() and path.match(named)))


def _edited(content: str, inp: dict[str, Any]) -> str:
    listed = inp.get("edits")
    for edit in listed if isinstance(listed, list) else [inp]:
        if not isinstance(edit, dict):
            continue
        for old_key, new_key in EDITS:
            old, new = edit.get(old_key), edit.get(new_key)
            if isinstance(old, str) and isinstance(new, str):
                content = content.replace(old, new) if edit.get("replace_all") else content.replace(old, new, 1)
    return content


def _carried(text: str) -> Iterator[object]:
    """JSON documents in one string of a call: as it is, its shell words and heredocs, base64 it decodes, a patch's
    added lines."""
    yield from _documents(text)
    for word in _words(text):
        yield from _documents(word)
        if BASE64_WORD.match(word):
            yield from _documents(_base64(word))
    if "\n+" in text:
        yield from _documents("\n".join(line[1:] for line in text.splitlines() if line.startswith("+")))


def _base64(word: str) -> str:
    try:
        return base64.b64decode(word, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _words(text: str) -> list[str]:
    try:
        words = shlex.split(text, comments=False, posix=True)
    except ValueError:
        words = []
    return words + shellparts.heredocs(text)


def _documents(text: str) -> Iterator[object]:
    """The JSON objects that start at an object's opening (`{"`) of `text` and parse, in a text that names a
    verdict at all (at most MAX_STARTS tries: a worker's flood of braces costs little)."""
    if '"verdict"' not in text:
        return
    decoder = json.JSONDecoder()
    for n, match in enumerate(OBJECT_START.finditer(text)):
        if n >= MAX_STARTS:
            return
        try:
            doc, _ = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        yield doc
