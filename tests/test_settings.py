"""orch.settings: every ORCH_* variable declared once, read only there, bad values one line, docs/settings.md in
step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orch import settings
from orch.errors import SettingError

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bORCH_[A-Z0-9_]*[A-Z0-9]\b")
# A read of an ORCH_* variable anywhere but orch/settings.py (environ.get("ORCH_..."), environ["ORCH_..."], getenv).
DIRECT_READ = re.compile(r"""(environ\s*(\.get\s*\(|\[)|getenv\s*\()\s*["']ORCH_""")
BARE_SCRIPTS = (
    "orch/run/hookwriter.py",  # run as `python -S FILE`: cannot import orch.settings
    "orch/run/workerpost.py",  # a worker's post, before orch.settings (and its enum and pathlib) is imported
)
KNOWN = set(settings.ALL) | {old for s in settings.ALL.values() for old in s.deprecated}


def _sources() -> list[Path]:
    return sorted((ROOT / "orch").rglob("*.py"))


def test_every_orch_variable_in_orch_is_declared_in_settings() -> None:
    stray = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources()
        for name in NAME.findall(path.read_text(encoding="utf-8"))
        if name not in KNOWN
    }
    assert not stray, "declare these in orch/settings.py: " + ", ".join(sorted(stray))


def test_no_module_reads_an_orch_variable_itself() -> None:
    direct = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _sources()
        if path.relative_to(ROOT).as_posix() not in ("orch/settings.py", *BARE_SCRIPTS)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if DIRECT_READ.search(line)
    ]
    assert not direct, "read these through orch.settings: " + ", ".join(direct)


@pytest.mark.parametrize(
    ("setting", "value", "why"),
    [
        (settings.LOG_LEVEL, "loud", "expected one of DEBUG"),
        (settings.UID, "root", "expected a whole number"),
        (settings.SCRIPTED_DROP_ENTERS, "2.5", "expected a whole number"),
        (settings.DOCKER_REMOTE, "maybe", "expected 1 or 0"),
        (settings.OFFLINE, "sometimes", "expected 1 or 0"),
        (settings.PROMPTS, "[1, 2]", "expected a JSON object"),
    ],
    ids=lambda v: v.name if isinstance(v, settings.Setting) else None,
)
def test_a_bad_value_is_a_one_line_error_naming_the_variable(
    setting: settings.Setting[object], value: str, why: str
) -> None:
    with pytest.raises(SettingError) as caught:
        setting.get({setting.name: value})
    line = caught.value.one_line()
    assert "\n" not in line
    assert line.startswith(f"environment variable {setting.name}={value!r}: {why}"), line
    assert caught.value.exit_code == 2


def test_unset_and_empty_are_the_default() -> None:
    assert settings.LOG_LEVEL.get({}) == settings.LOG_LEVEL.get({"ORCH_LOG_LEVEL": ""}) == "WARNING"
    assert settings.LOG_LEVEL.get({"ORCH_LOG_LEVEL": "debug"}) == "DEBUG"
    assert settings.HOME.get({}) == Path.home() / ".orch"
    assert settings.DOCKER_REMOTE.get({}) is None
    assert settings.DEFAULT_ALLOW.is_set({"ORCH_DEFAULT_ALLOW": ""}), "set but empty means no default hosts"


def test_read_when_asked_not_at_import(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "elsewhere"))
    assert settings.HOME.get() == tmp_path / "elsewhere"


def test_orch_image_tag_still_names_the_image_but_orch_image_wins() -> None:
    assert settings.IMAGE.get({}) == "orch:latest"
    assert settings.IMAGE.get({"ORCH_IMAGE_TAG": "old:tag"}) == "old:tag"
    assert settings.IMAGE.get({"ORCH_IMAGE_TAG": "old:tag", "ORCH_IMAGE": "new:tag"}) == "new:tag"


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


def table_row(setting: settings.Setting[object]) -> str:
    return f"| `{setting.name}` | {setting.shown} | {setting.help} |"


def test_docs_list_every_variable() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for setting in settings.ALL.values():
        if setting.internal:
            assert f"`{setting.name}`" in page, f"docs/settings.md: list {setting.name} under the internal variables"
        else:
            assert table_row(setting) in page, f"docs/settings.md's table needs the row:\n{table_row(setting)}"
