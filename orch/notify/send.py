"""Delivering notices, off the caller's thread: one thread runs an asyncio loop, each notice's channels
are delivered side by side, so a slow webhook delays neither the controller nor the other channels.

A webhook that fails (a connection error, a timeout, a 5xx, 408 or 429) is tried again with exponential
backoff (tenacity), ATTEMPTS times in all; then, as for any channel that fails, the caller's `done`
records it (events.jsonl's notify-failed, orch.notify.follow). Nothing a channel is given runs through a
shell: the command hook gets the notice as JSON on stdin, notify-send its argv.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from orch.notify import bodies
from orch.notify.config import NotifyConfig, Webhook, WebhookFormat
from orch.notify.notice import Notice

if TYPE_CHECKING:  # aiohttp is imported only when a webhook is sent: a terminal-only notifier never pays for it
    import aiohttp

ATTEMPTS = 4
WEBHOOK_TIMEOUT = 10.0  # seconds per attempt
COMMAND_TIMEOUT = 30.0
DESKTOP_TIMEOUT = 5.0
RETRIED_STATUS = (408, 429)


class ChannelError(Exception):
    """A channel could not deliver; `retry`: worth another attempt (a webhook's transient failure)."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


class Channel:
    """One way of reaching a person. `label` is what events.jsonl may say of it: never a secret."""

    label = "channel"

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        raise NotImplementedError


class Terminal(Channel):
    """Bell and OSC 9/777 written through `write` (a terminal's stream, under its owner's lock)."""

    label = "terminal"

    def __init__(self, write: Callable[[str], None], tmux: bool) -> None:
        self.write, self.tmux = write, tmux

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        try:
            self.write(bodies.terminal(notice, self.tmux))
        except (OSError, ValueError) as exc:  # a closed stream
            raise ChannelError(f"terminal: {exc}") from None


class Ttys(Channel):
    """The same sequences written to each terminal `ttys()` names (a run's attached tmux clients), never
    blocking: a terminal that does not take them at once is skipped."""

    label = "tmux clients"

    def __init__(self, ttys: Callable[[], list[str]]) -> None:
        self.ttys = ttys

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        data = bodies.terminal(notice, tmux=False).encode()
        for tty in await asyncio.to_thread(self.ttys):
            with contextlib.suppress(OSError):
                fd = os.open(tty, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)


class Desktop(Channel):
    label = "desktop"

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        await run_program(bodies.desktop_argv(notice), b"", DESKTOP_TIMEOUT)


class Command(Channel):
    """The user's program, the notice as JSON on its stdin."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.label = f"command {os.path.basename(argv[0])}"

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        await run_program(self.argv, json.dumps(bodies.as_json(notice)).encode(), COMMAND_TIMEOUT)


async def run_program(argv: list[str], stdin: bytes, timeout: float) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        raise ChannelError(f"{argv[0]}: {exc.strerror or exc}") from None
    try:
        _, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise ChannelError(f"{os.path.basename(argv[0])} did not finish within {timeout:g}s") from None
    if proc.returncode != 0:
        said = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise ChannelError(f"{os.path.basename(argv[0])} exited {proc.returncode}: {said[0][:200]}")


class Post(Channel):
    """A webhook: POSTed with the body of its format, retried on a transient failure."""

    def __init__(self, hook: Webhook, url: str) -> None:
        self.hook, self.url = hook, url
        self.label = hook.label()

    def request(self, notice: Notice) -> tuple[dict[str, str], bytes]:
        fmt = self.hook.format
        if fmt is WebhookFormat.NTFY:
            return bodies.ntfy(notice)
        body = {WebhookFormat.SLACK: bodies.slack, WebhookFormat.DISCORD: bodies.discord}.get(fmt)
        data = json.dumps(body(notice)).encode() if body is not None else bodies.webhook_json(notice)
        return {"Content-Type": "application/json"}, data

    async def deliver(self, notice: Notice, sender: Sender) -> None:
        headers, data = self.request(notice)
        session = await sender.session()
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(multiplier=sender.backoff, max=8),
            retry=retry_if_exception(lambda e: isinstance(e, ChannelError) and e.retry),
            reraise=True,
        ):
            with attempt:
                await self._post(session, headers, data)

    async def _post(self, session: aiohttp.ClientSession, headers: dict[str, str], data: bytes) -> None:
        import aiohttp

        try:
            async with session.post(self.url, data=data, headers=headers, allow_redirects=False) as response:
                if response.status >= 300:
                    retry = response.status >= 500 or response.status in RETRIED_STATUS
                    raise ChannelError(f"{self.label}: HTTP {response.status}", retry=retry)
        except (aiohttp.ClientError, TimeoutError) as exc:  # never the URL: it is a secret
            raise ChannelError(f"{self.label}: {type(exc).__name__}", retry=True) from None


@dataclass(frozen=True)
class Delivery:
    notice: Notice
    delivered: list[str]
    failed: list[tuple[str, str]]
    """(channel label, error) of each channel that gave up."""
    late: float
    """Seconds from the notice's moment to the last channel's end."""


class Sender:
    """A thread with an event loop: `send` returns at once; `close` waits (bounded) for what is in flight."""

    def __init__(self, channels: list[Channel], done: Callable[[Delivery], None], backoff: float = 0.5) -> None:
        self.channels, self.done, self.backoff = channels, done, backoff
        self._loop = asyncio.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._pending = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orch-notify-send", daemon=True)
        self._thread.start()
        if any(isinstance(c, Post) for c in channels):  # aiohttp imported now, not on the first notice's path
            asyncio.run_coroutine_threadsafe(self.session(), self._loop)

    def send(self, notice: Notice) -> None:
        if not self.channels:
            return
        with self._idle:
            self._pending += 1
        asyncio.run_coroutine_threadsafe(self._deliver(notice), self._loop)

    async def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT))
        return self._session

    async def _deliver(self, notice: Notice) -> None:
        try:
            results = await asyncio.gather(*(c.deliver(notice, self) for c in self.channels), return_exceptions=True)
            failed = [(c.label, _said(r)) for c, r in zip(self.channels, results, strict=True) if r is not None]
            delivered = [c.label for c, r in zip(self.channels, results, strict=True) if r is None]
            self.done(Delivery(notice, delivered, failed, time.time() - notice.ts))
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def close(self, timeout: float = 30.0) -> bool:
        """Wait until every notice sent so far is delivered or given up (at most `timeout` seconds), then
        stop. False when some were still in flight."""
        with self._idle:
            settled = self._idle.wait_for(lambda: self._pending == 0, timeout)
        if self._session is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._session.close(), self._loop).result(2.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)
        if not self._thread.is_alive():
            self._loop.close()
        return settled


def _said(result: BaseException | None) -> str:
    if isinstance(result, ChannelError):
        return str(result)
    return f"{type(result).__name__}: {result}"


def desktop_session(env: Mapping[str, str]) -> bool:
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")) and shutil.which("notify-send") is not None


def channels(
    config: NotifyConfig,
    env: Mapping[str, str],
    write: Callable[[str], None] | None = None,
    ttys: Callable[[], list[str]] | None = None,
) -> list[Channel]:
    """The channels `config` asks for that this process can deliver: its terminal (`write`, when it has
    one), the run's attached tmux clients (`ttys`, when asked), the desktop, webhooks (UsageError: a variable
    unset), the command."""
    if config.off:
        return []
    found: list[Channel] = []
    if config.terminal is not False and write is not None:
        found.append(Terminal(write, tmux=bool(env.get("TMUX"))))
    if config.terminal and ttys is not None:
        found.append(Ttys(ttys))
    if config.desktop or (config.desktop is None and desktop_session(env)):
        found.append(Desktop())
    found += [Post(hook, hook.resolve(env)) for hook in config.webhooks]
    if config.command:
        found.append(Command(config.command))
    return found
