"""The opencode adapter: an isolated config and data dir per worker, seeded so no first-run dialog appears,
a provider that points at the run's gateway (OpenAI Chat Completions), and a plugin that reports
opencode's own events (session status, tool calls, permission requests) as orch hook events.

What the pinned opencode does and how each is handled (docs/agents/opencode.md has the observations):
- It reads `$XDG_CONFIG_HOME/opencode` and `$OPENCODE_CONFIG_DIR`, and installs `@opencode-ai/plugin`
  from npm into each of them at start. orch points both at one dir per worker and links a pinned copy
  installed once by scripts/setup.sh (`config-deps`), so nothing is downloaded at run time.
- Without a provider it uses its own hosted models ("OpenCode Zen"): the config enables only orch's
  provider, whose `baseURL` is the worker's gateway URL (with its run-scoped token) from the environment.
- Sessions live in `$XDG_DATA_HOME/opencode/opencode.db`; `--session ID` resumes one.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from orch.agents.base import HOOKWRITER, AgentBase
from orch.agents.credentials import gateway_env, openai_key
from orch.contracts import (
    AgentFacts,
    Check,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    ShellTool,
    WorkerContext,
)
from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.versions import OPENCODE_PACKAGE, OPENCODE_PLUGIN_PACKAGE, OPENCODE_VERSION

DATA = "data"
"""The worker's $XDG_DATA_HOME, in its config dir: opencode keeps its sessions there."""
FACTS = AgentFacts(
    name="opencode",
    title="opencode",
    permission_modes=("build", "ask", "auto"),
    default_permission_mode="build",
    credentials=openai_key("openai-chat"),
    shell=ShellTool("bash", "command"),
    sessions=SessionStore(subdir=DATA),
    install=ImageInstall(
        package=OPENCODE_PACKAGE,
        version=OPENCODE_VERSION,
        build_arg="OPENCODE",
        config_npm=f"{OPENCODE_PLUGIN_PACKAGE}@{OPENCODE_VERSION}",
        size_mb=420,
    ),
    resume_args=("--session",),
    # Config (provider, MCP servers, plugins), plugins, agents, commands, instructions.
    project_files=("**/.opencode/**", "opencode.json", "opencode.jsonc", "AGENTS.md"),
)
GATEWAY = gateway_env(FACTS.credentials)


def config_deps(binary: Path) -> Path:
    """The pinned plugin package (`npm install @opencode-ai/plugin@<version>`, done once: linked into each config
    dir) beside the npm prefix opencode was installed into (`<prefix>/node_modules/.bin/opencode`): `orch
    setup`'s cache, or the worker image's /opt/agents; else `orch setup`'s cache."""
    beside = binary.parent.parent.parent / "config-deps"
    return beside if (beside / "node_modules").is_dir() else FACTS.cache_root / "config-deps"


PROVIDER = "orch"
DEFAULT_MODEL = "gpt-4.1"
ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # models.dev: the provider is ours, nothing to fetch
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # the hosted-login plugins
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",  # a workdir's opencode.json must not re-point the provider
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # do not read the user's ~/.claude
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}
DENY = ("rm -rf*", "sudo*", "git push*")


def permission_rules(mode: str, run_root: Path) -> dict[str, Any]:
    """opencode's `permission` config for each of orch's modes (docs/agents/opencode.md)."""
    ask_all = mode == "ask"
    bash: dict[str, str] = {"*": "ask" if ask_all else "allow", **dict.fromkeys(DENY, "deny")}
    return {
        "edit": "ask" if ask_all else "allow",
        "bash": bash,
        "webfetch": "ask",
        # The run folder (bus, outbox) is outside the workdir: writing there must not ask.
        "external_directory": {"*": "ask", f"{run_root}/**": "allow"},
        "doom_loop": "ask",
    }


def has_session(data_dir: Path, session: str) -> bool:
    """True if opencode's database in `data_dir` holds `session` (else `--session` would fail)."""
    db = data_dir / "opencode" / "opencode.db"
    if not db.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2) as conn:
            return conn.execute("SELECT 1 FROM session WHERE id = ?", (session,)).fetchone() is not None
    except sqlite3.Error:
        return False


def ready_file(config_dir: Path) -> Path:
    """Written by orch's TUI plugin once opencode's TUI takes input."""
    return config_dir / "orch-ready"


def _template(name: str, constants: dict[str, Any]) -> str:
    template = resources.files("orch").joinpath(f"data/{name}").read_text()
    return template.replace("__ORCH__", json.dumps(constants))


