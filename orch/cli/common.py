"""Argument types and small helpers shared by the CLI modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from orch.backends import registry as backends
from orch.backends.base import Placement
from orch.contracts import OrchCommand
from orch.errors import UsageError
from orch.run.files import decode_text, read_text_input
from orch.run.folder import RunFolder

NameArg = Annotated[str, typer.Argument(help="Run name (letters, digits, . _ -; up to 64).", show_default=False)]
WorkerArg = Annotated[int, typer.Argument(help="Worker number, from 1.", show_default=False)]
LocalOpt = Annotated[bool, typer.Option("--local", help="Run tmux on this machine: --backend local.")]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help=f"Where the run lives: {', '.join(backends.names())} (default: {backends.DEFAULT}; inside a run's "
        "container, local). `orch doctor` lists what each needs.",
        show_default=False,
    ),
]

# The options of `orch run` that decide what it checks before it starts: `orch spec check` takes them too.
RunNameOpt = Annotated[str | None, typer.Option("--name", help="Run name (default: the spec's name or file).")]
ReplaceOpt = Annotated[bool, typer.Option("--replace", help="Kill and replace an existing run of this name.")]
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline/--live",
        help="Drive the agents with orch's scripted model (no model API, nothing billed), or the real one.",
    ),
]
ConstraintOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--constraint",
        help="--backend swarm: place the run only on nodes that match, KEY==VALUE or KEY!=VALUE (repeatable), "
        "e.g. node.labels.zone==eu.",
    ),
]
PerNodeOpt = Annotated[
    int | None,
    typer.Option("--per-node", help="--backend swarm: at most this many orch runs on one node when placing this one."),
]


def placement(constraints: list[str] | None, per_node: int | None) -> Placement:
    """`--constraint` and `--per-node` (each backend refuses or takes them: orch.backends.base.Placement)."""
    return Placement(tuple(constraints or ()), per_node)


CopyOpt = Annotated[
    bool,
    typer.Option(
        "--copy",
        help="Container runs: give the workers a disposable copy of the workdir (removed on kill; a swarm run "
        "always has one).",
    ),
]
ReplayOpt = Annotated[
    str | None,
    typer.Option(
        "--replay",
        help="Answer every model request from this recording (a file from `orch record export`, a run name, "
        "or a run folder or a copy of one) made with the same spec: no model API, nothing billed. "
        "Default name: <name>-replay.",
    ),
]
BaseOpt = Annotated[
    str | None,
    typer.Option(
        "--base", help="Specs with writers: start from this revision of the workdir's repository (default HEAD)."
    ),
]
SnapshotOpt = Annotated[
    bool,
    typer.Option(
        "--snapshot",
        help="Specs with writers: start from the workdir as it is (a dirty tree, or a folder outside git), "
        "taken into a base commit of the run's own repository.",
    ),
]
PrepareOpt = Annotated[
    bool,
    typer.Option(
        "--prepare", hidden=True, help="In a container: make the run and stop (compose's lead: the init's step)."
    ),
]


def deprecated(old: str, new: str) -> None:
    """An old spelling that still works (docs/fleet.md: the flags, one meaning each), said once on stderr."""
    typer.echo(f"orch: warning: {old} is an old spelling: use {new}", err=True)


def run_folder(name: str) -> RunFolder:
    run = RunFolder.for_name(name)
    run.info()  # NotFoundError with a hint when there is no such run
    return run


def read_input(source: str) -> str:
    """Text from a file path, or from stdin for `-`."""
    if source == "-":
        return decode_text(sys.stdin.buffer.read(), "standard input")
    return read_text_input(Path(source))


def parse_agents(text: str) -> dict[int, str]:
    """`--agents`, one meaning on every command: `claude:2,codex:1` as worker -> agent (1, 2: claude; 3: codex);
    an agent alone counts one."""
    from orch.agents.registry import get_adapter

    agents: dict[int, str] = {}
    for part in text.split(","):
        agent, _, count = part.strip().partition(":")
        if not agent or not (count or "1").isdigit() or int(count or "1") < 1:
            raise UsageError(
                f"--agents: bad entry {part.strip()!r}", hint="write agent[:count],..., e.g. claude:2,codex:1"
            )
        get_adapter(agent)  # an unknown agent: the registry's error lists what exists
        for _ in range(int(count or "1")):
            agents[len(agents) + 1] = agent
    return agents


def agent_names(text: str) -> list[str]:
    """`--agents` where only which agents matters (installing them, an image carrying them): the agents of
    `parse_agents` once each, in order, or `all`."""
    from orch.agents.registry import ALL_AGENTS

    if text.strip() == ALL_AGENTS:
        return [ALL_AGENTS]
    return list(dict.fromkeys(parse_agents(text).values()))


def parse_workers(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        return [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"bad worker list {spec!r}", hint="use numbers separated by commas, e.g. 1,3") from None


def at_fleet(run: RunFolder, command: OrchCommand) -> NoReturn:
    """Run the command where the run's tmux server lives (its container, or this process) and exit with its code."""
    info = run.info()
    raise typer.Exit(backends.sandbox_for(info).forward(info, command))
