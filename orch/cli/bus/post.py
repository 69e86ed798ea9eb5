"""`orch bus post`, shared by the typer command and a fast path that runs before typer is imported.

Workers post many times per task and each post is a new process: importing typer, tmux and docker cost
most of its time. The fast path parses only the command lines it is sure click would parse the same
way (`NAME [--as N] TEXT...`, options anywhere, `--` ending them) and leaves every other one (help,
unknown options, missing arguments, a --as that is not a plain number) to typer, so that usage
errors keep typer's own messages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from orch.backends import registry as backends
from orch.errors import OrchError, UsageError
from orch.run import bus
from orch.run.files import decode_text
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from orch.run.workerpost import parse

STDIN = "-"


def post(name: str, sender: int | None, words: Sequence[str]) -> int:
    """Post `words` (joined; a lone `-`: standard input) as worker `sender` (None: the lead), where the run
    folder lives (here, or on its remote engine); the exit code."""
    run = RunFolder.for_name(name)
    info = run.info()  # NotFoundError with a hint when there is no such run
    if sender is not None:
        run.check_worker(sender)
    from_stdin = list(words) == [STDIN]  # as `orch send --file -`; `-` among other words is text
    message = _read_stdin() if from_stdin else " ".join(words)
    if not message.strip():
        raise UsageError("empty bus message", hint="give the text to post")
    as_ = ["--as", str(sender)] if sender is not None else []
    # Stdin's text goes on as stdin: as an argument, a message that is just `-` would be read as stdin there.
    args = ["bus", "post", name, *as_, *([STDIN] if from_stdin else ["--", message])]

    def here() -> None:
        # Under strict isolation a worker cannot write bus.md: it posts through the controller, which stamps
        # who sent it. The run's own uid (the lead, the host user) writes it as before.
        if info.isolation is Isolation.STRICT and not os.access(run.bus, os.W_OK):
            bus.post_through_controller(run, sender, message)
        else:
            bus.post(run, sender, message)

    if backends.folder_is_here(info):  # as at_folder decides; a worker's every post: no contracts loaded
        here()
        return 0
    from orch.contracts import OrchCommand

    return backends.at_folder(info, OrchCommand(args, here, stdin=message if from_stdin else None))


def _read_stdin() -> str:
    # The trailing newline of `echo ... |` would show as a literal \n on the one-line bus.
    return decode_text(sys.stdin.buffer.read(), "standard input").rstrip("\r\n")


def fast_main(args: Sequence[str]) -> int | None:
    """Run `orch bus post ARGS` without typer: the exit code, or None to let typer handle ARGS."""
    parsed = parse(args)
    if parsed is None:
        return None
    try:
        code = post(*parsed)
    except OrchError as exc:
        print(f"orch: error: {exc.one_line()}", file=sys.stderr)  # as orch.cli.commands.OrchGroup says it
        return exc.exit_code
    return code
