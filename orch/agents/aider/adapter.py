"""The aider adapter: an isolated HOME and history files per worker, flags so that no first-run question is
asked, the model through the run's gateway (Chat Completions), a watcher beside it for state, and its
questions answered by orch in its own process.

What the pinned aider lacks, and how orch degrades (docs/agents/aider.md has the observations):
- no hooks: orch/agents/aider/watch.py reads aider's chat history file (a prompt is logged the moment
  aider takes it: the acknowledgement) and its screen (the input prompt: ready, end of turn); aider's
  own --notifications-command adds a Notification when it waits;
- no prompt-and-stay flag (`--message` exits after one turn): the watcher types the first prompt;
- no session id: a restart restores the chat history from the worker's history file
  (`--restore-chat-history`);
- no tool calls, no permission hook: the model's edit blocks are applied and its shell blocks offered;
  aider asks before each (its one question function), and orch/agents/aider/confirm.py, which runs
  aider in aider's own interpreter, answers: edits yes, shell blocks by the worker's permission mode
  (`build`: run them; `ask`: a permission request answered by the run's policy, else a human), a
  deny list refused in both.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from orch.agents.aider import confirm, watch
from orch.agents.base import HOOKWRITER, AgentBase
from orch.agents.credentials import gateway_env, openai_key
from orch.contracts import (
    TEXT_SHELL,
    AgentFacts,
    Dialog,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.versions import AIDER_PACKAGE, AIDER_VERSION

DEFAULT_MODEL = "gpt-4.1"
SESSION = watch.SESSION
HISTORY = "history"
"""The worker's history files, in its config dir: what a restart restores the chat from."""
FACTS = AgentFacts(
    name="aider",
    title="aider",
    permission_modes=confirm.MODES,
    default_permission_mode="build",
    # aider reads the base URL and key from its environment (its --openai-api-base / --openai-api-key): no
    # token in argv.
    credentials=openai_key("openai-chat", base_url_env="OPENAI_API_BASE"),
    # No tool calls: aider runs each line of the answer's shell blocks, which the gateway ledgers by that name.
    shell=ShellTool(TEXT_SHELL, "command", hook_name="Bash"),
    sessions=SessionStore(subdir=HISTORY),
    # A PyPI package: the image installs it in a venv of its own (/opt/pip/aider) and links `aider` onto PATH.
    install=ImageInstall(
        package=AIDER_PACKAGE, version=AIDER_VERSION, build_arg="AIDER", pip_command="aider", size_mb=690
    ),
    limits=(
        "no hooks: state from its chat history file and screen",
        "no session id: a restart restores the chat history",
        "no tool calls: the model's edit and shell blocks; orch answers aider's questions in its process (edits "
        "yes, shell blocks by mode: build runs them, ask asks the run's policy)",
        "no read tool; no permission request for an edit",
        "its commands are read from its answers' shell blocks (the gateway's ledger) with no result each: a "
        "verdict's cited exit code is not checked",
    ),
    # Its watcher reads the screen and types the first prompt. Under strict isolation it does so through the
    # relay's socket for its own pane alone (own_pane: in its sandbox, or in a container a folder only its
    # uid may enter); the run's tmux server would let it type into every pane.
    strict_isolation=False,
    own_pane=True,
    # Fallback only: the flags prevent these. Each defaults to Yes, which is never wanted here.
    dialogs=(
        Dialog("git-repo", r"No git repo found, create one", ("n", "Enter")),
        Dialog("release-notes", r"Would you like to see what's new in this version", ("n", "Enter")),
        Dialog("analytics", r"Allow collection of anonymous analytics", ("n", "Enter")),
    ),
    version_last=True,  # `aider X`
    version_timeout=60,  # slow to start
    # Its config (a `load:` of /run commands at start), model settings, ignore list, conventions it is told to read.
    project_files=(".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json", ".aiderignore"),
)
GATEWAY = gateway_env(FACTS.credentials)
# No --yes-always: it answers aider's shell questions No. confirm.py answers every question instead.
FLAGS = (
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


SH_EXEC = "'''exec' "


def interpreter(binary: Path) -> Path:
    """The Python that runs an installed aider: its console script's `#!` line (pip writes
    `#!/venv/bin/python`, or for a path too long for `#!`, `#!/bin/sh` and then `'''exec' "/venv/bin/python"`)."""
    try:
        with binary.open("rb") as fh:
            head = fh.read(1024).decode(errors="replace").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {binary}: {exc.strerror}", hint="set ORCH_AIDER_BIN to aider's script") from None
    program = head[0].removeprefix("#!").split()[:1] if head and head[0].startswith("#!") else []
    if program and Path(program[0]).name.startswith("python"):
        return Path(program[0])
    if program and len(head) > 1 and head[1].startswith(SH_EXEC):
        return Path(shlex.split(head[1].removeprefix(SH_EXEC))[0])
    raise UsageError(
        f"{binary} is not a pip-installed aider (no Python on its #! line)",
        hint=f"pip install {AIDER_PACKAGE}=={AIDER_VERSION} in a venv of its own, or run scripts/setup.sh",
    )


class AiderAdapter(AgentBase):
    FACTS = FACTS

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        cfg = ctx.config_dir
        home, history = cfg / "home", cfg / HISTORY
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
            [sys.executable, "-S", HOOKWRITER, "event", str(state)]
        )
        binary = self.binary()
        answered = [
            str(interpreter(binary)), "-I", confirm.__file__,
            HOOKWRITER, str(state), str(ctx.run.permission_policy), ctx.permission_mode,
        ]  # fmt: skip
        aider = [
            *answered,
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
        pane = ["--pane", str(ctx.pane_socket)] if ctx.pane_socket is not None else []
        watcher = [
            sys.executable, "-S", watch.__file__, *pane,
            HOOKWRITER, str(state), str(chat), str(ready_file(cfg)),
        ]  # fmt: skip
        if ctx.prompt:
            prompt_file = cfg / "first-prompt.md"
            prompt_file.write_text(ctx.prompt)
            watcher.append(str(prompt_file))
        # The watcher starts first, in the background; the shell then becomes aider (so the watcher's
        # parent is aider, and it ends with it).
        script = f'{shlex.join(watcher)} </dev/null >/dev/null 2>&1 & exec "$@"'
        argv = ["sh", "-c", script, "aider", *aider]
        env = {
            "HOME": str(home),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm downloads its price list at start
            "AIDER_CHECK_UPDATE": "false",
            **self.worker_env(ctx),
        }
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def _seed_model_info(self, caches: Path) -> None:
        """aider fetches litellm's model price list from GitHub at start unless its cache is under a day old:
        seed the cache with the copy litellm ships (so nothing is downloaded at run time)."""
        caches.mkdir(parents=True, exist_ok=True)
        shipped = next(self.binary().resolve().parent.parent.glob(f"lib/python3*/site-packages/{MODEL_INFO}"), None)
        target = caches / "model_prices_and_context_window.json"
        target.write_text(shipped.read_text() if shipped else "{}")

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        return ready_file(run.config_dir(worker))
