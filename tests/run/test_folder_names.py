"""RunFolder is the only module that spells a run folder's file names: every other module asks it.

The names are taken from RunFolder itself (each property and each name-returning method), then every
string in orch/ outside orch/run/folder.py is checked (docstrings aside): a name used as a path (`x /
"events.jsonl"`), a file name such as `controller.json`, a folder prefix such as `jobs/`, or a fragment
of a per-worker or per-job name (`.task.md`, `exchanges-`) fails the test, unless ALLOWED says why.
"""

from __future__ import annotations

import ast
import gzip
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.run.folder import RELATIVE, RunFolder

pytestmark = pytest.mark.pure  # reads sources only

ORCH = Path(__file__).resolve().parents[2] / "orch"
ROOT = Path("/run-folder")

# (module, the string constant) -> why it may spell a run folder's name.
ALLOWED: dict[tuple[str, str], str] = {
    ("agents/codex/adapter.py", "sessions/*/*/*/rollout-*-"): "Codex's own sessions dir, in its config dir",
    ("agents/codex/watch.py", "sessions"): "Codex's own sessions dir, in its config dir",
    ("agents/opencode.py", "state"): "opencode's XDG state dir, in its config dir",
    ("entry/demo.py", "changes"): "orch/data/changes, the demo's sample repository",
    ("report/render.py", "report/report.html"): "the template in orch/data/report, not the run's report",
    ("cli/commands.py", "Write agent-N.task.md and point the worker at it."): "`orch brief`'s help line, prose",
    ("run/workerpost.py", "bus.md"): "a worker's post, before RunFolder (pydantic, the run's records) is imported",
    ("run/workerpost.py", "bus.sock"): "a worker's post, before RunFolder (pydantic, the run's records) is imported",
}
# Whole modules left out: orch/settings/'s declarations, whose strings are the settings' help texts (they open
# no file), and modules another engineer rewrites this round, whose names move to RunFolder there (recordings(),
# run_json, model_log; RELATIVE for report.html's links): delete such a line once its module asks RunFolder.
WHOLE_MODULES = {
    "settings/user.py": "the settings' help texts: prose for humans",
    "settings/compose.py": "the settings' help texts: prose for humans",
    "settings/internal.py": "the settings' help texts: prose for humans",
}


def owned_names() -> tuple[set[str], set[str]]:
    """(whole names: `events.jsonl`, `outbox`...; fragments of numbered names: `.task.md`, `exchanges-`)."""
    folder = RunFolder(ROOT)
    whole, fragments = set(), set()
    for name, member in inspect.getmembers(RunFolder):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            path = getattr(folder, name)
        elif inspect.isfunction(member):
            signature = inspect.signature(member)
            params = list(signature.parameters)[1:]
            if (
                signature.return_annotation not in ("Path", Path)
                or not 1 <= len(params) <= 2
                or not all(p in ("n", "job", "task", "change", "review") for p in params)
            ):
                continue
            path = member(folder, *(7 if p == "n" else "J7" for p in params))
        else:
            continue
        if not isinstance(path, Path) or not path.is_relative_to(ROOT):
            continue
        for part in path.relative_to(ROOT).parts:
            if "7" not in part:
                whole.add(part)
                continue
            for frag in part.replace("J7", "7").split("7"):
                if "." in frag.strip(".") or (frag.endswith("-") and frag != "agent-"):
                    fragments.add(frag)
    return whole, fragments


def spelled_names(source: str, whole: set[str], fragments: set[str]) -> Iterator[tuple[int, str]]:
    """(line, string) for each string in `source` that spells one of RunFolder's names."""
    needles = [*fragments, *(w for w in whole if "." in w.strip("."))]
    needles += [f"{q}{w}{q}" for w in whole for q in "'\""] + [f"{w}/" for w in whole]
    if not any(needle in source for needle in needles):  # most modules: nothing to parse
        return
    folders = "|".join(re.escape(d) for d in whole if "." not in d.strip("."))
    folder_prefix = re.compile(rf"(^|[\s'\"`(])({folders})/")
    files = {w for w in whole if "." in w.strip(".")}
    prose, as_path, strings = set(), set(), []
    for node in ast.walk(ast.parse(source)):
        for block in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if isinstance(block, list):  # a string standing alone as a statement: a docstring, prose
                prose |= {id(s.value) for s in block if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            as_path |= {id(side) for side in (node.left, node.right) if isinstance(side, ast.Constant)}
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("Path", "joinpath", "glob", "rglob", "join"):
                as_path |= {id(arg) for arg in node.args if isinstance(arg, ast.Constant)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node)
    for node in strings:
        text = str(node.value)
        if id(node) in prose:
            continue
        if (
            (id(node) in as_path and text.strip("/") in whole)
            or not files.isdisjoint(re.split(r"[/\s'\"`(),]", text))
            or folder_prefix.search(text)
            or any(f in text for f in fragments)
        ):
            yield node.lineno, text


def test_no_module_but_folder_spells_a_run_folder_name() -> None:
    whole, fragments = owned_names()
    assert {"events.jsonl", "outbox", "model", "report.html", "patch.diff"} <= whole  # the scan sees names
    assert {".task.md", "exchanges-"} <= fragments
    found, stray = set(), []
    for path in sorted(ORCH.rglob("*.py")):
        module = path.relative_to(ORCH).as_posix()
        if module == "run/folder.py":
            continue
        for line, text in spelled_names(path.read_text(), whole, fragments):
            found.add((module, text))
            if (module, text) not in ALLOWED and module not in WHOLE_MODULES:
                stray.append(f"orch/{module}:{line}: {text!r}")
    assert not stray, "ask RunFolder (orch/run/folder.py) for these names:\n" + "\n".join(stray)
    assert not ALLOWED.keys() - found, f"stale ALLOWED entries: {sorted(ALLOWED.keys() - found)}"


@pytest.mark.parametrize(
    "line",
    [
        'root / "events.jsonl"',
        'Path(root, "outbox")',
        "f\"<a href='jobs/{job}.task.md'>brief</a>\"",
        'root.glob("exchanges-*.jsonl.gz")',
        '"the archive has no run.json"',
        'folder / "patch.diff"',
    ],
)
def test_the_check_catches_a_spelled_name(line: str) -> None:
    whole, fragments = owned_names()
    assert list(spelled_names(f"x = {line}\n", whole, fragments)), line


@pytest.mark.parametrize(
    "line",
    ['"""A docstring may name events.jsonl."""', 'x = data.get("state")', 'x = body["model"]', 'x = "done"'],
)
def test_the_check_leaves_other_strings(line: str) -> None:
    whole, fragments = owned_names()
    assert not list(spelled_names(line + "\n", whole, fragments)), line


def test_relative_names_are_links_within_the_run_folder() -> None:
    assert RELATIVE.report_html.as_posix() == "report.html"
    assert RELATIVE.change_patch("w1").as_posix() == "changes/w1/patch.diff"


def test_recordings_in_worker_order(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    assert run.recordings() == []  # no model/ yet
    run.model_dir.mkdir()
    for n in (10, 2, 1):
        run.exchanges(n).write_bytes(gzip.compress(b""))
    (run.model_dir / "exchanges-x.jsonl.gz").touch()
    run.model_usage.touch()
    assert run.recordings() == [run.exchanges(1), run.exchanges(2), run.exchanges(10)]
