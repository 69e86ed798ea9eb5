"""The notifier: follows one run folder and tells a person, within a second, when the run needs them.

It reads what the run already writes, never the controller's memory: the workers' hook logs and
events.jsonl (inotify on the folder and state/, a backstop for the rate limit's deadline). So it works the
same beside a controller in this process, beside one in the run's container (the folder is bind-mounted
here), and for a fleet started with `orch up` (no controller: `orch notify follow`, a detached process).
Each moment is decided by orch.notify.decide, held back by orch.notify.throttle, and delivered by
orch.notify.send off this thread; what was delivered, and what failed after its retries, goes into
events.jsonl. Moments older than `since` (a resumed run's past) are decided, never sent.

`orch notify mute RUN` (a file in the run folder) silences a run: nothing is sent while it exists.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Mapping
from typing import Any

from orch.notify.config import NotifyConfig
from orch.notify.decide import Decider
from orch.notify.notice import Notice
from orch.notify.send import Channel, Delivery, Sender
from orch.notify.throttle import Throttle
from orch.run.events import Event
from orch.run.files import JsonlTail, atomic_write
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, HookEvent
from orch.waits import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, Inotify

BACKSTOP = 5.0  # seconds between looks when nothing wakes it (a hook log inotify missed)
ENDS = (Event.FINISHED, Event.KILLED)
SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "WEBHOOK")


def known_secrets(env: Mapping[str, str], config: NotifyConfig) -> list[str]:
    """Exact values no notice may carry: this process's credential-like variables and the webhooks' URLs
    (and their path parts: a Slack URL's secret is in its path)."""
    found = [v for k, v in env.items() if any(word in k.upper() for word in SECRET_NAMES) and len(v) >= 8]
    for hook in config.webhooks:
        url = env.get(hook.variable, "") if hook.variable else hook.url
        found += [url, *(part for part in url.split("/") if len(part) >= 8)]
    return found


def muted(run: RunFolder) -> bool:
    return run.notify_muted.exists()


def mute(run: RunFolder, on: bool) -> None:
    if on:
        atomic_write(run.notify_muted, f"muted at {time.time():.0f}\n")
    else:
        run.notify_muted.unlink(missing_ok=True)


class Notifier:
    """One run's notifier: `start` follows it on a thread of its own (or `follow` on the caller's);
    `close` takes a last look, so the run's end is sent, and waits for the deliveries."""

    def __init__(
        self,
        run: RunFolder,
        config: NotifyConfig,
        channels: list[Channel],
        since: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        info = run.info()
        self.run, self.config = run, config
        self.since = time.time() if since is None else since
        agents = {n: info.agent_of(n) for n in range(1, info.workers + 1)}
        secrets = known_secrets(os.environ if env is None else env, config)
        controlled = run.fleet_spec.exists()
        self.decider = Decider(run, agents, controlled, config.rate_limit_after, config.link, secrets)
        self.throttle = Throttle()
        self.sender = Sender(channels, self._record)
        self.ended = False
        """The run's end (or its kill) was seen."""
        self._events = JsonlTail(run.events, ControllerEvent)
        self._hooks = {n: JsonlTail(run.state(n), HookEvent) for n in agents}
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._root = run.root.stat().st_ino
        self._inotify: Inotify | None = None
        with contextlib.suppress(OSError):
            self._inotify = Inotify()
            for folder in (run.root, run.state_dir):
                self._inotify.add_watch(folder, IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)

    def __enter__(self) -> Notifier:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Notifier:
        self._thread = threading.Thread(target=self.follow, name="orch-notify", daemon=True)
        self._thread.start()
        return self

    def follow(self, until_ended: bool = False) -> None:
        """Look, then wait for a change (or the rate limit's deadline), until closed (or, `until_ended`,
        the run ended or its folder went)."""
        while not self._stop.is_set():
            with contextlib.suppress(OSError):  # the folder going away meanwhile: `_replaced` says so
                self.look()
            if until_ended and (self.ended or self._replaced()):
                return
            due = self.decider.next_due()
            timeout = BACKSTOP if due is None else min(BACKSTOP, max(0.0, due - time.time()))
            fds = [self._wake_r] + ([self._inotify.fd] if self._inotify is not None else [])
            with contextlib.suppress(InterruptedError):
                select.select(fds, [], [], timeout)
            if self._inotify is not None:
                self._inotify.wait(0)  # drain what is queued

    def _replaced(self) -> bool:
        """The run folder is gone, or another run's of the same name (`orch up --replace`)."""
        try:
            return self.run.root.stat().st_ino != self._root or not self.run.run_json.exists()
        except OSError:
            return True

    def stop(self) -> None:
        """Make `follow` return (from any thread, or a signal handler)."""
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def look(self) -> list[Notice]:
        """Read what was appended since the last look, decide, and send what is fresh; the notices sent."""
        with self._lock:
            new: list[tuple[float, int, Any]] = [(e.ts.timestamp(), 0, e) for e in self._new("events", self._events)]
            for n, tail in self._hooks.items():
                new += [(e.ts, n, e) for e in self._new(f"w{n}", tail)]
            made = []
            for _, n, record in sorted(new, key=lambda item: item[0]):
                if isinstance(record, ControllerEvent):
                    self.ended = self.ended or record.event in ENDS
                    made.append(self.decider.controller(record))
                else:
                    made.append(self.decider.hook(n, record))
            made.append(self.decider.due(time.time()))
            return [n for n in made if n is not None and self._send(n)]

    def _new(self, name: str, tail: JsonlTail[Any]) -> list[Any]:
        records = tail.records()
        seen = self._seen.get(name, 0)
        if seen > len(records):  # the file was replaced: read again from its start
            seen = 0
        self._seen[name] = len(records)
        return list(records[seen:])

    def _send(self, notice: Notice) -> bool:
        if notice.ts < self.since or not self.config.wants(notice.reason) or muted(self.run):
            return False
        admitted = self.throttle.admit(notice, time.time())
        if admitted is None:
            return False
        self.sender.send(admitted)
        return True

    def _record(self, done: Delivery) -> None:
        """What was delivered and what failed, in events.jsonl (channel labels only: never a URL)."""
        n, reason = done.notice.worker, done.notice.reason.value
        with contextlib.suppress(OSError):  # the run folder went away meanwhile
            for label, error in done.failed:
                failed = {"reason": reason, "channel": label, "error": error}
                self.run.log_event(ControllerEvent(event=Event.NOTIFY_FAILED, worker=n, data=failed))
            if done.delivered:
                sent = {"reason": reason, "channels": done.delivered, "late": round(done.late, 3)}
                self.run.log_event(ControllerEvent(event=Event.NOTIFIED, worker=n, data=sent))

    def close(self, timeout: float = 30.0) -> None:
        """Stop following, take a last look (what happened just before is sent), wait for the deliveries."""
        self.stop()
        if self._thread is not None:
            self._thread.join(BACKSTOP)
        with contextlib.suppress(OSError):
            self.look()
        self.sender.close(timeout)
        if self._inotify is not None:
            self._inotify.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
