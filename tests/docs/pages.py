"""The documentation as tests read it: every page (README.md, docs/, SECURITY.md, CONTRIBUTING.md), its fenced
blocks, and the examples a test must produce (a block after `<!-- example: ID -->`) or the specs that must
pass `orch spec check` (a yaml block after `<!-- spec: ID -->`, or any yaml block with `tasks:`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(?P<kind>example|spec):\s*(?P<id>[\w-]+)\s*-->\s*\n\s*$")


def pages() -> list[Path]:
    """Every page a user reads."""
    docs = sorted((REPO / "docs").rglob("*.md"))
    return [REPO / "README.md", *docs, REPO / "SECURITY.md", REPO / "CONTRIBUTING.md"]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    mark: tuple[str, str] | None
    """("example" | "spec", its id) from the comment just above the block."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines())
        mark = MARK.search(text, 0, match.start())
        tag = (mark["kind"], mark["id"]) if mark and mark.end() == match.start() else None
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match["info"].strip().split(" ")[0], body, tag))
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def marked(kind: str, name: str) -> Block:
    """The one block marked `<!-- KIND: NAME -->`."""
    found = [b for b in all_blocks() if b.mark == (kind, name)]
    assert len(found) == 1, f"expected one block marked {kind}: {name}, found {len(found)}"
    return found[0]


@dataclass(frozen=True)
class Shown:
    """One `$ command` of a console example, and the output shown under it."""

    command: str
    output: str


def console(block: Block) -> list[Shown]:
    """A console block's commands, each with the lines under it up to the next `$ `."""
    shown: list[Shown] = []
    command: str | None = None
    lines: list[str] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            if command is not None:
                shown.append(Shown(command, "\n".join(lines)))
            command, lines = line[2:], []
        else:
            lines.append(line)
    if command is not None:
        shown.append(Shown(command, "\n".join(lines)))
    return shown
