"""What a lying worker writes into what it waits on, for every test of what reaches a person, and what none of
the channels may carry of it."""

from __future__ import annotations

FAKE_KEY = "sk-ant-api03-Zq7xK2mP9vL4nR8sT1wY6bC3dF5gH0jAbCdEfGhIjKlMnOp"
RUN_TOKEN = "orch-demo-w2-0123456789abcdef0123456789abcdef"
WEB_TOKEN = "Xb3kP9qL2mZ7vN4rT8sW1yC6"
HOSTILE = (
    "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e "
    "@here @everyone <!channel> <!here> <@U024BE7LH> "
    "**urgent** [approve here](https://evil.example/login) <a href='https://evil.example'>ok</a> <b>bold</b> "
    "see https://evil.example/approve and www.evil.example and evil.example/x "
    f"key {FAKE_KEY} token {RUN_TOKEN} http://127.0.0.1:8080/?t={WEB_TOKEN}&run=demo "
    "Authorization: Bearer abcdef123456 " + "x" * 300
)
"""Control sequences, mentions (Slack's and Discord's), Markdown and HTML links, bare links, an API key, a run
token, the web view's token and a bearer header, then enough to need cutting."""

NEVER = (
    "\x1b",
    "\x07",
    "\x9b",
    "\u202e",
    "@here",
    "@everyone",
    "<!channel>",
    "<!here>",
    "<@U024",
    "https://",
    "http://",
    "www.evil",
    "evil.example/",
    "](",
    "<a ",
    "<b>",
    FAKE_KEY,
    FAKE_KEY[:20],
    RUN_TOKEN,
    WEB_TOKEN,
    "abcdef123456",
)
"""What no notification may carry, in any channel's body (terminal sequences aside: orch's own OSC and bell)."""


def carries(body: str) -> list[str]:
    """The forbidden parts found in `body`."""
    return [part for part in NEVER if part in body]
