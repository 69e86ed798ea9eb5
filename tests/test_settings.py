"""orch/settings/: every ORCH_* variable declared once there, read only through it, docs/settings.md in step, a
bad value one line at the CLI. How one setting reads its variable: tests/settings/test_base.py."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orch.settings.base import DECLARING, Setting, every

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "orch" / "settings"
NAME = re.compile(r"\bORCH_[A-Z0-9_]*[A-Z0-9]\b")
# A read of an ORCH_* variable anywhere but orch/settings/ (environ.get("ORCH_..."), environ["ORCH_..."], getenv).
DIRECT_READ = re.compile(r"""(environ\s*(\.get\s*\(|\[)|getenv\s*\()\s*["']ORCH_""")
BARE_SCRIPTS = (
    "orch/run/hookwriter.py",  # run as `python -S FILE`: cannot import orch.settings
    "orch/run/workerpost.py",  # a worker's post, before orch.settings (and its enum and pathlib) is imported
)
ALL = every()
KNOWN = set(ALL) | {old for s in ALL.values() for old in s.deprecated}


def _sources() -> list[Path]:
    return sorted((ROOT / "orch").rglob("*.py"))


def test_every_orch_variable_in_orch_is_declared_in_settings() -> None:
    stray = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources()
        for name in NAME.findall(path.read_text(encoding="utf-8"))
        if name not in KNOWN
    }
    assert not stray, "declare these in orch/settings/ (user.py, compose.py or internal.py): " + ", ".join(
        sorted(stray)
    )


def test_no_module_reads_an_orch_variable_itself() -> None:
    direct = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _sources()
        if path.parent != PACKAGE and path.relative_to(ROOT).as_posix() not in BARE_SCRIPTS
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if DIRECT_READ.search(line)
    ]
    assert not direct, "read these through orch.settings: " + ", ".join(direct)


def test_every_module_that_declares_a_variable_is_one_every_reads() -> None:
    """every() (the docs table's check, the stray-name check) sees a module's variables only if it imports it."""
    declaring = {
        path.stem
        for path in PACKAGE.glob("*.py")
        if path.stem != "base"
        and any(
            isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("Setting", "_agent_bin")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert declaring == set(DECLARING)


@pytest.mark.parametrize(
    ("variable", "value", "argv"),
    [
        ("ORCH_LOG_LEVEL", "loud", ["ls"]),
        ("ORCH_LOG_LEVEL", "loud", ["bus", "post", "r", "hello"]),  # the fast path, before typer
        ("ORCH_WORKERS", "many", ["serve-run", "r", "--create"]),  # compose's fleet service
    ],
    ids=["typer", "bus-fast-path", "serve-run"],
)
def test_cli_says_a_bad_value_in_one_line(variable: str, value: str, argv: list[str]) -> None:
    env = {**os.environ, variable: value, "ORCH_IN_CONTAINER": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "from orch.cli.main import main; main()", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"orch: error: environment variable {variable}={value!r}: expected"), done.stderr


def table_row(setting: Setting[object]) -> str:
    return f"| `{setting.name}` | {setting.shown} | {setting.help} |"


def test_docs_list_every_variable() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for setting in ALL.values():
        if setting.internal:
            assert f"`{setting.name}`" in page, f"docs/settings.md: list {setting.name} under the internal variables"
        else:
            assert table_row(setting) in page, f"docs/settings.md's table needs the row:\n{table_row(setting)}"
