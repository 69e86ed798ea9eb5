"""The `orch` app in-process (typer's CliRunner): every command group is joined, and a run that does not
exist is one line and exit 2 for every command that takes a run name."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
import typer
from typer.core import TyperGroup

from orch.cli.commands import COMMANDS as TABLE
from orch.cli.commands import OrchGroup, app
from tests.helpers import orch

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

# What `orch --help` lists, in its order (docs/ documents these); `serve-run` is hidden.
COMMANDS = [
    *("up", "spawn", "send", "brief", "restart"),  # orch.cli.fleet (send, brief: orch.cli.talk)
    *("read", "status", "ls", "attach", "kill", "wait"),  # orch.cli.runs
    "watch",  # orch.cli.watch
    *("doctor", "setup", "model-server"),  # orch.cli.tools
    *("run", "demo", "report", "apply"),  # orch.cli.lead
    *("reap", "pull"),  # orch.cli.container
    *("spec", "skill", "image", "bus", "record", "notify"),  # the named groups
]
SUBCOMMANDS = {
    "spec": ["check", "init", "schema"],
    "skill": ["install"],
    "image": ["build"],
    "bus": ["post", "tail"],
    "record": ["export"],
    "notify": ["mute", "unmute", "test"],
}


def _group() -> OrchGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, OrchGroup)
    return group


def _listed(args: list[str]) -> list[str]:
    """The commands `orch ARGS --help` lists, as the group holds them (hidden ones left out), after
    checking that each is shown as the first word of a line of the help."""
    group: TyperGroup = _group()
    for name in args:
        sub = _group().load(name)
        assert isinstance(sub, TyperGroup)
        group = sub
    names = [name for name, command in group.commands.items() if not command.hidden]
    result = orch(*args, "--help")
    assert result.exit_code == 0, result.output
    for name in names:
        assert re.search(rf"^\W*{re.escape(name)}\s", result.output, re.MULTILINE), f"{name} not in help"
    return names


def test_help_lists_every_command_group() -> None:
    assert _listed([]) == COMMANDS
    for group, commands in SUBCOMMANDS.items():
        assert _listed([group]) == commands
    assert "serve-run" in _group().commands


def test_help_table_says_what_each_command_says() -> None:
    """`orch --help` shows COMMANDS' lines without importing the commands: each must be its command's own
    first paragraph of help (or, for a named group, the group's help), and be hidden when it is."""
    group = _group()
    for name, entry in TABLE.items():
        command = group.load(name)
        assert command.name == name
        own = inspect.cleandoc(command.help or "").split("\n\n")[0]
        assert " ".join(own.split()) == entry.help or entry.hidden, name
        assert command.hidden == entry.hidden, name


@pytest.mark.parametrize(
    "args",
    [
        ["status", "ghost"],
        ["read", "ghost", "1"],
        ["send", "ghost", "1", "hi"],
        ["kill", "ghost"],
        ["wait", "ghost"],
        ["brief", "ghost", "1", "-"],
        ["attach", "ghost"],
        ["restart", "ghost", "1"],
        ["watch", "ghost"],
        ["watch", "ghost", "--once"],
        ["watch", "ghost", "--json"],
        ["watch", "ghost", "--web"],
        ["report", "ghost"],
        ["apply", "ghost"],
        ["pull", "ghost"],
        ["run", "--resume", "ghost"],
        ["bus", "tail", "ghost"],
        ["bus", "post", "ghost", "hi"],
        ["record", "export", "ghost", "-o", "out.gz"],
        ["notify", "mute", "ghost"],
        ["notify", "unmute", "ghost"],
        ["notify", "test", "ghost"],
        ["attach", "ghost", "2"],
    ],
    ids=lambda args: " ".join(args[: args.index("ghost")]),
)
def test_unknown_run_is_one_line_and_exit_2(args: list[str]) -> None:
    result = orch(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("orch: error: no run named 'ghost'"), result.output
    assert result.output.count("\n") == 1, result.output


def test_every_command_of_a_module_is_in_the_table() -> None:
    """A command added to a group module but not to COMMANDS would be unreachable: none is."""
    for module in {entry.module for entry in TABLE.values() if entry.group is None}:
        commands = typer.main.get_group(importlib.import_module(module).app).commands
        assert all(TABLE.get(name, None) is not None and TABLE[name].module == module for name in commands), module
