"""aider's questions as orch permission requests: aider runs in its own interpreter with its one question
function (`aider.io.InputOutput.confirm_ask` of the pinned aider) replaced, so every question it asks is answered
here, in the process, from what aider's own code asked: never from its screen, where the model's text
can print anything (a fake "Run shell command?" line is just text to this).

    AIDER_PYTHON -I confirm.py HOOKWRITER STATE_FILE POLICY_FILE MODE [aider's arguments...]

(-I: the script's folder, orch/agents/aider/, must not shadow the `aider` package.)

- a shell block ("Run shell command(s)?", the only question aider asks with an explicit yes): a
  command matching the deny list (DENY) is refused in every mode; in mode `build` the rest run (a
  PreToolUse Bash event); in mode `ask` each is a PermissionRequest (tool Bash, the command as input)
  answered from POLICY_FILE (the run's policy, as the other agents' hooks answer: orch.run.hookwriter).
  With no answer there (no policy, or `report`), aider's own question stays on screen for a human
  (`orch attach NAME --write`) and the worker shows as waiting for permission.
- the questions an unattended worker needs answered yes (YES: create or edit a file, add a mentioned
  file or a command's output to the chat, fix lint or test errors): yes, in every mode;
- anything else (install a package, add a URL, make a git repo...): no. Nothing is downloaded at run time.

Its project files are not read either: aider has no switch to skip the `.aider.conf.yml`, `.env`,
`.aider.model.settings.yml` and `.aider.model.metadata.json` of its folder and git root (a `.aider.conf.yml`
can `load:` a file of `/run` commands at start), so `confine` makes aider look for them in the worker's own
HOME alone (and in a file named on its command line). An aider whose functions are not the ones this
replaces is refused at start, in one line.

Each answer is printed and logged in aider's chat history, as aider logs a typed one. Plain script,
standard library only (plus aider, imported in main): it runs with aider's interpreter, not orch's.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

MODES = ("build", "ask")
DENY = ("rm -rf*", "sudo*", "git push*")
"""Commands refused in every mode (best effort, as every agent's deny list: the container is the boundary)."""
SHELL = ("Run shell command?", "Run shell commands?")
YES = (
    "Create new file?",
    "Allow edits to file that has not been added to the chat?",
    "Add file to the chat?",
    "Add command output to the chat?",
    "Attempt to fix lint errors?",
    "Attempt to fix test errors?",
    "Try to proceed anyway?",
)
SIGNATURE = ("self", "question", "default", "subject", "explicit_yes_required", "group", "allow_never")
"""confirm_ask's parameters in the pinned aider: another aider is refused at start rather than half-answered."""
CONFIG_SEARCH = {
    "get_parser": ("default_config_files", "git_root"),
    "generate_search_path_list": ("default_file", "git_root", "command_line_file"),
}
"""aider.main's functions that decide where it reads its config and dotenv files, with the pinned aider's
parameters (`confine` replaces them)."""
SEPARATORS = re.compile(r"&&|\|\||[;&|\n]")


def denied(commands: str) -> str | None:
    """The first command of a shell block the deny list refuses (each line, and each part of a chain)."""
    for part in SEPARATORS.split(commands):
        part = part.strip()
        if part and not part.startswith("#") and any(fnmatch.fnmatchcase(part, p) for p in DENY):
            return part
    return None


def load_hookwriter(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("orch_hookwriter", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"orch: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Answerer:
    """Answers aider's questions for one worker: events into STATE_FILE, the run's policy from POLICY_FILE."""

    def __init__(self, hookwriter: ModuleType, state: str, policy: str, mode: str) -> None:
        self.hookwriter, self.state, self.policy, self.mode = hookwriter, state, policy, mode

    def event(self, name: str, commands: str, **extra: object) -> None:
        payload = {"hook_event_name": name, "tool_name": "Bash", "tool_input": {"command": commands}, **extra}
        try:
            self.hookwriter.append_event(self.state, payload)
        except OSError as exc:  # never stop aider because the run folder went away
            print(f"orch: {exc}", file=sys.stderr)

    def shell(self, io: Any, commands: str, ask_human: Callable[[], bool]) -> bool:
        """Whether aider runs this shell block."""
        refused = denied(commands)
        if refused is not None:
            self.event("PermissionRequest", commands, orch_decision="deny", reason=f"deny list: {refused}")
            io.tool_error(f"orch: refused by the deny list ({', '.join(DENY)}): {refused}")
            return False
        if self.mode == "build":
            self.event("PreToolUse", commands)
            return True
        decision = self.hookwriter.permission_answer(self.policy)
        if decision is not None and decision.get("behavior") == "allow":
            self.event("PermissionRequest", commands, orch_decision="allow")
            return True
        if decision is not None:
            self.event("PermissionRequest", commands, orch_decision="deny")
            io.tool_error(f"orch: {decision.get('message') or 'denied by the run policy'}")
            return False
        self.event("PermissionRequest", commands)  # the question stays on screen: a human answers it
        allowed = ask_human()
        if allowed:
            self.event("PreToolUse", commands)
        else:
            self.event("PostToolUse", commands, error="refused at the prompt")
        return allowed


def install(answerer: Answerer, io_class: Any) -> None:
    """Replace io_class.confirm_ask with one that asks `answerer` (after checking its signature)."""
    original = io_class.confirm_ask
    params = tuple(inspect.signature(original).parameters)
    if params != SIGNATURE:
        pinned = "use the aider orch pins (orch/versions.py)"
        raise SystemExit(f"orch: aider's confirm_ask{params} is not the one orch answers: {pinned}")

    def confirm_ask(
        self: Any,
        question: str,
        default: str = "y",
        subject: str | None = None,
        explicit_yes_required: bool = False,
        group: Any = None,
        allow_never: bool = False,
    ) -> bool:
        asked = question.strip()
        if asked in SHELL and explicit_yes_required:

            def ask_human() -> bool:
                # aider's own question, on screen; its bell (the --notifications-command) must not
                # report the worker idle while it waits: that is after the turn, as usual.
                bell, self.bell_on_next_input = self.bell_on_next_input, False
                try:
                    return bool(original(self, question, default, subject, explicit_yes_required, group, allow_never))
                finally:
                    self.bell_on_next_input = bell

            return answerer.shell(self, subject or "", ask_human)
        answer = asked in YES
        shown = f" {subject}" if subject and "\n" not in subject else ""
        self.tool_output(f"{asked}{shown} {'yes' if answer else 'no'} (orch)")
        return answer

    io_class.confirm_ask = confirm_ask


def confine(aider_main: ModuleType, home: str) -> None:
    """Make aider read its config, .env and model files from `home` (and its command line) alone, never from its
    folder or git root, where a worker's change can put them."""
    originals = {name: getattr(aider_main, name, None) for name in CONFIG_SEARCH}
    for name, expected in CONFIG_SEARCH.items():
        params = tuple(inspect.signature(originals[name] or (lambda: None)).parameters)
        if params != expected:
            raise SystemExit(f"orch: aider's {name}{params} is not the one orch confines: use the aider orch pins")
    get_parser, search = originals["get_parser"], originals["generate_search_path_list"]
    assert get_parser is not None and search is not None
    mine = os.path.join(os.path.realpath(home), "")

    def own(files: list[str]) -> list[str]:
        return [f for f in files if os.path.realpath(os.path.expanduser(f)).startswith(mine)]

    def confined_parser(default_config_files: list[str], git_root: str | None) -> Any:
        return get_parser(own(default_config_files), git_root)

    def confined_search(default_file: str, git_root: str | None, command_line_file: str | None) -> list[str]:
        files: list[str] = search(default_file, None, None)
        named = [str(command_line_file)] if command_line_file else []
        return own(files) + [f for f in named if f not in files]

    for name, replacement in (("get_parser", confined_parser), ("generate_search_path_list", confined_search)):
        setattr(aider_main, name, replacement)


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[4] not in MODES:
        print(__doc__, file=sys.stderr)
        return 2
    hookwriter, state, policy, mode = argv[1:5]
    answerer = Answerer(load_hookwriter(hookwriter), state, policy, mode)
    install(answerer, importlib.import_module("aider.io").InputOutput)
    sys.argv = ["aider", *argv[5:]]
    aider_main = importlib.import_module("aider.main")
    confine(aider_main, os.path.expanduser("~"))
    return int(aider_main.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
