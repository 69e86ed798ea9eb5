"""The import rule (CONTRIBUTING.md): each layer imports only the layers below it, so a newcomer can read
orch bottom-up and a worker's `orch bus post` never pays for the layers it does not use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

PACKAGE = Path(__file__).resolve().parents[1] / "orch"

# Lowest first. A module may import its own layer and any layer of a lower rank; never a layer of the same
# rank (agents and offline, report and recording, view and entry stand side by side) or above.
RANKS = {
    "base": 0,
    "run": 1,
    "contracts": 2,
    "notify": 2,  # reads the run folder (run) and tells people: the controller, `orch up`, the view and cli use it
    "agents": 3,
    "offline": 3,
    "spec": 4,
    "gateway": 5,
    "jobs": 6,
    "report": 7,
    "recording": 7,
    "fleet": 8,
    "container": 9,
    "backends": 10,
    "lead": 11,
    "view": 12,
    "entry": 12,
    "cli": 13,
}
BASE: tuple[str, ...]  # grows below, a line for each module added
BASE = ("orch", "orch.errors", "orch.versions", "orch.waits", "orch.settings", "orch.text", "orch.shellparts")
BASE += ("orch.settings.base", "orch.settings.parse", "orch.settings.user", "orch.settings.compose")
BASE += ("orch.settings.internal", "orch.settings.limits")  # every ORCH_* variable, by job
BASE += ("orch.jsonsample",)
BASE += ("orch.procs",)
BASE += ("orch.signals",)  # signals held off while a teardown runs whole
BASE += ("orch.allowlist",)
BASE += ("orch.exitcodes",)
BASE += ("orch.prereqs",)
BASE += ("orch.escape",)  # worker text made inert for each medium: every output and the notifications use it
BASE += ("orch.modelaccess",)  # the shape of an agent's credentials: contracts and the agents read it


def layer_of(module: str) -> str:
    """The layer a dotted module name belongs to."""
    if module in BASE:
        return "base"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in RANKS:
        return parts[1]
    raise AssertionError(f"{module} belongs to no layer: add it to RANKS or BASE here and to CONTRIBUTING.md")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, importer: str) -> list[tuple[int, str]]:
    """Every orch module a file imports, anywhere in it (functions and TYPE_CHECKING blocks included)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "orch"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports are not used in orch; resolve them anyway
                base = importer.rsplit(".", node.level)[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != "orch":
                continue
            # `from orch.x import y` may name a submodule y: judge by it when it is one.
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    PACKAGE.parent / sub.replace(".", "/")
                ).is_dir()
                found.append((node.lineno, sub if is_module else target))
    return found


BASE += ("orch.sse",)  # server-sent events: the gateway, the scripted model and the scripted agent share it
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.relative_to(PACKAGE).parts)  # data/: demo samples


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(PACKAGE)) for p in SOURCES])
def test_imports_follow_the_layers(path: Path) -> None:
    importer = module_name(path)
    own = layer_of(importer)
    bad = []
    for line, target in imported(ast.parse(path.read_text(encoding="utf-8")), importer):
        theirs = layer_of(target)
        if theirs == own or RANKS[theirs] < RANKS[own]:
            continue
        bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} ({theirs} is not below {own})")
    assert not bad, "\n".join(bad)


def test_every_package_marker_is_empty() -> None:
    """Importing orch.run (the worker's bus post) must not import the other layers through an __init__."""
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == PACKAGE:
            continue  # orch/__init__.py holds only __version__
        assert init.read_text(encoding="utf-8").strip() == "", f"{init} must be empty"


def test_every_module_has_a_layer() -> None:
    for path in SOURCES:
        layer_of(module_name(path))
