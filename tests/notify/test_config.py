"""orch.notify.config: the user's file, a spec's `notify:` and `--notify` flags, merged; bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.notify import config
from orch.notify.config import NotifyConfig, Webhook, WebhookFormat
from orch.notify.notice import Reason
from orch.spec.model import FleetSpec

pytestmark = pytest.mark.pure

SLACK = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX"


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("off", NotifyConfig(off=True)),
        ("terminal", NotifyConfig(terminal=True)),  # an `orch up` run's attached clients too
        ("desktop", NotifyConfig(desktop=True)),
        ("http://127.0.0.1:9/hook", NotifyConfig(webhooks=[Webhook(url="http://127.0.0.1:9/hook")])),
        (SLACK, NotifyConfig(webhooks=[Webhook(url=SLACK, format=WebhookFormat.SLACK)])),
        (
            "https://ntfy.sh/my-topic",
            NotifyConfig(webhooks=[Webhook(url="https://ntfy.sh/my-topic", format=WebhookFormat.NTFY)]),
        ),
        (
            "discord:https://chat.example/api/w",
            NotifyConfig(webhooks=[Webhook(url="https://chat.example/api/w", format=WebhookFormat.DISCORD)]),
        ),
        ("command:notify-me --urgent 'a b'", NotifyConfig(command=["notify-me", "--urgent", "a b"])),
    ],
)
def test_a_flag_is_one_channel(flag: str, expected: NotifyConfig) -> None:
    assert config.parse_target(flag) == expected


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("pager", "--notify 'pager': not a target"),
        ("slack:hooks.slack.com/x", "--notify 'slack:hooks.slack.com/x': not a target"),
        ("file:///etc/passwd", "--notify 'file:///etc/passwd': not a target"),
        ("command:", "--notify command: needs a program"),
    ],
)
def test_a_bad_flag_is_one_line(flag: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        config.parse_target(flag)
    assert caught.value.one_line().startswith(said) and caught.value.exit_code == 2


def test_the_spec_wins_field_by_field_and_flags_add() -> None:
    user = NotifyConfig(desktop=True, webhooks=[Webhook(url=SLACK, format=WebhookFormat.SLACK)], rate_limit_after=60)
    spec = NotifyConfig.model_validate({"reasons": ["permission", "run-ended"], "desktop": False})
    merged = config.merge(user, spec, ["https://ntfy.sh/t", "command:notify-me"])
    assert merged.desktop is False and merged.rate_limit_after == 60
    assert [h.format for h in merged.webhooks] == [WebhookFormat.SLACK, WebhookFormat.NTFY]
    assert merged.command == ["notify-me"]
    assert merged.wants(Reason.PERMISSION) and not merged.wants(Reason.CRASHED)
    assert not config.merge(user, spec, ["off"]).wants(Reason.PERMISSION)


def test_a_spec_names_a_webhook_only_by_variable() -> None:
    """A spec is saved in its run folder, where the workers can read it: a URL there is a leaked secret."""
    base = {"tasks": [{"goal": "look"}]}
    with pytest.raises(ValueError, match=r"webhooks\.0\.url: a spec is saved where its workers can read it"):
        FleetSpec.model_validate({**base, "notify": {"webhooks": [{"url": SLACK}]}})
    spec = FleetSpec.model_validate({**base, "notify": {"webhooks": [{"url": "${SLACK_HOOK}", "format": "slack"}]}})
    (hook,) = spec.notify.webhooks
    assert hook.resolve({"SLACK_HOOK": SLACK}) == SLACK and hook.label() == "slack webhook at ${SLACK_HOOK}"
    with pytest.raises(UsageError, match="webhook variable SLACK_HOOK is not set"):
        hook.resolve({})
    with pytest.raises(UsageError, match="webhook variable SLACK_HOOK: expected an http"):
        hook.resolve({"SLACK_HOOK": "gopher://x"})


def test_a_label_never_says_the_url() -> None:
    assert Webhook(url=SLACK, format=WebhookFormat.SLACK).label() == "slack webhook at hooks.slack.com"


def test_a_link_has_no_token() -> None:
    assert NotifyConfig(link="https://watch.example:8443/").link == "https://watch.example:8443/"
    with pytest.raises(ValueError, match="a link has no query"):
        NotifyConfig(link="http://127.0.0.1:8000/?t=abc")


def test_the_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = config.config_path()
    assert path == tmp_path / "orch" / "config.toml" and config.load_user() is None  # no file: no defaults
    path.parent.mkdir()
    path.write_text("[other]\nx = 1\n")
    assert config.load_user() is None  # no [notify] table
    path.write_text(
        f'[notify]\ndesktop = false\ncommand = ["notify-me"]\n[[notify.webhooks]]\nurl = "{SLACK}"\nformat = "slack"\n'
    )
    path.chmod(0o600)
    loaded = config.load_user()
    assert loaded is not None and loaded.command == ["notify-me"] and loaded.webhooks[0].url == SLACK


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[notify\n", "config.toml: Expected ']'"),
        (
            "[notify]\nwebhooks = [{url = 'ftp://x'}]\n",
            "config.toml: notify.webhooks.0.url: Value error, expected an http",
        ),
        ("[notify]\nloud = true\n", "config.toml: notify.loud: Extra inputs are not permitted"),
        ("[notify]\nreasons = ['everything']\n", "config.toml: notify.reasons.0: Input should be"),
    ],
)
def test_a_bad_user_file_is_one_line_naming_it(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(UsageError) as caught:
        config.load_user(path)
    assert said in caught.value.one_line() and "\n" not in caught.value.one_line()


def test_a_user_file_others_may_write_is_refused(tmp_path: Path) -> None:
    """Its command runs as the user: a file another user may write would run their program."""
    path = tmp_path / "config.toml"
    path.write_text("[notify]\ncommand = ['notify-me']\n")
    path.chmod(0o622)
    with pytest.raises(UsageError, match="others may write it"):
        config.load_user(path)
