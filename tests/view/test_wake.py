"""orch/view/wake.py: the view's wake-ups, and a wait under way ended by `stop` from another thread."""

from __future__ import annotations

import threading
from pathlib import Path

from orch.run.folder import RunFolder
from orch.view.wake import Wakeup


def test_a_change_wakes_it_and_a_stop_ends_a_wait_under_way_at_once(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "r")
    run.root.mkdir()
    wake = Wakeup(run)
    try:
        (run.root / "run.json").write_text("{}")
        assert wake.wait(3600)  # the change, not the timeout
        said: list[bool] = []
        waiting = threading.Thread(target=lambda: said.append(wake.wait(3600)))
        waiting.start()
        wake.stop()  # from this thread: the wait (an hour) ends now
        waiting.join(60)
        assert not waiting.is_alive() and said == [False]
        assert wake.stopped and not wake.wait(3600)  # and every later one at once
    finally:
        wake.close()
    wake.stop()  # after the close: nothing to wake, no error
