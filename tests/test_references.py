"""Every `orch.x.y` a reader is pointed at exists: in docstrings and comments (orch/, bench/, tests/), in
orch/data's templates and scripts, and in CONTRIBUTING.md, README.md, SECURITY.md and docs/, each dotted name
resolves to a module or to an attribute of one (a class, a function, a constant, a field). A module that moves
without its references fails here."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # reads and imports sources; starts nothing

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "CONTRIBUTING.md", REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").rglob("*.md"))]
DOTTED = re.compile(r"(?<![\w./@-])orch(?:\.[A-Za-z_]\w*)+")
# Dotted names that are not modules: placeholders (orch.x.y, an agent or a backend NEW), files named orch.*
# (Gemini CLI's policy, opencode's plugin), the container labels, and the JUnit classnames of report.junit.xml.
NOT_MODULES = {
    "orch.x",
    "orch.x.y",
    "orch.agents.new",
    "orch.backends.NEW.backend",
    "orch.toml",
    "orch.js",
    "orch.managed",
    "orch.role",
    "orch.tasks",
    "orch.verification",
    "orch.changes",
}


def prose(path: Path) -> str:
    """A Python file's docstrings and comments; a page's or a template's whole text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            fields = {**getattr(found, "model_fields", {}), **getattr(found, "__dataclass_fields__", {})}
            if not hasattr(found, attribute):
                # a field (its type is not walked further), or nothing
                return attribute in fields or attribute in getattr(found, "__annotations__", {})
            found = getattr(found, attribute)
        return True
    return False


def sources() -> list[Path]:
    found = [p for root in ("orch", "bench", "tests") for p in sorted((REPO / root).rglob("*.py"))]
    assets = [p for p in sorted((REPO / "orch" / "data").rglob("*")) if p.suffix in (".html", ".js", ".svg")]
    return [p for p in found if "data" not in p.relative_to(REPO).parts[1:2]] + DOCS + assets


def test_every_dotted_reference_resolves() -> None:
    broken = []
    for path in sources():
        for name in sorted(set(DOTTED.findall(prose(path)))):
            if name not in NOT_MODULES and not resolves(name):
                broken.append(f"{path.relative_to(REPO)}: {name}")
    assert not broken, "these name no module or attribute (moved? renamed?):\n" + "\n".join(broken)


def test_a_moved_module_is_caught() -> None:
    assert resolves("orch.run.folder.RunFolder") and resolves("orch.run.records.RunInfo")
    assert not resolves("orch.nowhere.spec") and not resolves("orch.run.folder.NoSuchThing")
