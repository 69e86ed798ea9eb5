"""The aider adapter: an isolated HOME and history files per worker, flags so that no first-run question is
asked, the model through the run's gateway (Chat Completions), and a watcher beside it for state.

What aider 0.86.2 lacks, and how orch degrades (docs/agents/aider.md has the observations):
- no hooks: orch/agents/aider_watch.py reads aider's chat history file (a prompt is logged the moment
  aider takes it: the acknowledgement) and its screen (the input prompt: ready, end of turn); aider's
  own --notifications-command adds a Notification when it waits;
- no prompt-and-stay flag (`--message` exits after one turn): the watcher types the first prompt;
- no session id: a restart restores the chat history from the worker's history file
  (`--restore-chat-history`);
- no tool calls: the model's edit blocks are applied (`--yes-always`); shell blocks it suggests are
  refused by aider under --yes-always (it asks those with an explicit yes), so an aider worker cannot run
  commands (no `orch bus post`); no permission requests reach orch's policy.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import orch.agents.aider_watch
import orch.run.hookwriter
from orch import settings
from orch.agents.binaries import find_binary, version_of
from orch.agents.checks import credentials_check, install_check
from orch.contracts import (
    Check,
    Credentials,
    Dialog,
    GatewayEnv,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    WorkerContext,
)
from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.versions import AIDER_PACKAGE, AIDER_VERSION

CACHE_BIN = Path.home() / ".cache" / "orch" / "aider" / AIDER_VERSION / "bin" / "aider"
DEFAULT_MODEL = "gpt-4.1"
SESSION = orch.agents.aider_watch.SESSION
CREDENTIALS = Credentials(
    env=("OPENAI_API_KEY",),
    base_url_env="OPENAI_API_BASE",
    api_url="https://api.openai.com/v1",
    schemes=(("OPENAI_API_KEY", "bearer"),),
    hint="export OPENAI_API_KEY=... (OPENAI_API_BASE=... for another Chat Completions API)",
)
# aider reads both from its environment (its --openai-api-base / --openai-api-key): no token in argv.
GATEWAY = GatewayEnv(base_url_env="OPENAI_API_BASE", key_env="OPENAI_API_KEY")
SESSIONS = SessionStore(subdir="history")
# A PyPI package: the image installs it in a venv of its own (/opt/pip/aider) and links `aider` onto PATH.
INSTALL = ImageInstall(package=AIDER_PACKAGE, version=AIDER_VERSION, build_arg="AIDER", pip_command="aider")
FLAGS = (
    "--yes-always",  # edits and new files without asking (shell commands are still refused: see above)
    "--no-auto-commits",
    "--no-dirty-commits",
    "--no-git",  # no "create a git repo?" question, no commits in the user's tree
    "--no-gitignore",
    "--analytics-disable",
    "--no-check-update",
    "--no-show-release-notes",
    "--no-show-model-warnings",
    "--no-detect-urls",
    "--map-tokens",
    "0",
)


MODEL_INFO = "litellm/model_prices_and_context_window_backup.json"


def ready_file(cfg: Path) -> Path:
    return cfg / "orch-ready"


class AiderAdapter:
    name: str = "aider"
    permission_modes: tuple[str, ...] = ("yes-always",)
    default_permission_mode: str = "yes-always"
    credentials: Credentials = CREDENTIALS
    gateway: GatewayEnv | None = GATEWAY
    sessions: SessionStore | None = SESSIONS
    install: ImageInstall | None = INSTALL

    def binary(self) -> Path:
        install = f"scripts/setup.sh, or pip install {AIDER_PACKAGE}=={AIDER_VERSION} in a venv of its own"
        return find_binary(settings.AIDER_BIN, "aider", CACHE_BIN, "aider", install)

    def version(self) -> str | None:
        return version_of(self.binary, last=True, timeout=60)  # `aider 0.86.2`: slow to start

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        if ctx.permission_mode not in self.permission_modes:
            raise UsageError(
                f"unknown permission mode {ctx.permission_mode!r} for aider",
                hint=f"use one of: {', '.join(self.permission_modes)}",
            )
        cfg = ctx.config_dir
        home, history = cfg / "home", cfg / SESSIONS.subdir
        for folder in (home / ".aider", history):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The analytics opt-in question is asked of a sample of new users: answer it for good.
        (home / ".aider" / "analytics.json").write_text(
            json.dumps({"uuid": f"orch-worker-{ctx.worker}", "permanently_disable": True, "asked_opt_in": True})
        )
        self._seed_model_info(home / ".aider" / "caches")
        chat = history / "chat.md"
        ready_file(cfg).unlink(missing_ok=True)
        model = f"openai/{ctx.model or DEFAULT_MODEL}"
        state = ctx.run.state(ctx.worker)
        notify = 'echo \'{"hook_event_name": "Notification", "notification_type": "aider_waiting"}\' | ' + shlex.join(
            [sys.executable, "-S", orch.run.hookwriter.__file__, "event", str(state)]
        )
        aider = [
            str(self.binary()),
            *FLAGS,
            "--model", model,
            "--weak-model", model,
            "--chat-history-file", str(chat),
            "--input-history-file", str(history / "input.history"),
            "--llm-history-file", str(history / "llm.history"),
            "--notifications",
            "--notifications-command", notify,
        ]  # fmt: skip
        if ctx.resume_session == SESSION and chat.is_file():
            aider.append("--restore-chat-history")
        watch = [
            sys.executable, "-S", orch.agents.aider_watch.__file__,
            orch.run.hookwriter.__file__, str(state), str(chat), str(ready_file(cfg)),
        ]  # fmt: skip
        if ctx.prompt:
            prompt_file = cfg / "first-prompt.md"
            prompt_file.write_text(ctx.prompt)
            watch.append(str(prompt_file))
        # The watcher starts first, in the background; the shell then becomes aider (so the watcher's
        # parent is aider, and it ends with it).
        script = f'{shlex.join(watch)} </dev/null >/dev/null 2>&1 & exec "$@"'
        argv = ["sh", "-c", script, "aider", *aider]
        env = {
            "HOME": str(home),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm downloads its price list at start
            "AIDER_CHECK_UPDATE": "false",
            settings.RUN.name: str(ctx.run.root),
            settings.WORKER.name: str(ctx.worker),
        }
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def _seed_model_info(self, caches: Path) -> None:
        """aider fetches litellm's model price list from GitHub at start unless its cache is under a day old:
        seed the cache with the copy litellm ships (so nothing is downloaded at run time)."""
        caches.mkdir(parents=True, exist_ok=True)
        shipped = next(self.binary().resolve().parent.parent.glob(f"lib/python3*/site-packages/{MODEL_INFO}"), None)
        target = caches / "model_prices_and_context_window.json"
        target.write_text(shipped.read_text() if shipped else "{}")

    def doctor(self) -> Sequence[Check]:
        limits = Check(
            "aider-support",
            True,
            "no hooks (state from its chat history file and screen, --notifications-command), no session id "
            "(restart restores the chat history), no tool calls (edit blocks only: shell blocks are refused "
            "under --yes-always, so no `orch bus post`), no permission requests for orch's policy",
            optional=True,
        )
        installed = dataclasses.replace(install_check(self), optional=True)
        return (installed, credentials_check(self.credentials, "aider-credentials"), limits)

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        return ready_file(run.config_dir(worker))

    def dialogs(self) -> Sequence[Dialog]:
        # Fallback only: the flags prevent these. Each defaults to Yes, which is never wanted here.
        return (
            Dialog("git-repo", r"No git repo found, create one", ("n", "Enter")),
            Dialog("release-notes", r"Would you like to see what's new in this version", ("n", "Enter")),
            Dialog("analytics", r"Allow collection of anonymous analytics", ("n", "Enter")),
        )
