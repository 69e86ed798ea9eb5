"""The Gemini CLI adapter: an isolated `GEMINI_CLI_HOME` per worker, seeded so no first-run dialog appears.

What the pinned Gemini CLI does, and why each seed is there: docs/agents/gemini.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import tomli_w

from orch.agents.base import AgentBase, HookDialect, write_config
from orch.agents.credentials import gateway_env, gemini_key
from orch.contracts import (
    AgentFacts,
    Dialog,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.versions import GEMINI_CLI_PACKAGE, GEMINI_CLI_VERSION

QUIET_ENV = {
    "GEMINI_CLI_NO_RELAUNCH": "1",
    "GOOGLE_GENAI_USE_GCA": "false",
    "GOOGLE_GENAI_USE_VERTEXAI": "false",
    "GEMINI_CLI_TRUST_WORKSPACE": "false",
}
"""Variables every Gemini CLI process of orch gets: one process (no relaunch as a child with a bigger heap, so
a kill reaches the agent), the API-key path even if the user's shell asks for another, and every folder untrusted
(no dialog): a folder's .gemini/ settings, hooks, MCP servers, agents and GEMINI.md never load. Untrusted, Gemini
CLI runs no hook of the settings files at all, so orch's hooks come as an extension (EXTENSION), whose hooks run."""
EXTENSION = "orch"
"""The extension in the worker's GEMINI_CLI_HOME that carries orch's hooks (`hooks/hooks.json`)."""
# Its hook events under the names orch's worker states are derived from (Claude Code's). Its hooks cannot
# approve a call: under an allow policy the hook writer presses Enter on its dialog ("1. Allow once" selected).
HOOK_DIALECT = HookDialect(
    events={
        "SessionStart": "SessionStart",
        "BeforeAgent": "UserPromptSubmit",
        "AfterAgent": "Stop",
        "BeforeTool": "PreToolUse",
        "AfterTool": "PostToolUse",
        "Notification": "Notification",
        "SessionEnd": "SessionEnd",
    },
    notifications={"ToolPermission": "permission_prompt"},
    permission_notice="ToolPermission",
    gate="BeforeTool",
    dialog="Allow once",
)
HOOK_EVENTS = tuple(HOOK_DIALECT.events)
FACTS = AgentFacts(
    name="gemini",
    title="Gemini CLI",
    # Gemini CLI's own --approval-mode values, passed as they are.
    permission_modes=("default", "auto_edit", "yolo", "plan"),
    default_permission_mode="default",
    credentials=gemini_key(
        hint="export GEMINI_API_KEY=... (a Gemini API key from Google AI Studio; "
        "Gemini CLI's own Google sign-in cannot go through the gateway)"
    ),
    shell=ShellTool("run_shell_command", "command"),
    # Chats live in <GEMINI_CLI_HOME>/.gemini/tmp/<project>/chats/session-<time>-<id[:8]>.jsonl; --resume reads them.
    sessions=SessionStore(subdir=".gemini/tmp"),
    install=ImageInstall(
        package=GEMINI_CLI_PACKAGE, version=GEMINI_CLI_VERSION, build_arg="GEMINI_CLI", node=True, size_mb=100
    ),
    limits=(
        "hooks cannot approve a tool call: under `approve` orch presses Allow on its dialog",
        "a resumed session's first prompt is answered without the old history",
        "no hook reports an API failure: a rate-limited turn reads as idle, then nudged",
    ),
    # Fallback only: seeding GEMINI_CLI_HOME prevents it. No trust dialog: orch trusts no folder (QUIET_ENV), and
    # an untrusted one adds --include-directories without asking.
    dialogs=(Dialog("auth", r"How would you like to authenticate", ("Down", "Enter")),),
    # A resumed session loads its old chat with no input box drawn ("Resuming session..." in its place), and
    # under load that outlasts the turn of its command-line prompt: text pasted after that turn's AfterAgent
    # is dropped. Nothing else (no hook, no file) tells when the loading ends.
    deaf_screens=(r"^\s*\S\s+Resuming session\.\.\.\s*$",),
    # Its input box's placeholder, shown only while nothing is typed.
    empty_draft=r"^\s*>\s+Type your message or @path/to/file\s*$",
    # In a terminal it does not trust with pastes (isTerminalPasteTrusted: the kitty keyboard protocol, which
    # tmux lacks) an Enter within 40 ms of a paste inserts a new line: its 40 ms timer, then the React render
    # that clears it, which a loaded machine delays. An Enter sent as soon as the paste showed was lost that
    # way, and re-sent only after the 2 s acknowledgement wait: 2.2 s of each brief (bench `agents`). The window is
    # waited out from the paste showing (its 40 ms timer, started before that render); an Enter it still takes as
    # a new line shows in its draft, and is pressed again at once (orch/fleet/talk.py): 0.05 s, not 0.15, cost
    # a second Enter in 1 brief of 8 (0.15 s: 2 of 8) and 0.12 s less in the median (2026-12-06, load 13-15,
    # interleaved).
    paste_window=0.05,
    cache="gemini-cli",
    version_env=QUIET_ENV,
    new_session_args=("--session-id",),
    # Settings (hooks, MCP servers), extensions, agents, commands, policies, instructions.
    project_files=("**/.gemini/**", "GEMINI.md"),
    # Its hook writer's approver reads the dialog and presses Allow: in a local sandbox through the relay.
    own_pane=True,
)
GATEWAY = gateway_env(FACTS.credentials)

