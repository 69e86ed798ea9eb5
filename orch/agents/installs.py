"""`orch setup`: each pinned agent CLI into orch's agent cache (orch.run.paths.agent_cache), as its facts say
(AgentFacts.install, cache_root, command), so a new agent needs no line here: an npm prefix of its own, or a
venv of its own for a PyPI package (its pinned dependencies never meet orch's); never a global install.

An agent already there is left alone; one whose install fails leaves nothing behind (its folder removed), so
the next `orch setup` starts it afresh. The installers run as child processes with their output kept in a
log: `on_wait` is called about once a second meanwhile (the progress display), and a failure is one line
with the installer's last words."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orch.agents.registry import ADAPTERS, ALL_AGENTS, get_adapter
from orch.errors import OrchError

WAKE = 1.0
"""Seconds between two `on_wait` calls while an installer runs (the bar's refresh)."""
NPM_FLAGS = ("--no-audit", "--no-fund", "--loglevel=error")


@dataclass(frozen=True)
class Install:
    """One agent's install: where it goes, and the commands that make it."""

    agent: str
    title: str
    version: str
    pip: bool
    """A PyPI package into a venv (else an npm package into a prefix)."""
    prefix: Path
    spec: str
    command: str
    config_npm: str | None
    size_mb: int
    chosen: Path | None = None
    """The binary its ORCH_<NAME>_BIN names: the user's choice, so nothing is installed for it."""

    @property
    def binary(self) -> Path:
        return self.chosen or self.prefix / ("bin" if self.pip else "node_modules/.bin") / self.command

    @property
    def source(self) -> str:
        return "PyPI" if self.pip else "npm"

    def installed(self) -> bool:
        deps = self.prefix / "config-deps" / "node_modules"
        return self.chosen is not None or (self.binary.exists() and (self.config_npm is None or deps.is_dir()))


def plan(kinds: Sequence[str]) -> list[Install]:
    """The installs of these agents (`all`: every one), in the registry's order; one with nothing to install
    (scripted) has none; an unknown agent is a UsageError."""
    names = list(ADAPTERS) if ALL_AGENTS in kinds else list(dict.fromkeys(kinds))
    out = []
    for name in names:
        facts = get_adapter(name).facts
        install = facts.install
        if install is None:
            continue
        command = install.pip_command or facts.command or facts.name
        pip = install.pip_command is not None
        out.append(
            Install(
                name,
                facts.title,
                install.version,
                pip,
                facts.cache_root,
                install.spec(),
                command,
                install.config_npm,
                install.size_mb,
                Path(chosen) if (chosen := facts.bin_setting and facts.bin_setting.get()) else None,
            )
        )
    return out


def install(item: Install, on_wait: Callable[[], None] = lambda: None) -> None:
    """Install one agent (OrchError with the installer's last words when it fails; nothing left behind)."""
    item.prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        if item.pip:
            _run([sys.executable, "-m", "venv", str(item.prefix)], on_wait)
            pip = str(item.prefix / "bin" / "pip")
            _run([pip, "install", "--quiet", "--disable-pip-version-check", item.spec], on_wait)
        else:  # Codex CLI's native binary comes in a per-platform optional dependency: never --omit=optional
            _run(["npm", "install", "--prefix", str(item.prefix), *NPM_FLAGS, item.spec], on_wait)
        if item.config_npm is not None:  # the package it would fetch into each config dir: once, here
            deps = item.prefix / "config-deps"
            _config_package(deps, item.config_npm)
            _run(["npm", "install", "--prefix", str(deps), *NPM_FLAGS], on_wait)
        if not item.binary.exists():
            raise OrchError(f"{item.title} {item.version} installed no {item.binary}")
    except BaseException:
        shutil.rmtree(item.prefix, ignore_errors=True)  # the next `orch setup` starts it afresh
        raise


def _config_package(folder: Path, package: str) -> None:
    name, _, version = package.rpartition("@")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"dependencies": {name: version}}, indent=2) + "\n")


def _run(argv: list[str], on_wait: Callable[[], None]) -> None:
    env = {**os.environ, "PIP_NO_INPUT": "1", "npm_config_update_notifier": "false"}
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise OrchError(f"cannot run {argv[0]}: {exc}") from None
        try:
            while True:
                try:
                    code = proc.wait(timeout=WAKE)  # the installer's end, or the next refresh of the display
                    break
                except subprocess.TimeoutExpired:
                    on_wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            log.seek(0)
            words = " ".join(log.read().decode(errors="replace").split())[-300:]
            raise OrchError(f"{' '.join(argv[:2])} {argv[-1]} failed (exit {code}): {words}")


def size_mb(path: Path) -> int:
    """What a folder takes on disk, in MB (as `du -sm` counts: allocated blocks, a hard-linked file once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # gone meanwhile (the installer moves files)
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total >> 20
