"""CONTRIBUTING.md's map of the code stays true: every module in orch/ is named in its package's part of
the map ("Layout and the import rule"), every module the map names exists, and every repository path the
page names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # reads files only

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "CONTRIBUTING.md"
# Not modules a reader looks for in the map: package markers and `python -m` entry points.
UNLISTED = {"__init__.py", "__main__.py"}
# Repository paths the page names that are patterns, not files (the steps of "Adding an agent adapter").
PLACEHOLDERS = ("NEW", "<")
PATH = re.compile(r"(?<![\w/.$-])((?:orch|tests|scripts|docs|bench|docker|\.ci)/[\w./*<>-]*[\w*/>])")


def layout() -> str:
    """The code block under "Layout and the import rule": the map."""
    text = PAGE.read_text()
    start = text.index("## Layout and the import rule")
    block = text.index("```", start)
    return text[text.index("\n", block) + 1 : text.index("```", block + 3)]


def sections() -> dict[str, str]:
    """The map's text by package ("" for orch/'s own modules): a package's part starts at its `  name/` line."""
    out: dict[str, str] = {"": ""}
    current = ""
    for line in layout().splitlines():
        if match := re.match(r"^  (\w+)/(\s|$)", line):
            current = match[1]
            out.setdefault(current, "")
        out[current] += line + "\n"
    return out


def named(text: str, module: Path) -> bool:
    """`folder.py`, or (where the map lists modules by stem, as container/ does) `folder` as a word."""
    return re.search(rf"(?<![\w/.]){re.escape(module.stem)}(\.py)?(?![\w])", text) is not None


def test_every_module_is_in_the_map() -> None:
    parts = sections()
    missing = []
    for path in sorted((REPO / "orch").rglob("*.py")):
        relative = path.relative_to(REPO / "orch")
        if path.name in UNLISTED or relative.parts[0] == "data":  # orch/data: assets and sample trees
            continue
        package = relative.parts[0] if len(relative.parts) > 1 else ""
        text = parts.get(package, "")
        if not (named(text, path) if package else f"{path.name}" in text):
            missing.append(f"orch/{relative}")
    assert not missing, "name these in CONTRIBUTING.md's map (their package's part):\n" + "\n".join(missing)


def test_every_module_the_map_names_exists() -> None:
    stale = []
    for package, text in sections().items():
        root = REPO / "orch" / package
        for name in sorted(set(re.findall(r"(?<![\w/.])(\w+\.py)\b", text))):
            if not list(root.rglob(name)) and not (REPO / "orch" / name).exists():  # or orch/'s own
                stale.append(f"{package or 'orch'}: {name}")
    assert not stale, "CONTRIBUTING.md's map names modules that do not exist:\n" + "\n".join(stale)


def test_every_path_the_page_names_exists() -> None:
    stale = []
    for raw in sorted(set(PATH.findall(PAGE.read_text()))):
        if any(mark in raw for mark in PLACEHOLDERS):
            continue
        path = raw.rstrip("/.")
        if not (list(REPO.glob(path)) if "*" in path else (REPO / path).exists()):
            stale.append(raw)
    assert not stale, "CONTRIBUTING.md names paths that do not exist:\n" + "\n".join(stale)


def test_the_map_parses() -> None:
    parts = sections()
    assert {"run", "agents", "gateway", "fleet", "container", "lead", "view", "cli"} <= parts.keys()
    assert "folder.py" in parts["run"] and "errors.py" in parts[""]
