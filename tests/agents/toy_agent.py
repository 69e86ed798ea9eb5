"""A toy seventh agent, the whole of what adding an agent that speaks a known model API takes in code: its
facts, and its launch. tests/agents/test_contract.py registers it and runs it through the shared suite."""

from __future__ import annotations

import json

from orch.agents.base import AgentBase, hook_command, write_config
from orch.agents.credentials import openai_key
from orch.contracts import AgentFacts, Dialog, ImageInstall, LaunchSpec, SessionStore, ShellTool, WorkerContext

FACTS = AgentFacts(
    name="toy",
    title="Toy agent",
    permission_modes=("ask", "build"),
    default_permission_mode="build",
    credentials=openai_key("openai-chat", base_url_env="TOY_BASE_URL"),
    shell=ShellTool("shell", "command"),
    sessions=SessionStore(subdir="sessions"),
    install=ImageInstall(package="toy-agent", version="1.2.3", build_arg="TOY"),
    limits=("a toy: it only says hello",),
    dialogs=(Dialog("trust", r"Trust this folder\?", ("Enter",)),),
    command="sh",  # any shell stands in for its binary
)


class ToyAdapter(AgentBase):
    FACTS = FACTS

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        ctx.config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        hooks = {"SessionStart": hook_command("event", ctx.run.state(ctx.worker))}
        write_config(ctx.config_dir / "hooks.json", {"hooks": hooks, "mode": ctx.permission_mode})
        argv = [str(self.binary()), "-c", f"echo {json.dumps(ctx.prompt or 'hello')}", *self.session_argv(None)]
        return LaunchSpec(argv=argv, env={"TOY_HOME": str(ctx.config_dir), **self.worker_env(ctx)}, cwd=ctx.workdir)
