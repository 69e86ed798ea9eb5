"""The Codex CLI adapter (OpenAI's `codex`, pinned in orch.versions): one `CODEX_HOME` per worker, seeded
so that no first-run dialog appears, pointed at the run's gateway by its own model provider.

What the pinned Codex does on a first start, and what the seeding answers (docs/agents/codex.md):
- "Welcome to Codex ... Sign in with ChatGPT": shown for the built-in OpenAI provider even with a key
  set. The worker uses a provider of its own (`[model_providers.orch]`, `env_key`), which needs no login.
- "Trust this folder?": never answered yes. Every workdir is `[projects."<dir>"] trust_level = "untrusted"`, so
  a folder's `.codex/` config, hooks, exec policies and MCP servers stay off; the pinned Codex has no other switch
  for it, and shows "Folder access ... 1. Open restricted" at every start in such a folder, whatever `-a`/`-s`
  say, which orch answers (`every_start`: Enter on the preselected "Open restricted", which changes no saved
  trust; `orch restart` waits for it, the controller's loop answers it after its restarts: orch.lead.recovery).
- "Hooks need review": orch writes its hooks itself (in CODEX_HOME, which an untrusted folder does not turn off)
  and passes `--dangerously-bypass-hook-trust`, which runs them without review for that invocation.
- No update check or telemetry prompt blocks, but both are switched off.

State comes from Codex's hooks (`$CODEX_HOME/hooks.json`, the payloads Claude Code's hooks send, through
orch.run.hookwriter). Two differences matter. SessionStart fires only with the session's first turn, so
a worker launched without a prompt gets a short boot prompt (one cheap model turn, and it makes a
session a restart can resume); its ready marker is written when that turn stops. Codex has no
StopFailure hook, and a turn it gives up on after API errors fires no Stop either; its session log
records it (`task_complete` with an `error`), and orch/agents/codex/watch.py, started beside Codex in
its pane, reports that as a StopFailure (so the worker reads as rate-limited or failed, not busy).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import tomli_w

from orch.agents.base import HOOKWRITER, AgentBase, hook_command
from orch.agents.binaries import version_of
from orch.agents.codex import watch
from orch.agents.credentials import gateway_env, openai_key
from orch.contracts import (
    AgentFacts,
    Dialog,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.errors import OrchError, UsageError
from orch.run.folder import RunFolder
from orch.versions import CODEX_PACKAGE, CODEX_VERSION

log = logging.getLogger(__name__)

# The events the pinned Codex fires from hooks.json (it ignores StopFailure and Notification).
HOOK_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "Stop",
    "SessionEnd",
)
SESSION_END_TIMEOUT = 3  # Codex clamps a longer one to 3 s, with a startup warning
PROVIDER = "orch"
# No login file: a ChatGPT sign-in (auth.json) belongs to Codex's built-in provider, which would bypass the
# gateway. Only an API key is supported.
CREDENTIALS = openai_key(
    "openai-responses",
    hint="export OPENAI_API_KEY=... (a ChatGPT sign-in cannot be used: workers reach the model through the gateway)",
)
READY = "orch-ready"
"""The ready marker, in the worker's CODEX_HOME: written by the hook that shows the TUI takes input."""
OFFLINE_MODEL = "gpt-5.5"
"""The model an offline run asks for: the newest in the pinned Codex's catalog whose tools are plain function
calls (exec_command). Its default, gpt-6.2-sol, gets one JavaScript `exec` tool ("code mode") instead,
which orch's scripted model does not script."""
MIGRATIONS = {
    "gpt-5.5": "gpt-6-sol",
    "gpt-5.6-sol": "gpt-6-sol",
    "gpt-5.6-terra": "gpt-6-sol",
    "gpt-5.6-luna": "gpt-6-luna",
}
"""The pinned Codex's catalog offers these upgrades with a blocking "Meet GPT-6 ..." dialog; recorded as
answered ("use existing model") in config.toml, the way Codex itself records the choice."""
BOOT_PROMPT = "You are a worker in an orch fleet. Your task comes in the next message. For now reply only: ready."
RESUME_PROMPT = (
    "orch restarted you and resumed this session. Your next task comes in the next message. Reply only: ready."
)

# How each permission mode runs Codex: (approval policy, sandbox mode). The default lets a worker edit
# its workdir and the run folder and run commands without a prompt (an unattended worker cannot answer
# one); commands reach no network and nothing else on disk. `on-request` lets the model ask to leave the
# sandbox: the PermissionRequest hook answers from the run's policy. `full-access` is for a worker
# already inside the run's container; `bypass` adds Codex's own --dangerously-bypass-approvals-and-sandbox.
MODES: dict[str, tuple[str, str]] = {
    "workspace-write": ("never", "workspace-write"),
    "on-request": ("on-request", "workspace-write"),
    "full-access": ("never", "danger-full-access"),
    "bypass": ("never", "danger-full-access"),
}

