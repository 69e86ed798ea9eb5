"""The Claude Code adapter: isolated config dir per worker, seeded so no first-run dialog appears."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orch.run.hookwriter
from orch import settings
from orch.agents.binaries import find_binary, version_of
from orch.agents.checks import check_permission_mode, credentials_check, install_check
from orch.contracts import (
    Check,
    Credentials,
    Dialog,
    GatewayEnv,
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
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
CREDENTIALS = Credentials(
    env=CREDENTIAL_ENV,
    base_url_env="ANTHROPIC_BASE_URL",
    api_url="https://api.anthropic.com",
    # A setup-token is an OAuth bearer token: the API also wants its OAuth beta header.
    schemes=(
        ("ANTHROPIC_API_KEY", "x-api-key"),
        ("ANTHROPIC_AUTH_TOKEN", "bearer"),
        ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
    ),
    login=LoginFile(dir_env="CLAUDE_CONFIG_DIR", home_dir=".claude", name=".credentials.json"),
    protocols=("anthropic",),
    hint="export ANTHROPIC_API_KEY=... or CLAUDE_CODE_OAUTH_TOKEN=... (from `claude setup-token`), "
    "or log in with `claude` (/login)",
)
GATEWAY = GatewayEnv(base_url_env="ANTHROPIC_BASE_URL", key_env="ANTHROPIC_API_KEY")
# Transcripts live in <config dir>/projects/<mangled cwd>/<session>.jsonl; `--resume` reads them.
SESSIONS = SessionStore(subdir="projects")
INSTALL = ImageInstall(package=CLAUDE_CODE_PACKAGE, version=CLAUDE_CODE_VERSION, build_arg="CLAUDE_CODE")
CACHE_BIN = Path.home() / ".cache" / "orch" / "claude-code" / CLAUDE_CODE_VERSION / "node_modules" / ".bin" / "claude"

# The default lets a worker edit files and run commands without prompts (an unattended worker cannot
# answer one), while refusing the destructive few. The container backend is the real boundary.
ALLOW = ["Bash", "Read", "Edit", "MultiEdit", "Write", "Glob", "Grep", "NotebookEdit", "TodoWrite"]
DENY = ["Bash(rm -rf:*)", "Bash(sudo:*)", "Bash(git push:*)"]


def hook_command(*args: str | Path) -> str:
    """A shell command line running the stdlib-only hook writer with this interpreter."""
    return shlex.join([sys.executable, "-S", orch.run.hookwriter.__file__, *map(str, args)])


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
    path.write_text(json.dumps(data, indent=2) + "\n")
    path.chmod(0o600)


SHELL = ShellTool("Bash", "command")
"""Claude Code's shell tool (the scripted agent logs its commands under the same name)."""


class ClaudeAdapter:
    name: str = "claude"
    permission_modes: tuple[str, ...] = ("default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions")
    default_permission_mode: str = "acceptEdits"
    credentials: Credentials = CREDENTIALS
    shell: ShellTool | None = SHELL
    gateway: GatewayEnv | None = GATEWAY
    sessions: SessionStore | None = SESSIONS
    install: ImageInstall | None = INSTALL
    limits: tuple[str, ...] = ()
    strict_isolation: bool = True

    def binary(self) -> Path:
        install = f"npm install -g {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}"
        return find_binary(settings.CLAUDE_BIN, "claude", CACHE_BIN, "Claude Code", install)

    def version(self) -> str | None:
        return version_of(self.binary)

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        check_permission_mode(self, ctx.permission_mode)
        cfg = ctx.config_dir
        cfg.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Trust both folders the worker touches: its workdir and the run folder (--add-dir).
        self._seed_state(cfg, (ctx.workdir, ctx.run.root), ctx.env.get("ANTHROPIC_API_KEY"))
        self._seed_settings(cfg, ctx)
        self._copy_login(cfg, ctx.login_file)

        argv = [str(self.binary()), "--permission-mode", ctx.permission_mode, "--add-dir", str(ctx.run.root)]
        if ctx.model:
            argv += ["--model", ctx.model]
        if ctx.resume_session and has_conversation(cfg, ctx.resume_session):
            argv += ["--resume", ctx.resume_session]
        else:
            argv += ["--session-id", str(uuid.uuid4())]
        if ctx.prompt:
            argv.append(ctx.prompt)

        env = {
            "CLAUDE_CONFIG_DIR": str(cfg),
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            settings.RUN.name: str(ctx.run.root),
            settings.WORKER.name: str(ctx.worker),
        }
        if ctx.permission_mode == "bypassPermissions" and os.geteuid() == 0:
            # Claude Code refuses bypass mode as root unless told it is sandboxed (issue 3490).
            env["IS_SANDBOX"] = "1"
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def doctor(self) -> Sequence[Check]:
        return (install_check(self), credentials_check(self.credentials))

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        # SessionStart fires before the TUI takes input: an Enter typed then can be swallowed (and
        # once left the session on "model not found"). The status line runs once the prompt is drawn.
        return run.status_line(worker)

    def dialogs(self) -> Sequence[Dialog]:
        # Fallback only: seeding the config dir prevents these. In 2.1.332 the "No / exit" option is
        # selected by default, so a blind Enter would make the worker exit.
        return (
            Dialog("trust", r"Is this a (project|directory) you created or one you trust", ("Down", "Enter")),
            Dialog("api-key", r"Detected a custom API key in your environment", ("Up", "Enter")),
            Dialog("bypass-warning", r"Bypass Permissions mode", ("Down", "Enter")),
        )

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

        def hook(*args: str | Path) -> list[dict[str, Any]]:
            command = {"type": "command", "command": hook_command("event", state_file, *args), "timeout": 10}
            return [{"matcher": "", "hooks": [command]}]

        hooks = {event: hook() for event in HOOK_EVENTS}
        # This one may answer the prompt itself, from the run's policy (orch run's `permissions`).
        hooks["PermissionRequest"] = hook(ctx.run.permission_policy)
        settings = {
            "skipDangerousModePermissionPrompt": True,
            "permissions": {"allow": ALLOW, "deny": DENY, "defaultMode": ctx.permission_mode},
            "hooks": hooks,
            "statusLine": {
                "type": "command",
                "command": hook_command("status", ctx.run.status_line(ctx.worker)),
            },
        }
        _merge_json(cfg / "settings.json", settings)

    @staticmethod
    def _copy_login(cfg: Path, source: Path | None) -> None:
        """Copy the user's /login credentials: only when the gateway passes the worker's own login through."""
        target = cfg / ".credentials.json"
        if source and source.resolve() != target.resolve():
            shutil.copyfile(source, target)
            target.chmod(0o400)  # read-only: the user's own login owns and refreshes it
