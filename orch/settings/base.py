"""A setting: one ORCH_* environment variable with its default, how it is read, and the parsers.

Nothing is read at import time: `HOME.get()` reads its variable from the environment on each call (so a
test that sets one sees it at once), parses it, and turns a bad value into a one-line SettingError that
names the variable. Unset and empty are the same: the default. `internal` ones are plumbing between orch's
own processes (the host CLI, a run's container, the workers' hooks); the rest are documented in
docs/settings.md's table, which tests/test_settings.py keeps in step with the package.

The variables are declared by job in this package's other modules (`every()` imports them all): user.py
(what a user sets), compose.py (compose.yaml's), internal.py (orch's own processes), and limits.py holds the
defaults of command-line options that have no variable. Kept light (the standard library and orch.errors
only) because the worker-side programs import it: `orch bus post` and the scripted agent.
orch/run/hookwriter.py runs as a bare script and reads its one variable (ORCH_WORKER) itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from orch.errors import SettingError

T = TypeVar("T")

ALL: dict[str, Setting[Any]] = {}
"""Every declared variable by name, in declaration order, of the modules imported so far (all: `every()`)."""

DECLARING = ("user", "compose", "internal")
"""The modules of this package that declare variables."""

_warned: set[str] = set()


class Setting(Generic[T]):
    """One environment variable: its name, its default (as the variable's text), how to read it."""

    def __init__(
        self,
        name: str,
        default: str,
        parse: Callable[[str], T],
        help: str,
        *,
        internal: bool = False,
        shown: str | None = None,
        deprecated: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.default = default
        """The value when unset or empty, written as the variable would be ("": nothing)."""
        self.parse = parse
        """Text -> value; raises ValueError saying what a good value looks like."""
        self.help = help
        self.internal = internal
        self.shown = shown if shown is not None else (f"`{default}`" if default else "unset")
        """The default as docs/settings.md shows it."""
        self.deprecated = deprecated
        """Old names still read, with a warning, when `name` is unset."""
        ALL[name] = self

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"

    def is_set(self, env: Mapping[str, str] | None = None) -> bool:
        """Present in the environment, even if empty (for variables where empty means "none")."""
        env = os.environ if env is None else env
        return any(name in env for name in (self.name, *self.deprecated))

    def get(self, env: Mapping[str, str] | None = None) -> T:
        """The variable's value from `env` (default: os.environ), parsed; SettingError if it is bad."""
        env = os.environ if env is None else env
        name, text = self.name, env.get(self.name, "")
        for old in self.deprecated:
            if not text and env.get(old):
                name, text = old, env[old]
                _warn_deprecated(old, self.name)
        try:
            return self.parse(text or self.default)
        except ValueError as exc:
            default = self.shown.replace("`", "")
            raise SettingError(
                f"environment variable {name}={text!r}: {exc}",
                hint=f"correct {name}, or unset it for the default: {default}",
            ) from None


def _warn_deprecated(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        import logging  # only here: the worker-side programs that import this module never log

        logging.getLogger(__name__).warning("%s is deprecated: set %s instead", old, new)


def every() -> dict[str, Setting[Any]]:
    """Every declared variable by name: each module that declares some is imported first."""
    for module in DECLARING:
        importlib.import_module(f"orch.settings.{module}")
    return ALL