FACTS = AgentFacts(
    name="codex",
    title="Codex CLI",
    permission_modes=tuple(MODES),
    default_permission_mode="workspace-write",
    credentials=CREDENTIALS,
    shell=ShellTool("exec_command", "cmd", hook_name="Bash"),
    # Rollouts live in <CODEX_HOME>/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl; `codex resume` reads them.
    sessions=SessionStore(subdir="sessions"),
    # No Node runtime: the adapter runs the native binary behind the npm launcher (native(), below).
    install=ImageInstall(package=CODEX_PACKAGE, version=CODEX_VERSION, build_arg="CODEX", size_mb=425),
    limits=(
        "no hook for a turn it gives up on after API errors: read from its session log within 0.5 s",
        "a worker without a first prompt boots with a one-line model turn (SessionStart fires with the first turn)",
        "API keys only, no ChatGPT sign-in",
    ),
    # Fallback only: the seeded CODEX_HOME prevents these. The first option of each is the one to take.
    dialogs=(
        Dialog("folder-access", r"›\s*1\.\s*Open restricted", ("Enter",), every_start=True),
        Dialog("hooks-review", r"Hooks need review", ("Down", "Enter")),
        Dialog("model-migration", r"1\. Try new model", ("Down", "Enter")),
    ),
    version_last=True,  # "codex-cli X"
    doctor_optional=False,
    resume_args=("resume",),
    # Config, hooks, exec policies, MCP servers, skills (.agents/skills), instructions.
    project_files=("**/.codex/**", "**/.agents/**", "AGENTS.md", "AGENTS.override.md"),
)
GATEWAY = gateway_env(FACTS.credentials)


def _sandbox_mode(ctx: WorkerContext) -> str:
    """The mode's sandbox, but full access inside a run's container or orch's own local sandbox, which are
    the boundary there. Codex's sandbox is bubblewrap, which cannot make a namespace in a Docker container
    ("bwrap: No permissions to create a new namespace"), nor in orch's sandbox, which drops every
    capability: every command would fail."""
    sandbox = MODES[ctx.permission_mode][1]
    if sandbox == "workspace-write" and ctx.boxed:
        log.info("worker %s: Codex runs with full access inside orch's sandbox, which is its boundary", ctx.worker)
        return "danger-full-access"
    return sandbox


# The npm package's `codex` is a Node launcher that only execs the native binary of the platform package
# (`@openai/codex-linux-x64`, `.../vendor/<triple>/bin/codex`) with two variables set: run that binary
# directly, the same way, so no Node runtime is needed (the worker image carries none for it).
TRIPLES = {"x86_64": ("x64", "x86_64-unknown-linux-musl"), "aarch64": ("arm64", "aarch64-unknown-linux-musl")}


def native(launcher: Path) -> tuple[Path, dict[str, str]]:
    """The native binary behind an npm-installed launcher, with the variables the launcher would set;
    the launcher itself (and no variables) when it is not one (a native install, another platform)."""
    arch = TRIPLES.get(platform.machine())
    package = launcher.resolve().parent.parent  # node_modules/@openai/codex (bin/codex.js is its launcher)
    if arch is None or package.name != "codex" or package.parent.name != "@openai":
        return launcher, {}
    binary = package.parent / f"codex-linux-{arch[0]}" / "vendor" / arch[1] / "bin" / "codex"
    if not binary.is_file():
        return launcher, {}
    return binary, {"CODEX_MANAGED_BY_NPM": "1", "CODEX_MANAGED_PACKAGE_ROOT": str(package)}


def has_rollout(home: Path, session: str) -> bool:
    """True if Codex kept a rollout for `session` (else `codex resume` has nothing to read)."""
    return any(path.stat().st_size > 0 for path in home.glob(f"sessions/*/*/*/rollout-*-{session}.jsonl"))


def _offline(run: RunFolder) -> bool:
    try:
        info = run.info()
    except OrchError:
        return False
    return info.offline or info.replay is not None


