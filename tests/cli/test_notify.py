"""`orch notify`: mute and unmute, a test notice through the configured channels; `orch attach NAME N`."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from tests.helpers import orch, run_info
from tests.notify.receiver import Receiver


@pytest.fixture
def run() -> RunFolder:
    folder = RunFolder.for_name("nc")
    folder.create(run_info("nc", workers=2))
    return folder


def test_mute_and_unmute(run: RunFolder) -> None:
    muted = orch("notify", "mute", "nc")
    assert muted.exit_code == 0 and "notifications muted" in muted.output and run.notify_muted.exists()
    assert orch("notify", "unmute", "nc").exit_code == 0 and not run.notify_muted.exists()


def test_a_test_notice_goes_through_every_channel(receiver: Receiver, tmp_path: Path) -> None:
    config = tmp_path / "config" / "orch" / "config.toml"  # XDG_CONFIG_HOME is the test's (tests/conftest.py)
    config.parent.mkdir(parents=True)
    config.write_text(f'[notify]\n[[notify.webhooks]]\nurl = "{receiver.url("file")}"\nformat = "slack"\n')
    config.chmod(0o600)
    result = orch("notify", "test", "--notify", f"ntfy:{receiver.url('flag')}")
    assert result.exit_code == 0, result.output
    assert "slack webhook at 127.0.0.1: delivered" in result.output
    assert sorted(p.path for p in receiver.posts) == ["/file", "/flag"]
    (flag,) = [p for p in receiver.posts if p.path == "/flag"]
    assert flag.headers["Title"] == "orch test: run ended" and b"nothing needs you" in flag.body


def test_a_test_with_nowhere_to_send_or_a_failing_channel_says_so() -> None:
    nowhere = orch("notify", "test")
    assert nowhere.exit_code == 2 and "orch: error: no channel to send to" in nowhere.output
    failing = orch("notify", "test", "--notify", "command:false")
    assert failing.exit_code == 1 and "command false: failed: false exited 1" in failing.output


def test_attach_checks_its_worker(run: RunFolder) -> None:
    result = orch("attach", "nc", "3")
    assert result.exit_code == 2 and "worker 3 is out of range for run 'nc'" in result.output


def test_a_webhook_whose_variable_is_unset_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_HOOK", raising=False)
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "workdir: .\nagent: scripted\noffline: true\nworkers: 2\ntasks: [{goal: look}]\n"
        "notify: {webhooks: [{url: '${NOT_SET_HOOK}'}]}\n"
    )
    result = orch("run", spec, "--local", "--name", "nohook")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1].startswith("orch: error: notify: webhook variable NOT_SET_HOOK is not set")
    assert not RunFolder.for_name("nohook").exists()
