"""Where notifications go: the `notify:` section of a spec, the user's config file, `--notify` flags.

Three sources, each over the one before: the user's file (`$XDG_CONFIG_HOME/orch/config.toml`, else
`~/.config/orch/config.toml`; its `[notify]` table) holds the defaults; a spec's `notify:` replaces each
field it sets; each `--notify TARGET` adds a channel (`off` sends nothing). docs/notify.md documents every field.

A webhook's URL is a secret (whoever has it posts to the channel). A spec is saved in its run folder,
which the workers can read, so a spec names a URL only as `${VARIABLE}`, read from the environment when
sending; the user's file (refused when others may write it: its command runs as the user) and a flag
may hold the URL itself, and neither is written anywhere.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator

from orch.errors import UsageError
from orch.notify.notice import Reason
from orch.run.records import Strict
from orch.text import first_error

_VARIABLE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
TARGETS = "off, terminal, desktop, a webhook URL (json:, slack:, discord: or ntfy: before it: its body), command:ARGV"


class WebhookFormat(StrEnum):
    JSON = "json"
    """The notice as JSON (docs/notify.md), for your own receiver."""
    SLACK = "slack"
    """A Slack incoming webhook's body (also Mattermost and Rocket.Chat)."""
    DISCORD = "discord"
    """A Discord webhook's body, with no mention allowed."""
    NTFY = "ntfy"
    """An ntfy topic URL (https://ntfy.sh/TOPIC or your own server)."""


# A URL on one of these hosts picks its body by itself (`--notify URL`).
KNOWN_HOSTS = {
    "hooks.slack.com": WebhookFormat.SLACK,
    "discord.com": WebhookFormat.DISCORD,
    "discordapp.com": WebhookFormat.DISCORD,
    "ntfy.sh": WebhookFormat.NTFY,
}


class Webhook(Strict):
    url: str
    """http(s) URL, or `${VARIABLE}`: read from the environment when sending (the only form a spec takes)."""
    format: WebhookFormat = WebhookFormat.JSON
    """The body the service reads: json (orch's notice), slack, discord or ntfy (docs/notify.md)."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if _VARIABLE.match(value) is None:
            check_url(value)
        return value

    @property
    def variable(self) -> str | None:
        match = _VARIABLE.match(self.url)
        return match.group(1) if match else None

    def resolve(self, env: Mapping[str, str]) -> str:
        """The URL to post to; UsageError when its variable is unset or not a URL."""
        name = self.variable
        if name is None:
            return self.url
        value = env.get(name, "")
        if not value:
            raise UsageError(f"notify: webhook variable {name} is not set", hint=f"export {name}=https://...")
        try:
            check_url(value)
        except ValueError as exc:
            raise UsageError(f"notify: webhook variable {name}: {exc}", hint="give an http(s) URL") from None
        return value

    def label(self) -> str:
        """What events.jsonl and errors may say about it: its format and host, never its path or query."""
        where = f"${{{self.variable}}}" if self.variable else (urlsplit(self.url).hostname or "?")
        return f"{self.format.value} webhook at {where}"


def check_url(value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL or ${VARIABLE}")


class NotifyConfig(Strict):
    """Where a run's notifications go (the spec's `notify:`, the user file's `[notify]`)."""

    terminal: bool | None = None
    """Bell and OSC 9/777: unset, on the terminal of `orch run` and `orch watch`; true, also on the terminals
    attached to an `orch up` run's tmux (`orch attach`), which starts its notifier; false: nowhere."""
    desktop: bool | None = None
    """notify-send; unset: where a desktop session exists (DISPLAY or WAYLAND_DISPLAY) and notify-send is installed."""
    webhooks: list[Webhook] = Field(default_factory=list)
    """Services to post each notice to: each a url (a spec's: `${VARIABLE}`) and its format."""
    command: list[str] | None = Field(default=None, min_length=1)
    """A program (argv, no shell) given each notice as JSON on its stdin."""
    reasons: list[Reason] | None = None
    """Only these reasons (default: all of them)."""
    rate_limit_after: float = Field(default=300.0, gt=0)
    """Seconds a rate limit must hold the fleet before it is a notification."""
    link: str | None = None
    """The address of your `orch watch --web` (no token: each page asks for its own), for notices to link to."""
    off: bool = False
    """Send nothing (`orch watch` still lists what needs you)."""

    @field_validator("link")
    @classmethod
    def _link(cls, value: str | None) -> str | None:
        if value is not None:
            check_url(value)
            if urlsplit(value).query:
                raise ValueError("a link has no query: a web view's token never goes in a notification")
        return value

    def wants(self, reason: Reason) -> bool:
        return not self.off and (self.reasons is None or reason in self.reasons)

    def detached(self) -> bool:
        """Something asked for that a process with no terminal of its own delivers (`orch up`'s notifier)."""
        return not self.off and bool(self.webhooks or self.command or self.desktop or self.terminal)


