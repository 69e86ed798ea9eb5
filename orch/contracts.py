"""The whole architecture in one file: the contracts between orch's layers.

- An **AgentAdapter** knows one agent CLI: how to seed its isolated config dir (so no first-run dialog
  ever appears), how to launch it, how its hooks report state into the run folder, and which dialogs it
  may still show (recognised on screen only as a fallback).
- A **Sandbox** is where a run's tmux server and controller live: `local` (this machine) or `docker`
  (one disposable container per run). Fleet commands are the same for both; the sandbox decides where
  they execute.
- The **RunFolder** (`orch.run.folder`) is the plain-file contract with workers and humans; the **bus**
  (`orch.run.bus`) is its append-only message log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from orch.run.folder import RunFolder
from orch.run.records import RunInfo


@dataclass(frozen=True)
class WorkerContext:
    """Everything an adapter needs to prepare one worker."""

    run: RunFolder
    worker: int
    workers: int
    workdir: Path
    config_dir: Path
    permission_mode: str
    env: Mapping[str, str] = field(default_factory=dict)
    """The environment the agent will inherit from the tmux server (credentials included)."""
    model: str | None = None
    prompt: str | None = None
    """First prompt, passed on the command line so nothing has to be typed."""
    resume_session: str | None = None
    """Resume this agent session if the agent kept one (after a crash); else start afresh."""


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one worker in its pane. `env` holds no secrets: those come from the tmux server."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path()


@dataclass(frozen=True)
class Dialog:
    """A blocking screen the agent may show; `keys` answer it (tmux key names)."""

    name: str
    pattern: str
    keys: tuple[str, ...]


@runtime_checkable
class AgentAdapter(Protocol):
    name: str
    default_permission_mode: str
    permission_modes: tuple[str, ...]

    def binary(self) -> Path:
        """The agent executable; raises UsageError naming the install command when missing."""
        ...

    def version(self) -> str | None: ...

    def prepare(self, ctx: WorkerContext) -> LaunchSpec:
        """Seed ctx.config_dir (onboarding, trust, hooks, status line) and return the launch spec."""
        ...

    def dialogs(self) -> Sequence[Dialog]: ...

    def ready_marker(self, run: RunFolder, worker: int) -> Path | None:
        """A file that exists once the agent's UI takes input (None: its SessionStart is enough)."""
        ...


@dataclass(frozen=True)
class UpRequest:
    """What `orch up` was asked for."""

    name: str
    workers: int
    agent: str
    workdir: Path
    permission_mode: str | None = None
    model: str | None = None
    replace: bool = False
    offline: bool = False
    """Drive the agents with orch's scripted model server instead of a real model API."""
    prompts: dict[int, str] = field(default_factory=dict)
    worker_models: dict[int, str] = field(default_factory=dict)
    """Per-worker model (worker -> model) where it differs from `model` (a fleet spec's agent groups)."""


class Sandbox(Protocol):
    """Where a run executes. `local` runs tmux here; `docker` runs it in the run's container."""

    def up(self, request: UpRequest) -> RunInfo: ...

    def forward(self, info: RunInfo, args: list[str], stdin: str | None = None, interactive: bool = False) -> int:
        """Run `orch ARGS` where the run's tmux server lives, streaming its output; the exit code."""
        ...

    def capture(self, info: RunInfo, args: list[str]) -> str:
        """Run `orch ARGS` there and return its stdout (OrchError on failure)."""
        ...

    def alive(self, info: RunInfo) -> bool: ...

    def kill(self, info: RunInfo) -> None:
        """Stop and remove what runs the fleet; the run folder stays."""
        ...
