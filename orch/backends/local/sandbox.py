"""The local sandbox: a run whose tmux server is on this machine (the host, or inside the run's container).

It is the fleet functions of orch.fleet behind the Sandbox contract (orch.contracts): a command
"forwarded" to it runs in this process.

orch.fleet.launch and orch.fleet.control (the run's gateway, its processes, psutil: 25-30 ms of CPU) are imported
by the methods that use them: `orch brief` and `orch send`, a lead's every step, only forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from orch.backends import registry
from orch.backends.base import in_container
from orch.backends.local.backend import LocalSettings
from orch.contracts import OrchCommand, UpRequest
from orch.errors import OrchError, UsageError
from orch.fleet.booting import BOOT_TIMEOUT
from orch.fleet.tmux import TmuxServer
from orch.run.folder import RunFolder
from orch.run.records import Isolation, LocalRunInfo, RunInfo, RunStatus
from orch.run.statusview import RunStatusView


class LocalSandbox:
    """`Sandbox` of the fleets whose tmux server this process can reach."""

    def __init__(self, settings: LocalSettings | None = None) -> None:
        self.settings = settings or LocalSettings()
        timeout = self.settings.boot_timeout
        self.boot_timeout = BOOT_TIMEOUT if timeout is None else timeout

    def check(self, request: UpRequest) -> None:
        from orch.fleet import launch

        info = self._planned(request)
        launch.check(request, info, registry.confinement_of(info))

    def up(self, request: UpRequest) -> RunInfo:
        from orch.fleet import launch

        info = self._planned(request)
        return launch.up(request, info, registry.confinement_of(info), self.boot_timeout)

    def _planned(self, request: UpRequest) -> LocalRunInfo:
        """The run `request` asks for, with this sandbox's settings; UsageError for what cannot be had."""
        allow = self.settings.egress_allow
        if allow is not None and (request.isolation is not Isolation.STRICT or in_container()):
            raise UsageError(  # a shared worker reaches what this machine does: an allowlist would promise nothing
                "--egress allowlist applies to a strict local run (each worker in its sandbox, its network the "
                "relay's proxy)",
                hint="drop --egress/--allow, or run with --isolation strict",
            )
        from orch.fleet import launch

        _, info = launch.plan(request)
        info.egress_allow = allow
        return info

    def resume(self, name: str) -> RunInfo:
        from orch.fleet import launch

        run = RunFolder.for_name(name)
        info = run.info()
        if TmuxServer(info.tmux_socket).alive():
            raise UsageError(f"run {name!r} is still running", hint=f"orch kill {name} first to restart it")
        info.status = RunStatus.STARTING
        run.write_info(info)
        launch.launch(run, info, registry.confinement_of(info), {}, self.boot_timeout, resume=True)
        return run.info()

    def forward(self, info: RunInfo, command: OrchCommand) -> int:
        return command.run_here()

    def status(self, run: RunFolder) -> RunStatusView:
        from orch.fleet import control

        return control.status(run)

    def alive(self, info: RunInfo) -> bool:
        return TmuxServer(info.tmux_socket).alive()

    def state(self, info: RunInfo) -> str:
        return "-"

    def pull(self, info: RunInfo) -> bool:
        return False  # the fleet writes this very folder

    def push(self, info: RunInfo, files: list[Path]) -> None:
        return None  # the fleet reads this very folder

    def screens(self, info: RunInfo, workers: Sequence[int], lines: int) -> dict[int, str] | None:
        server = TmuxServer(info.tmux_socket)
        panes = server.panes_if_running() or {}
        out = {}
        for n in workers:
            pane = panes.get(n)
            if pane is None or pane.dead:
                continue
            with contextlib.suppress(OrchError):  # the pane went away between the listing and the capture
                out[n] = server.capture(pane.pane_id, lines)
        return out

    def kill(self, info: RunInfo) -> None:
        from orch.fleet import control

        control.kill(RunFolder.for_name(info.name), registry.confinement_of(info))