class CodexAdapter(AgentBase):
    FACTS = FACTS

    def version(self) -> str | None:
        try:
            binary, env = native(self.binary())
        except (OSError, UsageError):
            return None
        return version_of(binary, env={**os.environ, **env}, last=True)

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        home = ctx.config_dir
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = home / READY
        marker.unlink(missing_ok=True)  # a marker of the last life would read as booted
        resume = ctx.resume_session if ctx.resume_session and has_rollout(home, ctx.resume_session) else None
        prompt = ctx.prompt or (RESUME_PROMPT if resume else BOOT_PROMPT)
        (home / "config.toml").write_text(tomli_w.dumps(self._config(ctx)))
        hooks = self._hooks(ctx, marker, booted_on_start=ctx.prompt is not None)
        (home / "hooks.json").write_text(json.dumps({"hooks": hooks}, indent=2) + "\n")

        binary, launcher_env = native(self.binary())
        aliases = self._sandbox_alias(home, binary, ctx)
        argv = [str(binary)]
        argv += self.session_argv(resume)
        # No shared background server: it would outlive the worker's pane.
        argv += ["--no-daemon", "--dangerously-bypass-hook-trust", "--cd", str(ctx.workdir)]
        if ctx.permission_mode == "bypass":
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        model = ctx.model or (OFFLINE_MODEL if _offline(ctx.run) else None)
        if model:
            argv += ["--model", model]
        argv.append(prompt)
        # The watcher starts first, in the background; the shell then becomes Codex (so the watcher's
        # parent is Codex, and it ends with it). It reports the turns Codex gives up on (no hook fires).
        watcher = [sys.executable, "-S", watch.__file__, HOOKWRITER]
        watcher += [str(ctx.run.state(ctx.worker)), str(home)]
        # tmux gives a pane its client's PATH even over `-e PATH=`: the alias dir goes first here.
        path = f'PATH={shlex.quote(str(aliases))}:"$PATH"; export PATH; ' if aliases else ""
        argv = ["sh", "-c", f'{path}{shlex.join(watcher)} </dev/null >/dev/null 2>&1 & exec "$@"', "codex", *argv]
        env = {
            **launcher_env,
            "CODEX_HOME": str(home),
            **self.worker_env(ctx),
        }
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    @staticmethod
    def _sandbox_alias(home: Path, binary: Path, ctx: WorkerContext) -> Path | None:
        """Codex's own sandbox runs `bwrap ... codex-linux-sandbox`, an alias of itself it makes in a temp
        dir under CODEX_HOME, but refuses to make under /tmp (any test, any CI job's mktemp ORCH_HOME): with
        bubblewrap installed every command then fails ("bwrap: execvp codex-linux-sandbox"). So the alias
        is made here, in the worker's own config dir, to go first on its PATH (None when the sandbox is
        off anyway)."""
        if _sandbox_mode(ctx) != "workspace-write":
            return None
        aliases = home / "bin"
        aliases.mkdir(mode=0o700, exist_ok=True)
        alias = aliases / "codex-linux-sandbox"
        alias.unlink(missing_ok=True)
        alias.symlink_to(binary)
        return aliases

    @staticmethod
    def _config(ctx: WorkerContext) -> dict[str, Any]:
        approval, _ = MODES[ctx.permission_mode]
        sandbox = _sandbox_mode(ctx)
        base_url = ctx.env.get(GATEWAY.base_url_env) or CREDENTIALS.api_url or ""
        return {
            "model_provider": PROVIDER,
            "approval_policy": approval,
            "sandbox_mode": sandbox,
            "check_for_update_on_startup": False,
            # A login shell would reset PATH from /etc/profile, and workers need orch's bin dir on it.
            "allow_login_shell": False,
            # The run's gateway: the URL carries the worker's token, and so does the key variable.
            "model_providers": {
                PROVIDER: {
                    "name": "orch gateway",
                    "base_url": base_url,
                    "env_key": GATEWAY.key_env,
                    "wire_api": "responses",
                    "request_max_retries": 2,
                    "stream_max_retries": 2,
                }
            },
            # The run folder too: the worker writes its outbox there and posts to the bus.
            "sandbox_workspace_write": {"writable_roots": [str(ctx.run.root)], "network_access": False},
            # Restricted: no config, hooks, exec policy or MCP server of the folder (see the top of this module).
            "projects": {str(ctx.workdir): {"trust_level": "untrusted"}},
            "notice": {"model_migrations": dict(MIGRATIONS)},
            "tui": {"screen_reader_detection_done": True, "model_availability_nux": {"gpt-6.1-sol": 4}},
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
        }

    @staticmethod
    def _hooks(ctx: WorkerContext, marker: Path, booted_on_start: bool) -> dict[str, list[dict[str, Any]]]:
        state_file = ctx.run.state(ctx.worker)
        touch = f" ; touch {shlex.quote(str(marker))}"

        def hook(event: str, *args: str | Path) -> list[dict[str, Any]]:
            command = hook_command("event", state_file, *args)
            if event == "Stop" or (event == "SessionStart" and booted_on_start):
                command += touch
            timeout = SESSION_END_TIMEOUT if event == "SessionEnd" else 10
            return [{"matcher": "", "hooks": [{"type": "command", "command": command, "timeout": timeout}]}]

        hooks = {event: hook(event) for event in HOOK_EVENTS}
        # This one may answer the prompt itself, from the run's policy (orch run's `permissions`).
        hooks["PermissionRequest"] = hook("PermissionRequest", ctx.run.permission_policy)
        return hooks

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        return run.config_dir(worker) / READY
