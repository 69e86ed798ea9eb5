"""orch.notify.send against real receivers: a loopback webhook server, a real program on stdin, a terminal
stream. Delivery is off the caller's thread, retried with backoff, recorded when it gives up."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from orch.errors import UsageError
from orch.notify import send
from orch.notify.config import NotifyConfig, Webhook, WebhookFormat
from orch.notify.notice import Notice, Reason
from orch.notify.send import ATTEMPTS, Delivery, Sender
from orch.waits import wait_until
from tests.notify.receiver import Receiver

NOTICE = Notice(run="demo", worker=1, agent="claude", reason=Reason.PERMISSION, text="Bash: make",
                action="orch attach demo 1 --write", ts=time.time())  # fmt: skip


def deliver(channels: list[send.Channel], timeout: float = 30.0) -> Delivery:
    done: list[Delivery] = []
    sender = Sender(channels, done.append, backoff=0.01)
    sender.send(NOTICE)
    assert sender.close(timeout)
    (delivery,) = done
    return delivery


def test_each_format_posts_its_body(receiver: Receiver) -> None:
    hooks = [Webhook(url=receiver.url(fmt.value), format=fmt) for fmt in WebhookFormat]
    delivery = deliver(send.channels(NotifyConfig(webhooks=hooks), {}))
    assert not delivery.failed and len(delivery.delivered) == 4
    by_path = {p.path: p for p in receiver.posts}
    assert by_path["/json"].json()["action"] == "orch attach demo 1 --write"
    assert by_path["/slack"].json()["text"].startswith("orch demo: W1 (claude) waits on a permission")
    assert by_path["/discord"].json()["allowed_mentions"] == {"parse": []}
    assert by_path["/ntfy"].headers["Title"] == "orch demo: W1 (claude) waits on a permission"
    assert by_path["/ntfy"].body == b"Bash: make\n-> orch attach demo 1 --write"


def test_a_failing_webhook_is_retried_then_given_up_without_its_url(receiver: Receiver) -> None:
    receiver.answers = [503, 429]
    assert not deliver([send.Post(Webhook(url=receiver.url()), receiver.url())]).failed
    assert len(receiver.posts) == 3
    receiver.answers = [500] * ATTEMPTS
    delivery = deliver([send.Post(Webhook(url=receiver.url("secret-path")), receiver.url("secret-path"))])
    assert delivery.failed == [("json webhook at 127.0.0.1", "json webhook at 127.0.0.1: HTTP 500")]
    assert len(receiver.posts) == 3 + ATTEMPTS
    receiver.answers = [404]  # the receiver says the URL is wrong: another try would say the same
    assert deliver([send.Post(Webhook(url=receiver.url()), receiver.url())]).failed
    assert len(receiver.posts) == 4 + ATTEMPTS


def test_nobody_listening_is_a_failure_too() -> None:
    url = "http://127.0.0.1:9/hook"  # discard: nothing listens
    delivery = deliver([send.Post(Webhook(url=url), url)])
    assert delivery.failed and "secret" not in str(delivery.failed) and "127.0.0.1:9/hook" not in str(delivery.failed)


def test_a_slow_webhook_delays_neither_the_caller_nor_the_terminal(receiver: Receiver) -> None:
    """The webhook answers only when the test lets it (no clock: a loaded machine stretches every duration): the
    caller is back and the terminal written while it holds."""
    receiver.hold = threading.Event()
    written: list[str] = []
    channels = [send.Terminal(written.append, tmux=False), send.Post(Webhook(url=receiver.url()), receiver.url())]
    done: list[Delivery] = []
    sender = Sender(channels, done.append)
    try:
        sender.send(NOTICE)
        assert not done  # the caller never waits: the delivery cannot have ended yet
        receiver.wait_for(1)
        wait_until(lambda: written, 10, "the terminal's notice, while the webhook holds its answer")
        assert "\x1b]9;" in written[0] and not done
        released = time.time()
    finally:
        receiver.hold.set()
    assert sender.close(10)
    assert done[0].late >= released - NOTICE.ts and not done[0].failed


def test_the_command_gets_the_notice_as_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    script = tmp_path / "notify-me"
    script.write_text(f"#!/bin/sh\ncat > {out}\n")
    script.chmod(0o755)
    assert not deliver([send.Command([str(script)])]).failed
    got = json.loads(out.read_text())
    assert got["reason"] == "permission" and got["worker"] == 1 and got["title"].startswith("orch demo: W1")


def test_a_command_that_fails_or_hangs_is_said_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = tmp_path / "fails"
    failing.write_text("#!/bin/sh\necho 'no route' >&2\nexit 3\n")
    failing.chmod(0o755)
    assert deliver([send.Command([str(failing)])]).failed == [("command fails", "fails exited 3: no route")]
    assert deliver([send.Command([str(tmp_path / "missing")])]).failed[0][1].endswith("No such file or directory")
    monkeypatch.setattr(send, "COMMAND_TIMEOUT", 0.5)
    hangs = tmp_path / "hangs"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    assert deliver([send.Command([str(hangs)])]).failed == [("command hangs", "hangs did not finish within 0.5s")]


def test_desktop_gets_its_argv_no_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """notify-send is not installed here: a program of that name on PATH records what it was given."""
    out = tmp_path / "argv"
    shim = tmp_path / "notify-send"
    shim.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > {out}\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    env = {"DISPLAY": ":0", "PATH": os.environ["PATH"]}
    channels = send.channels(NotifyConfig(), env)
    assert [c.label for c in channels] == ["desktop"]  # auto: a desktop session and notify-send
    assert not deliver(channels).failed
    argv = out.read_text().split("\0")[:-1]
    assert argv[:3] == ["--app-name=orch", "--urgency=critical", "--"] and argv[3].startswith("orch demo: W1")
    assert send.channels(NotifyConfig(), {}) == []  # no desktop session: no desktop channel


def test_channels_follow_the_config(receiver: Receiver) -> None:
    config = NotifyConfig(webhooks=[Webhook(url="${HOOK}")], command=["true"], desktop=False)
    labels = [c.label for c in send.channels(config, {"HOOK": receiver.url()}, write=print)]
    assert labels == ["terminal", "json webhook at ${HOOK}", "command true"]
    assert send.channels(config.model_copy(update={"off": True}), {"HOOK": receiver.url()}, write=print) == []
    with pytest.raises(UsageError, match="webhook variable HOOK is not set"):
        send.channels(config, {})
