"""The scripted adapter: orch's own tiny TUI agent, for fast tests of the tmux and run-folder layers and (in an
offline run, talking to the scripted model through the gateway) of the controller end to end."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from orch.agents.base import AgentBase
from orch.agents.claude import FACTS as CLAUDE
from orch.contracts import AgentFacts, Check, LaunchSpec, WorkerContext
from orch.errors import OrchError
from orch.settings.internal import STATE_FILE

FACTS = AgentFacts(
    name="scripted",
    title="orch's scripted agent",
    permission_modes=("default",),
    default_permission_mode="default",
    # It calls no model and keeps no session; it is part of orch, so the image has it already. It stands in
    # for Claude Code in the fast and container tests, so a credential takes Claude Code's path (the
    # environment, the read-only login-file mount, the model API on the egress allowlist, the offline
    # variables).
    credentials=CLAUDE.credentials,
    shell=CLAUDE.shell,  # its hooks log each command as a Bash call
)
TUI_ARGV = (sys.executable, "-P", "-m", "orch.agents.scripted.tui")
"""`-P`: its cwd (a reviewer's checkout of another worker's change) is not first on the module path, where an `orch/`
planted in it would be run in place of orch's own, as the reviewer."""
BOOT_HOLD = "boot-hold"
"""A test knob: while a file of this name is in a worker's config dir, its scripted agent's start waits before its
SessionStart (a slow boot the test ends)."""


class ScriptedAdapter(AgentBase):
    FACTS = FACTS

    def binary(self) -> Path:
        return Path(sys.executable)

    def version(self) -> str | None:
        from orch import __version__

        return __version__

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        ctx.config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv = [*TUI_ARGV, "--hold", str(ctx.config_dir / BOOT_HOLD)]
        gateway = self.facts.gateway
        if gateway is not None and _model_run(ctx):  # its prompts go to the scripted model, through the run's gateway
            argv += ["--model", gateway.base_url_env, gateway.key_env]
        if ctx.prompt:
            argv.append(ctx.prompt)
        env = {STATE_FILE.name: str(ctx.run.state(ctx.worker)), **self.worker_env(ctx)}
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def doctor(self) -> Sequence[Check]:
        return ()  # nothing to check: it runs with orch's own interpreter


def _model_run(ctx: WorkerContext) -> bool:
    """An offline (or replayed) run: the worker's gateway answers from orch's scripted model (or a recording),
    so the agent talks to it. Otherwise it runs the `$ ` lines of its prompts (the fleet-layer tests)."""
    if CLAUDE.credentials.base_url_env not in ctx.env:
        return False
    try:
        info = ctx.run.info()
    except (OrchError, OSError):  # no run.json (a bare context), or one this uid cannot read
        return False
    return info.offline or info.replay is not None
