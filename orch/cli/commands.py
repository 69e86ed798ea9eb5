"""The typer app: every `orch` command (orch.cli.main runs it; `orch bus post` may not need it)."""

from __future__ import annotations

import logging
from typing import Any

import typer
from typer.core import TyperGroup

from orch.cli import bus, container, fleet, lead, record, runs, tools, watch
from orch.errors import OrchError, is_environment_error, one_line

log = logging.getLogger(__name__)


class OrchGroup(TyperGroup):
    """Turns any OrchError into one line on stderr and its exit code (2 for bad input); an OS or Docker
    error that escaped a command also becomes one line (exit 1), its traceback at ORCH_LOG_LEVEL=DEBUG."""

    def invoke(self, ctx: Any) -> Any:  # typer vendors click: its Context type is private
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


app = typer.Typer(
    cls=OrchGroup,
    help="Run fleets of coding agents in tmux panes, in a disposable container per run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# The whole command tree, in `orch --help`'s order: each group module's top-level commands, then the
# named groups.
app.add_typer(fleet.app)
app.add_typer(runs.app)
app.add_typer(watch.app)
app.add_typer(tools.app)
app.add_typer(lead.app)
app.add_typer(container.app)
app.add_typer(lead.spec_app, name="spec", help="Fleet specs: check one, or write an example.")
app.add_typer(lead.skill_app, name="skill", help="The Claude Code skill that drives orch.")
app.add_typer(container.image_app, name="image", help="The worker image.")
app.add_typer(bus.app, name="bus", help="The run's append-only message bus.")
app.add_typer(record.app, name="record", help="A run's model recording: export it as one file to replay anywhere.")
