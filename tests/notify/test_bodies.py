"""orch.notify.bodies: each channel's body says the run, the worker and its agent, the reason, the text and
the action, escaped for its medium; none carries what a hostile worker smuggled in."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings

from orch import escape
from orch.notify import bodies
from orch.notify.notice import TEXT_CHARS, Notice, Reason
from tests.notify.hostile import HOSTILE, carries
from tests.test_escape import TEXT

pytestmark = pytest.mark.pure

NOTICE = Notice(
    run="demo",
    worker=2,
    agent="codex",
    reason=Reason.PERMISSION,
    text=escape.notice(HOSTILE, TEXT_CHARS),
    action="orch attach demo 2 --write",
    ts=1.0,
    suppressed=4,
)
SAYS = ("demo", "W2", "codex", "waits on a permission", "orch attach demo 2 --write", "4 more held back")


def _says_all(text: str) -> None:
    missing = [part for part in SAYS if part not in text]
    assert not missing, text


def test_json() -> None:
    body = json.loads(bodies.webhook_json(NOTICE))
    assert body["source"] == "orch" and body["reason"] == "permission" and body["worker"] == 2
    assert body["action"] == "orch attach demo 2 --write" and body["title"] == NOTICE.title()
    assert carries(json.dumps(body, ensure_ascii=False)) == []


def test_slack() -> None:
    body = bodies.slack(NOTICE)
    _says_all(body["text"])
    assert body["blocks"][0]["text"]["type"] == "plain_text" and not body["unfurl_links"]
    assert carries(json.dumps(body, ensure_ascii=False)) == [] and "<" not in body["text"]


def test_discord() -> None:
    body = bodies.discord(NOTICE)
    assert body["allowed_mentions"] == {"parse": []}
    assert carries(body["content"]) == [] and "](" not in body["content"]
    _says_all(body["content"].replace("\\", ""))


def test_ntfy() -> None:
    headers, body = bodies.ntfy(NOTICE)
    assert headers["Title"] == "orch demo: W2 (codex) waits on a permission" and headers["Priority"] == "high"
    assert all(value.isascii() for value in headers.values())
    _says_all(headers["Title"] + body.decode())
    assert carries(body.decode()) == []


def test_desktop() -> None:
    argv = bodies.desktop_argv(NOTICE)
    assert argv[:4] == ["notify-send", "--app-name=orch", "--urgency=critical", "--"]
    _says_all(" ".join(argv[4:]))
    assert carries(argv[5]) == [] and "<" not in argv[5]


@pytest.mark.parametrize("tmux", [False, True])
def test_terminal(tmux: bool) -> None:
    out = bodies.terminal(NOTICE, tmux)
    osc9 = re.search(r"\x1b\x1b?\]9;([^\x07\x1b]*)\x07", out)
    osc777 = re.search(r"\x1b\x1b?\]777;notify;([^;\x07\x1b]*);([^;\x07\x1b]*)\x07", out)
    assert out.startswith(bodies.BEL) and osc9 is not None and osc777 is not None
    _says_all(osc9.group(1))
    _says_all(osc777.group(1) + osc777.group(2))
    for field in (osc9.group(1), osc777.group(1), osc777.group(2)):
        assert carries(field) == [] and field.isprintable()
    if tmux:  # each OSC inside tmux's passthrough, its escapes doubled
        assert out.count("\x1bPtmux;") == 2 and out.endswith("\x1b\\")
    else:
        assert "\x1bP" not in out


_SCHEME = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://")


@settings(max_examples=150, deadline=None)
@given(text=TEXT)
def test_any_worker_text_stays_text_in_every_channel(text: str) -> None:
    """Whatever a worker waits on (hostile snippets glued to anything: tests/test_escape.py's TEXT), each channel's
    body carries it as one line of text: no control character, link, mention or markup of its own."""
    notice = NOTICE.model_copy(update={"text": escape.notice(text, TEXT_CHARS)})
    said = notice.text
    assert said.isprintable() and not _SCHEME.search(said) and "@" not in said and "](" not in said
    assert not {"<", ">"} & set(said)
    assert json.loads(bodies.webhook_json(notice))["text"] == said
    slack = bodies.slack(notice)["text"]
    assert not {"<", ">"} & set(slack) and "@" not in slack
    content = bodies.discord(notice)["content"].split("\n", 1)[1]  # under orch's own bold title
    assert not re.search(r"(?<!\\)(?:\\\\)*[*_~`|>#\[\]()<:-]", content.replace("\\\\", "")), content
    body = bodies.desktop_argv(notice)[5]
    assert not {"<", ">", '"', "'"} & set(body) and body.replace("\n", "").isprintable()
    headers, plain = bodies.ntfy(notice)
    assert all(value.isascii() and value.isprintable() for value in headers.values())
    assert plain.decode().split("\n") == [*([said] if said else []), "(and 4 more held back)", f"-> {notice.action}"]
    out = bodies.terminal(notice, tmux=False)
    fields = re.fullmatch(r"\x07\x1b\]9;([^\x07\x1b]*)\x07\x1b\]777;notify;([^;\x07\x1b]*);([^;\x07\x1b]*)\x07", out)
    assert fields is not None, repr(out)
    assert all(field.isprintable() and not field[:1].isdigit() for field in fields.groups())
