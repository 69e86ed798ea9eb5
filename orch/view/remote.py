"""A run on a remote engine: its folder here is a copy, so the view keeps the copy fresh (`orch pull`)."""

from __future__ import annotations

import logging
import threading

from orch.backends.registry import folder_is_here, sandbox_for
from orch.errors import OrchError, is_environment_error
from orch.run.records import RunInfo

log = logging.getLogger(__name__)

PULL_EVERY = 5.0  # seconds between copies of a remote run folder while it is watched


def pull_once(info: RunInfo) -> None:
    """Copy a remote run's folder back here (nothing for a folder that is the fleet's own)."""
    if not folder_is_here(info):
        sandbox_for(info).pull(info)


class Puller:
    """Pulls a remote run's folder every PULL_EVERY seconds from a thread, until closed; the view's inotify
    watch then sees the copied files change. A failed pull is logged and tried again (the engine may be
    slow, or the run just stopped); a run whose folder is here needs none and starts no thread."""

    def __init__(self, info: RunInfo) -> None:
        self.info = info
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not folder_is_here(info):
            self._thread = threading.Thread(target=self._loop, name="orch-watch-pull", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(PULL_EVERY):
            try:
                sandbox_for(self.info).pull(self.info)
            except Exception as exc:
                if not (isinstance(exc, OrchError) or is_environment_error(exc)):
                    raise
                log.info("pulling run %s failed: %s", self.info.name, exc)

    def close(self) -> None:
        self._stop.set()
