"""The Claude Code adapter: isolated config dir per worker, seeded so no first-run dialog appears."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orch.agents.base import AgentBase, hook_command, write_config
from orch.agents.credentials import anthropic_key, gateway_env
from orch.contracts import (
    AgentFacts,
    Dialog,
    ImageInstall,
    LaunchSpec,
    LoginFile,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.run.folder import RunFolder
from orch.versions import CLAUDE_CODE_PACKAGE, CLAUDE_CODE_VERSION

HOOK_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PermissionRequest",
    "Notification",
    "Stop",
    "StopFailure",
    "SessionEnd",
)
COMMAND_HOOKS = ("SessionStart", "SessionEnd")
"""Hooks that stay commands under `http_hooks`: once a session each, and the pinned Claude Code never sends
SessionStart over HTTP (seen: its http hook configured, no request came); SessionEnd may come as the relay
stops with the fleet."""
CREDENTIALS = dataclasses.replace(
    anthropic_key(
        "export ANTHROPIC_API_KEY=... or CLAUDE_CODE_OAUTH_TOKEN=... (from `claude setup-token`), "
        "or log in with `claude` (/login)"
    ),
    login=LoginFile(dir_env="CLAUDE_CONFIG_DIR", home_dir=".claude", name=".credentials.json"),
)
SHELL = ShellTool("Bash", "command")
"""Claude Code's shell tool (the scripted agent logs its commands under the same name)."""
FACTS = AgentFacts(
    name="claude",
    title="Claude Code",
    permission_modes=("default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions"),
    default_permission_mode="acceptEdits",
    credentials=CREDENTIALS,
    shell=SHELL,
    # Transcripts live in <config dir>/projects/<mangled cwd>/<session>.jsonl; `--resume` reads them.
    sessions=SessionStore(subdir="projects"),
    install=ImageInstall(
        package=CLAUDE_CODE_PACKAGE, version=CLAUDE_CODE_VERSION, build_arg="CLAUDE_CODE", size_mb=385
    ),
    # Fallback only: seeding the config dir prevents these. In the pinned version the "No / exit" option is
    # selected by default, so a blind Enter would make the worker exit.
    dialogs=(
        Dialog("trust", r"Is this a (project|directory) you created or one you trust", ("Down", "Enter")),
        Dialog("api-key", r"Detected a custom API key in your environment", ("Up", "Enter")),
        Dialog("bypass-warning", r"Bypass Permissions mode", ("Down", "Enter")),
    ),
    cache="claude-code",
    doctor_optional=False,
    credentials_check="credentials",
    new_session_args=("--session-id",),
    http_hooks=True,
)
CREDENTIAL_ENV = CREDENTIALS.env
"""Its credential variables (bench/ reads them)."""
GATEWAY = gateway_env(CREDENTIALS)

# The default lets a worker edit files and run commands without prompts (an unattended worker cannot
# answer one), while refusing the destructive few. The real boundary is orch's: the container, or the sandbox.
ALLOW = ["Bash", "Read", "Edit", "MultiEdit", "Write", "Glob", "Grep", "NotebookEdit", "TodoWrite"]
DENY = ["Bash(rm -rf:*)", "Bash(sudo:*)", "Bash(git push:*)"]


def status_command(path: Path) -> str:
    """The status line: Claude Code's payload saved whole, atomically (a shell, `cat` and `mv`: it runs after
    every message, and a Python start each time cost more than the hooks), and the worker's label. The file is
    also the worker's ready marker: the status line runs once the prompt is drawn."""
    target = shlex.quote(str(path))
    return f'cat > {target}.$$ && mv -f {target}.$$ {target}; printf "orch W%s\\n" "$ORCH_WORKER"'


def has_conversation(cfg: Path, session: str) -> bool:
    """True if Claude Code kept a transcript with a user message for `session`: `--resume` of anything
    else fails ("No conversation found") and the worker would exit instead of restarting."""
    for path in cfg.glob(f"projects/*/{session}.jsonl"):
        with path.open(errors="replace") as fh:
            for line in fh:
                try:
                    if json.loads(line).get("type") == "user":
                        return True
                except (ValueError, AttributeError):
                    continue
    return False


