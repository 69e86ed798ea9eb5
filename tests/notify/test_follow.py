"""orch.notify.follow: a notifier following a run folder (real files, inotify, a loopback receiver) tells a
person within a second, once, and records what it delivered and what it gave up."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from orch.notify import send
from orch.notify.config import NotifyConfig, Webhook
from orch.notify.follow import Notifier, known_secrets, mute, muted
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent
from orch.waits import wait_until
from tests.helpers import run_events, run_info
from tests.notify.hostile import HOSTILE, carries
from tests.notify.receiver import Receiver
from tests.view.fakerun import hook


@pytest.fixture
def run() -> RunFolder:
    folder = RunFolder.for_name("nt")
    folder.create(run_info("nt", workers=2))
    return folder


@pytest.fixture
def notifier(run: RunFolder, receiver: Receiver) -> Iterator[Notifier]:
    config = NotifyConfig(webhooks=[Webhook(url=receiver.url())], rate_limit_after=0.5)
    with Notifier(run, config, send.channels(config, {})) as started:
        yield started


def ask(run: RunFolder, n: int, command: str) -> float:
    ts = time.time()
    hook(run, n, "PermissionRequest", ts=ts, tool_name="Bash", tool_input=json.dumps({"command": command}))
    return ts


def test_a_prompt_left_to_a_person_is_posted_within_a_second(
    run: RunFolder, receiver: Receiver, notifier: Notifier
) -> None:
    asked = ask(run, 2, HOSTILE)
    (post,) = receiver.wait_for(1)
    assert post.at - asked < 1.0
    body = post.json()
    assert (body["worker"], body["agent"], body["reason"]) == (2, "scripted", "permission")
    assert body["action"] == "orch attach nt 2 --write" and carries(post.body.decode()) == []
    wait_until(lambda: run_events(run, Event.NOTIFIED), 5, "the delivery in events.jsonl")
    (told,) = run_events(run, Event.NOTIFIED)
    assert (
        told["worker"] == 2 and told["data"]["channels"] == ["json webhook at 127.0.0.1"] and told["data"]["late"] < 1
    )


def test_the_past_is_not_sent_and_a_flood_is_held_back(run: RunFolder, receiver: Receiver) -> None:
    ask(run, 1, "before the notifier")
    config = NotifyConfig(webhooks=[Webhook(url=receiver.url())])
    with Notifier(run, config, send.channels(config, {})) as notifier:
        assert notifier.look() == []  # decided (it is open), never sent
        assert len(notifier.decider.open) == 1
        for i in range(50):  # a worker faking prompts, each a new wait
            ask(run, 2, f"fake {i}")
            hook(run, 2, "PreToolUse", tool_name="Bash")
        notifier.look()
    assert [p.json()["text"] for p in receiver.posts] == ["Bash: fake 0", "Bash: fake 1", "Bash: fake 2"]


def test_a_muted_run_sends_nothing(run: RunFolder, receiver: Receiver, notifier: Notifier) -> None:
    mute(run, True)
    assert muted(run)
    ask(run, 1, "while muted")
    assert notifier.look() == []
    mute(run, False)
    ask(run, 2, "after")
    (post,) = receiver.wait_for(1)
    assert post.json()["text"] == "Bash: after"


def test_the_runs_end_is_sent_before_close_returns(run: RunFolder, receiver: Receiver) -> None:
    config = NotifyConfig(webhooks=[Webhook(url=receiver.url())])
    notifier = Notifier(run, config, send.channels(config, {})).start()
    data = {"exit_code": 0, "status": "passed", "reason": "every task completed", "cost_usd": 0.12}
    run.log_event(ControllerEvent(event=Event.FINISHED, data=data))
    notifier.close()
    (post,) = receiver.posts
    assert post.json()["text"] == "passed (exit 0): every task completed; cost $0.12"
    assert post.json()["action"] == f"open {run.report_html}" and notifier.ended


def test_a_rate_limit_holding_the_fleet_wakes_it_at_its_deadline(
    run: RunFolder, receiver: Receiver, notifier: Notifier
) -> None:
    limited = time.time()
    hook(run, 1, "StopFailure", ts=limited, error="rate_limit")
    (post,) = receiver.wait_for(1)
    assert post.json()["reason"] == "rate-limited" and 0.5 <= post.at - limited < 1.5


def test_a_webhook_given_up_is_in_events_without_its_url(run: RunFolder) -> None:
    url = "http://127.0.0.1:9/T000/B000/sekrit"
    config = NotifyConfig(webhooks=[Webhook(url=url)])
    channels = send.channels(config, {})
    for channel in channels:
        assert isinstance(channel, send.Post)
    with Notifier(run, config, channels) as notifier:
        notifier.sender.backoff = 0.01
        ask(run, 1, "make")
    (failed,) = run_events(run, Event.NOTIFY_FAILED)
    assert failed["data"]["channel"] == "json webhook at 127.0.0.1" and "sekrit" not in json.dumps(failed)


def test_known_secrets() -> None:
    config = NotifyConfig(webhooks=[Webhook(url="${HOOK}"), Webhook(url="https://ntfy.sh/my-private-topic")])
    env = {"HOOK": "https://hooks.slack.com/services/T0/B0/abcdefghijkl", "ANTHROPIC_API_KEY": "sk-ant-x" * 3,
           "HOME": "/home/someone"}  # fmt: skip
    found = known_secrets(env, config)
    assert "abcdefghijkl" in found and "my-private-topic" in found and "sk-ant-x" * 3 in found
    assert "/home/someone" not in found