def spec_problems(config: NotifyConfig) -> list[str]:
    """What a spec's `notify:` may not hold: a webhook's URL itself (the run folder keeps the spec)."""
    return [
        f"webhooks.{i}.url: a spec is saved where its workers can read it: give ${{VARIABLE}} (or put the URL "
        "in your user config file)"
        for i, hook in enumerate(config.webhooks)
        if hook.variable is None
    ]


def config_path() -> Path:
    """The user's config file (it need not exist)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "orch" / "config.toml"


def load_user(path: Path | None = None) -> NotifyConfig | None:
    """The `[notify]` table of the user's config file; None when there is no file or no table."""
    path = path or config_path()
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})", hint="fix it, or point XDG_CONFIG_HOME elsewhere") from None
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid not in (os.geteuid(), 0):
        raise UsageError(f"{path}: others may write it, and its notify command runs as you", hint=f"chmod go-w {path}")
    try:
        table = tomllib.loads(text).get("notify")
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}", hint="fix the TOML") from None
    if table is None:
        return None
    try:
        return NotifyConfig.model_validate(table)
    except ValidationError as exc:
        raise UsageError(f"{path}: notify.{first_error(exc)}", hint="docs/notify.md lists the fields") from None


def parse_target(text: str) -> NotifyConfig:
    """One `--notify TARGET` as the config it asks for; UsageError naming the flag when it is not one."""
    word, _, rest = text.partition(":")
    if text in ("off", "terminal", "desktop"):
        return NotifyConfig(off=True) if text == "off" else NotifyConfig.model_validate({text: True})
    if word == "command":
        argv = shlex.split(rest)
        if not argv:
            raise UsageError("--notify command: needs a program", hint="--notify 'command:notify-me --urgent'")
        return NotifyConfig(command=argv)
    url, kind = (rest, word) if word in set(WebhookFormat) else (text, None)
    try:
        check_url(url)
    except ValueError:
        raise UsageError(f"--notify {text!r}: not a target", hint=f"give {TARGETS}") from None
    guessed = KNOWN_HOSTS.get(urlsplit(url).hostname or "", WebhookFormat.JSON)
    return NotifyConfig(webhooks=[Webhook(url=url, format=WebhookFormat(kind) if kind else guessed)])


def merge(user: NotifyConfig | None, spec: NotifyConfig | None, flags: list[str]) -> NotifyConfig:
    """The user's file, the spec's fields over it, then each flag's channel added."""
    merged = (user or NotifyConfig()).model_dump()
    if spec is not None:
        merged.update(spec.model_dump(include=spec.model_fields_set))
    for flag in flags:
        target = parse_target(flag)
        for name in target.model_fields_set:
            value = getattr(target, name)
            if name == "webhooks":
                merged["webhooks"] = [*merged["webhooks"], *(h.model_dump() for h in value)]
            else:
                merged[name] = value
    return NotifyConfig.model_validate(merged)
