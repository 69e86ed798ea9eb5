"""orch.settings.base: a setting reads its variable when asked, unset and empty are its default, a bad value is one
line naming the variable, an old name still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.errors import SettingError
from orch.settings.base import Setting
from orch.settings.compose import OFFLINE, UID
from orch.settings.internal import PROMPTS, SCRIPTED_DROP_ENTERS
from orch.settings.user import DEFAULT_ALLOW, DOCKER_REMOTE, HOME, IMAGE, LOG_LEVEL

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(
    ("setting", "value", "why"),
    [
        (LOG_LEVEL, "loud", "expected one of DEBUG"),
        (UID, "root", "expected a whole number"),
        (SCRIPTED_DROP_ENTERS, "2.5", "expected a whole number"),
        (DOCKER_REMOTE, "maybe", "expected 1 or 0"),
        (OFFLINE, "sometimes", "expected 1 or 0"),
        (PROMPTS, "[1, 2]", "expected a JSON object"),
    ],
    ids=lambda v: v.name if isinstance(v, Setting) else None,
)
def test_a_bad_value_is_a_one_line_error_naming_the_variable(setting: Setting[object], value: str, why: str) -> None:
    with pytest.raises(SettingError) as caught:
        setting.get({setting.name: value})
    line = caught.value.one_line()
    assert "\n" not in line
    assert line.startswith(f"environment variable {setting.name}={value!r}: {why}"), line
    assert caught.value.exit_code == 2


def test_unset_and_empty_are_the_default() -> None:
    assert LOG_LEVEL.get({}) == LOG_LEVEL.get({"ORCH_LOG_LEVEL": ""}) == "WARNING"
    assert LOG_LEVEL.get({"ORCH_LOG_LEVEL": "debug"}) == "DEBUG"
    assert HOME.get({}) == Path.home() / ".orch"
    assert DOCKER_REMOTE.get({}) is None
    assert DEFAULT_ALLOW.is_set({"ORCH_DEFAULT_ALLOW": ""}), "set but empty means no default hosts"


def test_read_when_asked_not_at_import(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "elsewhere"))
    assert HOME.get() == tmp_path / "elsewhere"


def test_orch_image_tag_still_names_the_image_but_orch_image_wins() -> None:
    assert IMAGE.get({}) == "orch:latest"
    assert IMAGE.get({"ORCH_IMAGE_TAG": "old:tag"}) == "old:tag"
    assert IMAGE.get({"ORCH_IMAGE_TAG": "old:tag", "ORCH_IMAGE": "new:tag"}) == "new:tag"
