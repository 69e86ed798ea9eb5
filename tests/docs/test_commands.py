"""Every `orch ...` command line the docs show exists: its command (and subcommand) and each option it names,
checked against the typer app itself. Lines come from the code blocks (a console block's `$ orch` lines) and
the inline code of README.md, docs/, SECURITY.md, CONTRIBUTING.md and the skill a lead agent reads."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from orch.cli.commands import OrchGroup, app
from tests.docs.pages import FENCE, REPO, blocks, pages

pytestmark = pytest.mark.pure  # reads files and the app only

SKILL = REPO / "orch" / "data" / "skill" / "SKILL.md"
COMMAND = re.compile(r"(?:^|(?<=[\s`(]))orch (?=[a-z-])")
FAST_PATHS = {"offline-verdict"}
"""Commands orch.cli.main runs before the typer app (the offline verifier's last step)."""
STOP = {"|", "||", "&&", ";", ">", ">>", "<", "2>&1", "&", "#"}


def command_lines(page: Path) -> list[tuple[int, str]]:
    """(line, text) of each `orch ...` the page shows: in code blocks, and in inline code."""
    text = page.read_text(encoding="utf-8")
    found: list[tuple[int, str]] = []
    for block in blocks(page):
        if block.lang == "json":
            continue
        for n, line in enumerate(block.body.splitlines(), block.line + 1):
            line = line.strip().removeprefix("$ ").removeprefix("- ")
            if line.startswith("orch ") or re.match(r"^([A-Z_]+=\S+ )+orch ", line):
                found.append((n, line))
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in re.finditer(r"`([^`]+)`", prose):
        code = " ".join(match.group(1).split())  # inline code may break across lines
        start = COMMAND.search(code)
        if code.startswith(("Build ", "orch: ", "orch agent-")):  # a screen, orch's output, a commit's author
            continue
        if start is not None and not code.startswith("orch/"):
            found.append((prose.count("\n", 0, match.start()) + 1, code[start.start() :]))
    return found


def words(line: str) -> list[str]:
    """The line's words up to a shell operator or a comment, placeholders' brackets dropped."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unclosed quote in prose: the plain words
        tokens = line.split()
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens.pop(0)  # VAR=value orch ...
    out = []
    for token in tokens[1:]:
        if token in STOP or token.startswith((">", "<", "|")):
            break
        out.append(token.strip("[]").rstrip(",."))
    return out


def check(line: str) -> str | None:
    """None when the line's command and options exist, else what does not."""
    root = typer.main.get_command(app)
    assert isinstance(root, OrchGroup)
    command: Any = root
    args = words(line)
    path = ["orch"]
    while args and hasattr(command, "commands") and not args[0].startswith("-"):
        name = args.pop(0)
        if name.isupper() or name in ("...", "COMMAND"):  # `orch COMMAND --help`: a placeholder
            return None
        if command is root and name in FAST_PATHS:
            return None
        if name not in command.commands:
            return f"{' '.join(path)} has no command {name!r}"
        command = root.load(name) if command is root else command.commands[name]
        path.append(name)
    known = {"--help"}
    for param in getattr(command, "params", []):
        known.update(getattr(param, "opts", []), getattr(param, "secondary_opts", []))
    for arg in args:
        if arg.startswith("-") and arg != "-" and arg.split("=", 1)[0] not in known:
            return f"{' '.join(path)} has no option {arg.split('=', 1)[0]}"
    return None


DOCS = [*pages(), SKILL]


def test_the_extraction_finds_commands_in_blocks_and_prose() -> None:
    found = [text for _, text in command_lines(REPO / "README.md")]
    assert "orch spec init fleet.yaml             # a commented example: set the tasks and the budget" in found
    assert any(text.startswith("orch run fleet.yaml --copy") for text in found)
    assert words("ORCH_X=1 orch bus tail audit -f | head  # live") == ["bus", "tail", "audit", "-f"]
    assert check("orch up audit --no-such-flag") == "orch up has no option --no-such-flag"
    assert check("orch upp audit") == "orch has no command 'upp'"
    assert check("orch image build [--base-image IMAGE] [--agents claude,codex]") is None


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_orch_command_the_docs_show_exists(page: Path) -> None:
    wrong = [
        f"{page.relative_to(REPO)}:{n}: {text}\n    {why}" for n, text in command_lines(page) if (why := check(text))
    ]
    assert not wrong, "\n".join(wrong)
