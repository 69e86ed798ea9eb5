"""What each channel is given for a notice, escaped for its medium (pure: orch.notify.send delivers them).

A Notice's text is already plain (orch.escape.notice); each body escapes it again for the markup
its receiver reads: Slack's `&<>`, Discord's Markdown (and no mention allowed at all), a desktop
notification's HTML subset, a terminal's OSC fields. ntfy and the JSON body carry it as data.
"""

from __future__ import annotations

import json
from typing import Any

from orch import escape
from orch.notify.notice import WAITS, Notice, Reason

BEL = "\x07"
URGENT = (*WAITS, Reason.CRASHED, Reason.BUDGET_SPENT)
"""Reasons that stop work until a person acts: shown as urgent where the channel has urgency."""


def as_json(notice: Notice) -> dict[str, Any]:
    """The notice as data (the JSON webhook's body and the command hook's stdin): docs/notify.md."""
    return {"source": "orch", "title": notice.title(), **notice.model_dump(mode="json")}


def terminal(notice: Notice, tmux: bool) -> str:
    """A bell, then OSC 9 (iTerm2, WezTerm, Windows Terminal, kitty, ghostty) and OSC 777 (foot, urxvt,
    ghostty...), which terminals show as desktop notifications. `tmux`: written from inside a tmux pane,
    so each OSC goes through tmux's passthrough (shown with `set -g allow-passthrough on`)."""
    title = escape.osc_field(notice.title())
    body = escape.osc_field(" | ".join(notice.body().splitlines()))
    sequences = [f"\x1b]9;{escape.osc_field(notice.line())}{BEL}", f"\x1b]777;notify;{title};{body}{BEL}"]
    if tmux:
        sequences = ["\x1bPtmux;" + s.replace("\x1b", "\x1b\x1b") + "\x1b\\" for s in sequences]
    return BEL + "".join(sequences)


def slack(notice: Notice) -> dict[str, Any]:
    """A Slack incoming webhook's body: the notice as plain text (no mrkdwn, no link unfurled)."""
    text = f"{notice.title()}\n{notice.body()}"
    return {
        "text": escape.slack(text),
        "blocks": [{"type": "section", "text": {"type": "plain_text", "text": text, "emoji": False}}],
        "unfurl_links": False,
        "unfurl_media": False,
    }


SUPPRESS_EMBEDS = 1 << 2


def discord(notice: Notice) -> dict[str, Any]:
    """A Discord webhook's body: Markdown escaped, no mention of anyone parsed, no embed."""
    return {
        "username": "orch",
        "content": f"**{escape.discord(notice.title())}**\n{escape.discord(notice.body())}",
        "allowed_mentions": {"parse": []},
        "flags": SUPPRESS_EMBEDS,
    }


def ntfy(notice: Notice) -> tuple[dict[str, str], bytes]:
    """An ntfy publish: headers (orch's own words, ASCII) and the body as plain text (ntfy renders no
    Markdown unless asked)."""
    headers = {
        "Title": notice.title().encode("ascii", "replace").decode(),
        "Tags": f"orch,{notice.reason.value}",
        "Priority": "high" if notice.reason in URGENT else "default",
    }
    return headers, notice.body().encode()


def webhook_json(notice: Notice) -> bytes:
    return json.dumps(as_json(notice), ensure_ascii=False).encode()


def desktop_argv(notice: Notice) -> list[str]:
    """notify-send's argv (no shell): the body in the HTML subset notification servers read, escaped."""
    urgency = "critical" if notice.reason in URGENT else "normal"
    body = escape.desktop(notice.body())
    return ["notify-send", "--app-name=orch", f"--urgency={urgency}", "--", notice.title(), body]