# Gemini CLI's policy engine (user tier): the tools a worker needs run without a prompt, shell redirection
# included (it would otherwise downgrade an allowed command to a prompt); the destructive few are refused.
# Anything else (web_fetch, google_web_search, MCP tools, ...) asks, and the run's policy answers.
ALLOWED_TOOLS = (
    "run_shell_command",
    "write_file",
    "replace",
    "read_file",
    "read_many_files",
    "list_directory",
    "glob",
    "grep_search",
    "write_todos",
    "update_topic",
)
DENIED_COMMANDS = ("rm -rf", "sudo", "git push")
POLICY = "# Written by orch for this worker: what runs without a prompt, and what is refused.\n" + tomli_w.dumps(
    {
        "rule": [
            {"toolName": list(ALLOWED_TOOLS), "decision": "allow", "priority": 500, "allowRedirection": True},
            {
                "toolName": "run_shell_command",
                "commandPrefix": list(DENIED_COMMANDS),
                "decision": "deny",
                "priority": 900,
                "denyMessage": "orch: this command is refused for fleet workers",
            },
        ]
    }
)
# The user settings of each worker. (Not also the system tier: Gemini CLI skips a system settings file whose
# parent folder is writable by others, with a warning on screen, as under /tmp.)
SETTINGS: dict[str, Any] = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    # The auth chooser appears on every start without it; the API-key path honours GOOGLE_GEMINI_BASE_URL.
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    # No "Executing Hook: ..." line on screen for each of orch's hooks.
    "hooksConfig": {"notifications": False},
}


def gemini_dir(config_dir: Path) -> Path:
    return config_dir / ".gemini"


def has_conversation(config_dir: Path, session: str) -> bool:
    """True if Gemini CLI kept a chat for `session` with a user message in it: `--resume` of anything else
    fails ("Error resuming session") and the worker would exit instead of restarting."""
    for path in gemini_dir(config_dir).glob(f"tmp/*/chats/session-*-{session[:8]}.jsonl"):
        with path.open(errors="replace") as fh:
            lines = fh.read().splitlines()
        if lines and session in lines[0] and any('"type":"user"' in line for line in lines[1:]):
            return True
    return False


class GeminiAdapter(AgentBase):
    FACTS = FACTS

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        cfg = ctx.config_dir
        home = gemini_dir(cfg)
        (home / "policies").mkdir(parents=True, exist_ok=True, mode=0o700)
        cfg.chmod(0o700)
        # No folder is trusted (QUIET_ENV); a file of its own all the same, so a user's variable cannot point elsewhere.
        trusted = home / "trustedFolders.json"
        write_config(trusted, {})
        write_config(home / "settings.json", SETTINGS)
        extension = home / "extensions" / EXTENSION
        (extension / "hooks").mkdir(parents=True, exist_ok=True, mode=0o700)
        write_config(extension / "gemini-extension.json", {"name": EXTENSION, "version": "1.0.0"})
        write_config(extension / "hooks" / "hooks.json", {"hooks": self._hooks(ctx)})
        (home / "policies" / "orch.toml").write_text(POLICY)

        argv = [str(self.binary()), "--approval-mode", ctx.permission_mode]
        argv += ["--include-directories", str(ctx.run.root)]
        if ctx.model:
            argv += ["--model", ctx.model]
        resume = ctx.resume_session if ctx.resume_session and has_conversation(cfg, ctx.resume_session) else None
        argv += self.session_argv(resume)
        if ctx.prompt:
            argv += ["--prompt-interactive", ctx.prompt]
        env = {
            **QUIET_ENV,
            "GEMINI_CLI_HOME": str(cfg),
            "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(trusted),
            **self.worker_env(ctx),
        }
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    # ready_marker: None, SessionStart fires once the TUI is up; a lost Enter is re-sent by orch.fleet.talk

    @staticmethod
    def _hooks(ctx: WorkerContext) -> dict[str, Any]:
        state_file = ctx.run.state(ctx.worker)
        pane = str(ctx.pane_socket) if ctx.pane_socket is not None else ""
        dialect = dataclasses.replace(HOOK_DIALECT, pane_socket=pane)  # the approver's way to its own pane

        def hook(*args: str | Path) -> list[dict[str, Any]]:
            command = {"type": "command", "command": dialect.command(state_file, *args)}
            return [{"matcher": "", "hooks": [command]}]

        hooks = {event: hook() for event in HOOK_EVENTS}
        # This one may deny the call itself, from the run's policy (orch run's `permissions`).
        hooks["BeforeTool"] = hook(ctx.run.permission_policy, ",".join(ALLOWED_TOOLS))
        # And this one approves it, by pressing Allow on the dialog (Gemini CLI's hooks cannot approve).
        hooks["Notification"] = hook(ctx.run.permission_policy, ",".join(ALLOWED_TOOLS))
        return hooks
