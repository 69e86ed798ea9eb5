"""orch.fleet.booting's fallback for screens, on a real tmux pane: a screen the agent shows at every start as
designed (`every_start`, Codex's "Folder access" in a folder orch keeps untrusted) is answered from a boot's start
and logged as such; any other dialog only once a worker is late to boot (seeding should have prevented it)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from orch.agents.registry import get_adapter
from orch.contracts import LaunchSpec
from orch.fleet.booting import answer_dialogs
from orch.fleet.launch import server_for
from orch.fleet.tmux import TmuxServer
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.waits import wait_until
from tests.helpers import orch

CODEX = get_adapter("codex")  # its facts only: no binary is started


def _show(server: TmuxServer, pane_id: str, screen: str) -> None:
    """The pane shows `screen` and waits for a key; the line it got is printed after it."""
    script = f"printf '%s\\n' {shlex.quote(screen)}; read got; echo \"got:$got\"; exec sleep 600"
    server.respawn(pane_id, LaunchSpec(argv=["sh", "-c", script]))
    wait_until(lambda: screen.splitlines()[-1] in server.capture(pane_id), 10, "the screen to show")


def _answered(run: RunFolder) -> list[tuple[str, str]]:
    lines = [json.loads(line) for line in run.events.read_text().splitlines()]
    return [(e["event"], e["data"]["dialog"]) for e in lines if "dialog" in e.get("data", {})]


def test_a_start_screen_is_answered_from_the_start_and_a_dialog_only_when_late(workdir: Path) -> None:
    assert orch("up", "bt", "-n", "1", "--agent", "scripted", "--workdir", workdir, "--local").exit_code == 0
    run = RunFolder.for_name("bt")
    try:
        server = server_for(run.info())
        pane = server.pane(1)
        _show(server, pane.pane_id, "Hooks need review")
        assert not answer_dialogs(run, CODEX, server, 1, pane, late=False)  # not late: seeding's job still
        assert answer_dialogs(run, CODEX, server, 1, pane, late=True)
        _show(server, pane.pane_id, "Folder access\n› 1. Open restricted\n  2. Back")
        assert answer_dialogs(run, CODEX, server, 1, pane, late=False)
        wait_until(lambda: "got:" in server.capture(pane.pane_id), 10, "the key to reach the pane")
        assert _answered(run) == [
            (Event.DIALOG_ANSWERED, "hooks-review"),
            (Event.START_SCREEN_ANSWERED, "folder-access"),
        ]
    finally:
        orch("kill", "bt")
