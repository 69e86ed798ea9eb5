"""One exception root for orch. Only the CLI edge turns these into exit codes and one-line messages."""

from __future__ import annotations

from orch import escape
from orch.exitcodes import Exit


class OrchError(Exception):
    """Something orch could not do. `hint` says how to fix it, when we know."""

    exit_code: int = Exit.ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and hint on one line, shown as they are (a path name from a worker's change, say, can
        carry line breaks and terminal escapes: orch.escape.one_line)."""
        text = escape.one_line(self.message)
        return f"{text} (hint: {escape.one_line(self.hint)})" if self.hint else text


class UsageError(OrchError):
    """Bad input or a missing prerequisite: a bad name, a missing file, a tool not installed."""

    exit_code = Exit.BAD_INPUT


class SettingError(UsageError):
    """An ORCH_* environment variable with a value orch cannot use (orch.settings)."""


class NotFoundError(UsageError):
    """A run, worker or file that does not exist."""


class DeliveryError(OrchError):
    """A message could not be delivered to a worker pane."""


class WaitTimeoutError(OrchError):
    """A wait ran past its deadline."""

    exit_code = Exit.NOT_FINISHED


class SandboxError(OrchError):
    """The sandbox (tmux server, container, engine) failed underneath us."""


class NoAnswerError(SandboxError):
    """The sandbox is there but did not answer in time (a tmux server stopped or hung): not gone, so nothing that
    follows from its end (a relaunch, a run taken for over) may follow."""


# Failures of the machine rather than of orch (the Docker engine, its HTTP transport; OSError besides):
# matched by module so that commands which never touch Docker do not pay for importing its SDK.
ENVIRONMENT_ERROR_MODULES = ("docker.", "requests.", "urllib3.")


def is_environment_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or type(exc).__module__.startswith(ENVIRONMENT_ERROR_MODULES)


def one_line(exc: Exception) -> str:
    """An error as one line: an OrchError's message and hint, else its type and text."""
    if isinstance(exc, OrchError):
        return exc.one_line()
    return f"{type(exc).__name__}: {escape.one_line(exc) or 'no details'}"  # "Is a directory" alone says little
