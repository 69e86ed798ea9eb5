"""What differs between two runs of the same work, replaced by placeholders: replay keys a request by its
conversation's first message normalised, and gives a recorded answer this run's folders.

Between two runs everything incidental differs: tool_use and message ids, session ids, dates, the run
folder and workdir paths, the random id of each `<pasted_content>`, Claude Code's `<system-reminder>`
blocks (which carry dates and file contents).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from pathlib import Path

REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
# Ids the API and Claude Code mint afresh each run. Prefixed ids need a long tail so that words such as
# `msg_count` in a prompt stay as they are.
PREFIXED_ID_RE = re.compile(r"\b(?:toolu|srvtoolu|msg|req)_[A-Za-z0-9]{12,}\b")
UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Claude Code wraps a bracketed paste (how orch delivers a long brief) in tags with a random id per paste.
PASTE_ID_RE = re.compile(r'(</?pasted_content id=")[^"]*(")')
LONG_HEX_RE = re.compile(r"\b[0-9a-fA-F]{16,}\b")
ISO_TIME_RE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\d:])"
)
# Epoch seconds (optionally with a fraction) or milliseconds, 2001..2033: what time.time() prints.
EPOCH_RE = re.compile(r"\b1\d{9}(?:\d{3})?(?:\.\d+)?\b")
MIN_MANGLED = 8


def _mangle(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def _path_forms(path: str) -> list[str]:
    """A folder as it can appear in text: as given and resolved (/tmp may be a symlink)."""
    if not path.strip("/"):
        return []  # "" or "/": replacing it would rewrite every path
    forms = {path.rstrip("/")}
    with contextlib.suppress(OSError):
        forms.add(str(Path(path).resolve()))
    return list(forms)


Folders = tuple[tuple[str, str], ...]
"""(folder, what replaces it) pairs."""


@functools.lru_cache(maxsize=64)
def _folders(pairs: Folders) -> tuple[re.Pattern[str], dict[str, str]]:
    """One pattern for every form of the folders, longest first (a workdir inside the run folder, or the
    other way round, is replaced whole), each only where a path element ends: /work is not /w + ork, but
    a full stop may follow. Claude Code's mangled form (its projects dir: every non-alphanumeric
    character a dash) is replaced too, unless short: "-w" would match flags and hyphenated words."""
    names: dict[str, str] = {}
    for folder, replacement in pairs:
        for form in _path_forms(folder):
            names[form] = replacement
            mangled, target = _mangle(form), replacement if replacement.startswith("<") else _mangle(replacement)
            if len(mangled) >= MIN_MANGLED:
                names.setdefault(mangled, target)
    if not names:
        return re.compile(r"(?!)"), names
    alternatives = "|".join(re.escape(f) for f in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-]|\.\w)"), names


def replace_folders(text: str, pairs: Folders) -> str:
    pattern, names = _folders(pairs)
    return pattern.sub(lambda m: names[m.group(0)], text)


def normalise(text: str, run_dir: str, workdir: str) -> str:
    """`text` with everything that differs between two runs of the same work replaced by placeholders."""
    text = REMINDER_RE.sub("", text)
    # Paths before ids (a temp dir name can look like hex); timestamps before epochs and hex.
    text = replace_folders(text, ((workdir, "<workdir>"), (run_dir, "<run>")))
    text = PASTE_ID_RE.sub(r"\1<id>\2", text)
    text = ISO_TIME_RE.sub("<time>", text)
    text = PREFIXED_ID_RE.sub("<id>", text)
    text = UUID_RE.sub("<id>", text)
    text = EPOCH_RE.sub("<epoch>", text)
    text = LONG_HEX_RE.sub("<id>", text)
    return " ".join(text.split())


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def conversation(first_text: str, run_dir: str, workdir: str) -> str:
    """The conversation's digest. Every turn of a conversation repeats its first user message, so the
    normalising (a dozen regex passes, ~1 ms for a few KB) runs once per conversation, not per turn."""
    return digest(normalise(first_text, run_dir, workdir))
