"""The typer app: every `orch` command (orch.cli.main runs it; `orch bus post` may not need it).

Each command's module is imported only when that command runs: importing all of them (tmux, docker, the
lead, the views) cost about 0.9 s of CPU per `orch` process, and tests and workers start many. `orch --help`
lists the commands from COMMANDS without importing any of them (tests/cli/test_app.py checks each one-line
help there against its command's own).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Annotated, Any, NamedTuple

import typer
from typer import _click as click  # typer's own copy of click (it no longer depends on click)
from typer.core import TyperCommand, TyperGroup

from orch.errors import OrchError, is_environment_error, one_line

log = logging.getLogger(__name__)


class Entry(NamedTuple):
    """Where a command lives: `module`'s typer app `group` (None: its top-level `app`, whose command
    `name` is), and the one line `orch --help` shows for it."""

    module: str
    group: str | None
    help: str
    hidden: bool = False


_FLEET, _TALK, _RUNS = "orch.cli.fleet", "orch.cli.talk", "orch.cli.runs"
_LEAD, _CONTAINER = "orch.cli.lead", "orch.cli.container"

# The whole command tree, in `orch --help`'s order: each group module's top-level commands, then the
# named groups.
COMMANDS: dict[str, Entry] = {
    "up": Entry(
        _FLEET, None, "Start a run: a container (--local: tmux here; --backend swarm: a Swarm task), an agent per pane."
    ),
    "spawn": Entry(_FLEET, None, "`orch up` as the reference harness spells it: spawn NAME N [WORKDIR]."),
    "send": Entry(
        _TALK, None, "Deliver a message (multi-line included) to a worker as one submission, and confirm it."
    ),
    "brief": Entry(_TALK, None, "Write agent-N.task.md and point the worker at it."),
    "restart": Entry(
        _FLEET,
        None,
        "Restart a worker's agent in its pane, resuming its session (what the controller does after a crash).",
    ),
    "read": Entry(
        _RUNS, None, "Print a worker's screen, or once the run is stopped its terminal as it was (its log rendered)."
    ),
    "status": Entry(
        _RUNS,
        None,
        "Per run: its outcome, end and cost; per worker: state (from hooks), jobs and what each came to, cost, last "
        "bus line. A stopped run reads from its folder.",
    ),
    "ls": Entry(_RUNS, None, "List runs: each one's status, outcome, end and cost."),
    "attach": Entry(_RUNS, None, "Attach to the run's tmux (read-only unless --write)."),
    "kill": Entry(_RUNS, None, "Stop a run (its folder, transcripts included, stays)."),
    "wait": Entry(
        _RUNS, None, "Return as soon as the workers' done flags exist; exit 3 on timeout naming who is missing."
    ),
    "watch": Entry(
        "orch.cli.watch", None, "A live view of a run: workers, verification matrix, progress, commentary and bus."
    ),
    "doctor": Entry(
        "orch.cli.tools",
        None,
        "Check each backend (tmux, bubblewrap, the Docker engine...), agent CLIs and credentials; print the fix for "
        "what is missing.",
    ),
    "setup": Entry(
        "orch.cli.tools",
        None,
        "Install the agent CLIs a job needs into orch's cache ($XDG_CACHE_HOME/orch), checking this machine first.",
    ),
    "model-server": Entry(
        "orch.cli.tools", None, "Serve the scripted Messages API (offline demo, tests, dry runs) until interrupted."
    ),
    "run": Entry(
        _LEAD, None, "Run a fleet spec to completion: spawn, brief, monitor, verify findings, report, tear down."
    ),
    "demo": Entry(
        _LEAD,
        None,
        "A 3-worker find-and-verify fleet over a small bundled library: one finding CONFIRMED, one REFUTED.",
    ),
    "report": Entry(
        _LEAD,
        None,
        "Rewrite and print a run's report (verification matrix, where the files are); exit with the run's code.",
    ),
    "apply": Entry(
        _LEAD,
        None,
        "Fetch a run's landed changes into this repository as a new branch (the working tree, the index and the"
        " current branch are left alone; an existing branch is never overwritten).",
    ),
    "serve-run": Entry(_CONTAINER, None, "Inside a run's container: launch the run's workers.", hidden=True),
    "reap": Entry(
        _CONTAINER,
        None,
        "Remove containers, volumes and workspace copies left by crashed or stopped runs (by label).",
    ),
    "pull": Entry(_CONTAINER, None, "Copy a run folder back from a remote Docker engine into the local one."),
    "spec": Entry("orch.cli.spec", "app", "Fleet specs: check one as `orch run` would, write an example, the schema."),
    "skill": Entry(_LEAD, "skill_app", "The Claude Code skill that drives orch."),
    "image": Entry(_CONTAINER, "image_app", "The worker image."),
    "bus": Entry("orch.cli.bus.app", "app", "The run's append-only message bus."),
    "record": Entry("orch.cli.record", "app", "A run's model recording: export it as one file to replay anywhere."),
    "notify": Entry("orch.cli.notify", "app", "A run's notifications (docs/notify.md): mute, unmute, test."),
}


def load_command(name: str) -> Any:  # a click command (typer vendors click: its types are private)
    """Import the module of command `name` and build its click command (its siblings in that module are not
    built: typer resolves each parameter's annotation and help as it builds a command)."""
    entry = COMMANDS[name]
    module = importlib.import_module(entry.module)
    if entry.group is None:
        app: typer.Typer = module.app
        for info in app.registered_commands:
            if info.callback is not None and (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
                return typer.main.get_command_from_info(
                    info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
                )
        raise LookupError(f"{entry.module} has no command {name}")
    group = typer.main.get_group(getattr(module, entry.group))
    group.name, group.help = name, entry.help
    return group


class OrchGroup(TyperGroup):
    """The root group. It holds a placeholder per command (enough for `orch --help` and click's "did you
    mean") and swaps in the real command, importing its module, only when that command is run.

    It turns any OrchError into one line on stderr and its exit code (2 for bad input); an OS or Docker
    error that escaped a command also becomes one line (exit 1), its traceback at ORCH_LOG_LEVEL=DEBUG."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, entry in COMMANDS.items():
            self.commands[name] = TyperCommand(name, help=entry.help, hidden=entry.hidden)
        self._loaded: set[str] = set()

    def load(self, name: str) -> Any:
        """The real command `name` (imported once)."""
        if name not in self._loaded:
            self.commands[name] = load_command(name)
            self._loaded.add(name)
        return self.commands[name]

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and name in COMMANDS:
            command = self.load(name)
        return name, command, rest

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's usage errors (a missing argument, an unknown option, a bad value) as orch says every error:
        one line on stderr, `orch: error: what (hint: ...)`, and exit 2; never Click's box of usage lines."""
        given = (args, prog_name, complete_var)
        if not standalone_mode:
            return super().main(*given, standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
        try:
            code = super().main(*given, standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `orch spec`: its help, as asked
            typer.echo(exc.format_message(), err=True)
            raise SystemExit(exc.exit_code) from None
        except click.exceptions.UsageError as exc:
            typer.echo(f"orch: error: {usage_line(exc)}", err=True)
            raise SystemExit(exc.exit_code) from None
        except click.exceptions.ClickException as exc:
            typer.echo(f"orch: error: {' '.join(exc.format_message().split())}", err=True)
            raise SystemExit(exc.exit_code) from None
        except typer.Abort:
            raise SystemExit(130) from None
        raise SystemExit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OrchError as exc:
            typer.echo(f"orch: error: {exc.one_line()}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            if not is_environment_error(exc):
                raise
            log.debug("unexpected error", exc_info=True)
            typer.echo(f"orch: error: {one_line(exc)}", err=True)
            raise typer.Exit(1) from None


def usage_line(exc: click.exceptions.UsageError) -> str:
    """A usage error in one line: the command, what is wrong, and where its help is."""
    path = exc.ctx.command_path.split(" ")[1:] if exc.ctx is not None else []  # under any program name: `orch`
    command = " ".join(["orch", *path])
    what = " ".join(exc.format_message().split()).rstrip(".")
    lists = "its commands" if exc.ctx is not None and isinstance(exc.ctx.command, TyperGroup) else "its arguments"
    return f"{command}: {what[:1].lower()}{what[1:]} (hint: `{command} --help` lists {lists})"


def _version(value: bool) -> None:
    if value:
        from orch import __version__

        typer.echo(f"orch {__version__}")
        raise typer.Exit(0)


app = typer.Typer(
    cls=OrchGroup,
    help="Run fleets of coding agents in tmux panes, in a disposable container per run.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print orch's version and exit.")
    ] = False,
) -> None:
    # A callback makes typer build the root as a group although no command is registered here; typer adds
    # --install-completion and --show-completion (bash, zsh, fish) beside --version.
    pass