def _merge_json(path: Path, updates: dict[str, Any]) -> None:
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            loaded = json.loads(path.read_text())
            data = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            data = {}
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    write_config(path, data)


class ClaudeAdapter(AgentBase):
    FACTS = FACTS

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        cfg = ctx.config_dir
        cfg.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The status line is the ready marker: the last life's would read as booted (`orch restart`).
        ctx.run.status_line(ctx.worker).unlink(missing_ok=True)
        # Trust both folders the worker touches: its workdir and the run folder (--add-dir).
        self._seed_state(cfg, (ctx.workdir, ctx.run.root), ctx.env.get("ANTHROPIC_API_KEY"))
        self._seed_settings(cfg, ctx)
        self._copy_login(cfg, ctx.login_file)

        argv = [str(self.binary()), "--permission-mode", ctx.permission_mode, "--add-dir", str(ctx.run.root)]
        if ctx.model:
            argv += ["--model", ctx.model]
        resume = ctx.resume_session if ctx.resume_session and has_conversation(cfg, ctx.resume_session) else None
        argv += self.session_argv(resume)
        if ctx.prompt:
            argv.append(ctx.prompt)

        env = {
            "CLAUDE_CONFIG_DIR": str(cfg),
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            **self.worker_env(ctx),
        }
        if ctx.permission_mode == "bypassPermissions" and os.geteuid() == 0:
            # Claude Code refuses bypass mode as root unless told it is sandboxed (issue 3490).
            env["IS_SANDBOX"] = "1"
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        # SessionStart fires before the TUI takes input: an Enter typed then can be swallowed (and
        # once left the session on "model not found"). The status line runs once the prompt is drawn.
        return run.status_line(worker)

    @staticmethod
    def _seed_state(cfg: Path, folders: Sequence[Path], api_key: str | None) -> None:
        trusted = {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        updates: dict[str, Any] = {
            "hasCompletedOnboarding": True,
            "hasSeenAutoDefaultNudge": True,
            "projects": {str(folder): trusted for folder in folders},
        }
        if api_key:
            updates["customApiKeyResponses"] = {"approved": [api_key[-20:]], "rejected": []}
        _merge_json(cfg / ".claude.json", updates)

    @staticmethod
    def _seed_settings(cfg: Path, ctx: WorkerContext) -> None:
        state_file = ctx.run.state(ctx.worker)

        def hook(event: str, *args: str | Path) -> list[dict[str, Any]]:
            if ctx.hook_url is not None and event not in COMMAND_HOOKS:  # its relay logs it, as the writer would
                command = {"type": "http", "url": ctx.hook_url + event, "timeout": 10}
            else:
                command = {"type": "command", "command": hook_command("event", state_file, *args), "timeout": 10}
            return [{"matcher": "", "hooks": [command]}]

        hooks = {event: hook(event) for event in HOOK_EVENTS}
        # This one may answer the prompt itself, from the run's policy (orch run's `permissions`).
        hooks["PermissionRequest"] = hook("PermissionRequest", ctx.run.permission_policy)
        seeded = {
            "skipDangerousModePermissionPrompt": True,
            "permissions": {"allow": ALLOW, "deny": DENY, "defaultMode": ctx.permission_mode},
            "hooks": hooks,
            "statusLine": {"type": "command", "command": status_command(ctx.run.status_line(ctx.worker))},
        }
        _merge_json(cfg / "settings.json", seeded)

    @staticmethod
    def _copy_login(cfg: Path, source: Path | None) -> None:
        """Copy the user's /login credentials: only when the gateway passes the worker's own login through."""
        target = cfg / ".credentials.json"
        if source and source.resolve() != target.resolve():
            shutil.copyfile(source, target)
            target.chmod(0o400)  # read-only: the user's own login owns and refreshes it