def stateline_source() -> str:
    """The state-line writer the server plugin imports: orch.run.hookwriter's line format, in JavaScript."""
    return resources.files("orch").joinpath("data/opencode-stateline.js").read_text()


def plugin_source(ctx: WorkerContext, session: str | None) -> str:
    constants = {
        "python": sys.executable,
        "hookwriter": HOOKWRITER,
        "state": str(ctx.run.state(ctx.worker)),
        "policy": str(ctx.run.permission_policy),
        "session": session,
    }
    return _template("opencode-plugin.js", constants)


class OpencodeAdapter(AgentBase):
    FACTS = FACTS

    def launch(self, ctx: WorkerContext) -> LaunchSpec:
        cfg = ctx.config_dir
        config_dir = cfg / "opencode"  # both $XDG_CONFIG_HOME/opencode and $OPENCODE_CONFIG_DIR
        data_dir = cfg / DATA
        for folder in (config_dir / "plugins", data_dir, cfg / "cache", cfg / "state"):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._link_deps(config_dir)
        resume = bool(ctx.resume_session) and has_session(data_dir, str(ctx.resume_session))
        model = ctx.model or DEFAULT_MODEL
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",  # bundled in the binary: nothing to install
                    "name": "orch gateway",
                    "options": {
                        "baseURL": f"{{env:{GATEWAY.base_url_env}}}",
                        "apiKey": f"{{env:{GATEWAY.key_env}}}",
                    },
                    "models": {model: {"name": model, "tool_call": True}},
                }
            },
            "enabled_providers": [PROVIDER],  # never its hosted "Zen" models
            "model": f"{PROVIDER}/{model}",
            "small_model": f"{PROVIDER}/{model}",  # titles go through the gateway too
            "autoupdate": False,
            "share": "disabled",
            "permission": permission_rules(ctx.permission_mode, ctx.run.root),
        }
        (config_dir / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
        (config_dir / "plugins" / "orch.js").write_text(plugin_source(ctx, ctx.resume_session if resume else None))
        # Imported by the server plugin, outside plugins/ (opencode would load it as a plugin of its own).
        (config_dir / "orch-stateline.js").write_text(stateline_source())
        # The TUI plugin lives outside plugins/ (the server loads everything there).
        ready_file(cfg).unlink(missing_ok=True)
        (config_dir / "orch-tui.js").write_text(_template("opencode-tui.js", {"ready": str(ready_file(cfg))}))
        (config_dir / "tui.json").write_text(json.dumps({"plugin": ["./orch-tui.js"]}) + "\n")

        argv = [str(self.binary())]
        if ctx.permission_mode == "auto":
            argv.append("--auto")
        argv += self.session_argv(ctx.resume_session if resume else None)
        if ctx.prompt:
            argv += ["--prompt", ctx.prompt]
        env = {
            **ENV,
            "OPENCODE_CONFIG_DIR": str(config_dir),
            "XDG_CONFIG_HOME": str(cfg),
            "XDG_DATA_HOME": str(data_dir),
            "XDG_CACHE_HOME": str(cfg / "cache"),
            "XDG_STATE_HOME": str(cfg / "state"),
            **self.worker_env(ctx),
        }
        return LaunchSpec(argv=argv, env=env, cwd=ctx.workdir)

    def _link_deps(self, config_dir: Path) -> None:
        """opencode runs `npm install @opencode-ai/plugin` in its config dir unless it is there: give it
        the pinned copy (package.json, lock and a link to node_modules)."""
        deps = config_deps(self.binary())
        if not (deps / "node_modules").is_dir():
            raise UsageError(
                f"opencode's plugin package is not installed in {deps}",
                hint="run scripts/setup.sh (opencode would otherwise download it at run time)",
            )
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(deps / name, config_dir / name)
        link = config_dir / "node_modules"
        if not link.is_symlink():
            if link.exists():
                shutil.rmtree(link)
            link.symlink_to(deps / "node_modules")

    def doctor(self) -> Sequence[Check]:
        facts = Check(
            "opencode-support",
            True,
            "state from its plugin events (session status, tools, permission asked); sessions resume with "
            "--session; permission modes: " + ", ".join(self.facts.permission_modes),
            optional=True,
        )
        return (*super().doctor(), facts)

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        # The server plugin's SessionStart comes before the TUI is drawn: text typed then is lost.
        return ready_file(run.config_dir(worker))
