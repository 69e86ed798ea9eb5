"""CONTRIBUTING.md's map of the code stays true: its tree ("Layout and the import rule") lists every module and
package of orch/ on a line of its own, with what it is, and nothing else; every repository path the page names
exists."""

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


def tree() -> dict[str, str]:
    """The map as paths under the repository (`orch/run/folder.py`, `orch/run/`) -> their annotation: two spaces
    of indent a level, a folder ends in `/`, one file a line."""
    out: dict[str, str] = {}
    folders: list[str] = []
    for line in layout().splitlines():
        match = re.match(r"^( *)(\S+)(?:\s+(.*))?$", line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match[1]) // 2
        assert len(match[1]) % 2 == 0 and depth <= len(folders), f"indent off in the tree: {line!r}"
        del folders[depth:]
        path = "".join(folders) + match[2]
        assert path not in out, f"listed twice: {path}"
        out[path] = match[3] or ""
        if match[2].endswith("/"):
            folders.append(match[2])
    return out


def test_every_module_is_in_the_map() -> None:
    listed = tree()
    missing = []
    for path in sorted((REPO / "orch").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if path.name in UNLISTED or relative.startswith("orch/data/"):  # orch/data: assets and sample trees
            continue
        if relative not in listed:
            missing.append(relative)
    assert not missing, "give these a line in CONTRIBUTING.md's tree:\n" + "\n".join(missing)


def test_everything_the_map_lists_exists_and_says_what_it_is() -> None:
    stale = [path for path in tree() if not (REPO / path).exists()]
    assert not stale, "CONTRIBUTING.md's tree lists what does not exist:\n" + "\n".join(stale)
    bare = [path for path, note in tree().items() if not note and path != "orch/"]
    assert not bare, "say in a few words what these are:\n" + "\n".join(bare)


def test_every_package_is_a_folder_of_the_map() -> None:
    listed = tree()
    missing = [
        init.parent.relative_to(REPO).as_posix() + "/"
        for init in sorted((REPO / "orch").rglob("__init__.py"))
        if init.parent != REPO / "orch" and init.parent.relative_to(REPO).as_posix() + "/" not in listed
    ]
    assert not missing, "give these packages their line in CONTRIBUTING.md's tree:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", [PAGE, REPO / "pyproject.toml"], ids=["CONTRIBUTING.md", "pyproject.toml"])
def test_every_path_the_page_names_exists(page: Path) -> None:
    """The page's paths, and pyproject.toml's comments saying which module uses a dependency."""
    stale = []
    for raw in sorted(set(PATH.findall(page.read_text()))):
        if any(mark in raw for mark in PLACEHOLDERS):
            continue
        path = raw.rstrip("/.")
        if not (list(REPO.glob(path)) if "*" in path else (REPO / path).exists()):
            stale.append(raw)
    assert not stale, f"{page.name} names paths that do not exist:\n" + "\n".join(stale)


def test_the_map_parses() -> None:
    listed = tree()
    assert {"orch/run/", "orch/gateway/apis/", "orch/lead/changes/", "orch/backends/docker/"} <= listed.keys()
    assert "RunFolder" in listed["orch/run/folder.py"] and "orch/errors.py" in listed
