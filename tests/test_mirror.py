"""Tests mirror the packages (CONTRIBUTING.md): every module in orch/ with logic, over LIMIT lines of code,
has its test module at the mirrored path, `tests/<pkg>/test_<module>.py` for `orch/<pkg>/<module>.py` (or
`test_<module>_<aspect>.py`, one aspect of it: tests/run/test_folder_names.py).

A module may go without one only with a line in EXCUSED saying why (pure data, thin glue whose behaviour
another named test shows). UNMIRRORED is the debt left when this check was written: it may only shrink, and a
module in it that gains its test module fails the check until its line goes."""

from __future__ import annotations

import functools
import io
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # reads sources only

REPO = Path(__file__).resolve().parents[1]
ORCH = REPO / "orch"
LIMIT = 60  # lines of code: no blank line, comment or docstring

# orch/<path> -> why it has no test module of its own: data, or glue whose behaviour the named tests show.
EXCUSED: dict[str, str] = {
    "contracts.py": "the architecture's Protocols and dataclasses: tests/agents/test_contract.py runs them",
    "settings/compose.py": "compose.yaml's variables, data: tests/test_settings.py, tests/container/test_init.py",
    "run/events.py": "the Event names, data: every producer's and consumer's test uses the members",
    "jobs/state.py": "the controller's books as pydantic records, data: tests/lead/test_decisions.py and others",
    "report/sarif/model.py": "the SARIF subset as pydantic models, data: tests/report/sarif/test_render.py checks it",
    "cli/container.py": "typer glue over orch/container: tests/cli/test_commands.py and the docker tier",
    "cli/fleet.py": "typer glue over orch/fleet: tests/cli/test_commands.py, tests/cli/test_bad_input.py",
    "cli/lead.py": "typer glue over orch/lead: tests/cli/test_bad_input.py, tests/scenarios/test_scripted.py",
    "cli/runs.py": "typer glue over the sandboxes: tests/cli/test_commands.py",
    "cli/watch.py": "typer glue over orch/view: tests/view/test_plain.py, tests/view/test_tui.py",
    "cli/common.py": "the argument and option types the groups share, data; its helpers: tests/cli/test_bad_input.py",
    "lead/controller.py": "the loop: tests/scenarios/test_scripted.py runs it end to end in the fast tier",
    "lead/base.py": "what the controller's parts share: tests/lead/test_dispatch.py, test_acceptance.py use it",
    "lead/recovery.py": "nudges and restarts as effects (their decisions: test_decisions.py): test_scripted.py",
    "backends/docker/sandbox.py": "the Docker Sandbox: only an engine shows it, the tests/scenarios/*_docker.py",
    "agents/aider/watch.py": "aider's stand-in for hooks: only the real aider shows it: tests/agents/aider/",
}

# orch/<path> -> where its tests are now: modules with logic and no mirrored test module yet (the debt when
# this check was written). Only ever remove a line: move those tests, or write them, at the mirrored path.
UNMIRRORED: dict[str, str] = {
    "agents/scripted/tui.py": "every fast fleet test runs it: tests/fleet/test_launch.py, test_tmux.py",
    "agents/scripted/turns.py": "tests/scenarios/test_scripted.py (orch run in process)",
    "gateway/recording/archive.py": "tests/recording/test_transfer.py (every corruption case, through the lead)",
    "gateway/proxy.py": "tests/gateway/test_flow.py, test_faults.py (a real gateway)",
    "gateway/server.py": "tests/gateway/test_flow.py, test_faults.py, test_process.py",
    "gateway/writer.py": "tests/gateway/test_flow.py, test_books.py",
    "lead/changes/gitcmd.py": "tests/lead/changes/test_repo.py, test_take.py",
    "lead/changes/start.py": "tests/lead/changes/test_cli.py",
    "offline/apis/anthropic.py": "tests/offline/test_modelserver.py, tests/gateway/apis/test_registry.py",
    "offline/apis/openai_chat.py": "tests/gateway/apis/test_openai_chat.py, tests/gateway/apis/test_registry.py",
    "view/widgets.py": "tests/view/test_tui.py",
}
# Modules another engineer gives their test module this round: neither required nor listed until it lands.
ELSEWHERE: set[str] = set()


def code_lines(path: Path) -> int:
    """Lines holding code: blank lines, comments and docstrings (a string that is a whole statement) aside."""
    lines: set[int] = set()
    starts = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT}
    previous: int | None = None
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        skip = {tokenize.COMMENT, tokenize.ENDMARKER, *starts}
        if token.type in skip:
            previous = token.type if token.type in starts else previous
            continue
        if not (token.type == tokenize.STRING and (previous is None or previous in starts)):
            lines.update(range(token.start[0], token.end[0] + 1))
        previous = token.type
    return len(lines)


@functools.cache
def modules() -> tuple[str, ...]:
    """orch/'s modules with logic, relative to orch/ (package markers, entry points and orch/data aside)."""
    out = []
    for path in sorted(ORCH.rglob("*.py")):
        relative = path.relative_to(ORCH)
        if relative.parts[0] == "data" or path.name in ("__init__.py", "__main__.py"):
            continue
        if code_lines(path) > LIMIT:
            out.append(relative.as_posix())
    return tuple(out)


def mirrored(module: str) -> bool:
    relative = Path(module)
    folder = REPO / "tests" / relative.parent
    return (folder / f"test_{relative.name}").is_file() or any(folder.glob(f"test_{relative.stem}_*.py"))


def test_every_module_with_logic_has_its_test_module() -> None:
    listed = {*EXCUSED, *UNMIRRORED, *ELSEWHERE}
    missing = [m for m in modules() if not mirrored(m) and m not in listed]
    assert not missing, "give these a test module at the mirrored path (tests/<pkg>/test_<module>.py):\n" + "\n".join(
        f"orch/{m}" for m in missing
    )


def test_the_lists_are_true() -> None:
    """A module excused or owed must still be one with logic and still lack its tests: the lists stay short."""
    wanted = set(modules())
    stale = [f"{m}: not a module over {LIMIT} lines of code" for m in sorted({*EXCUSED, *UNMIRRORED} - wanted)]
    stale += [f"{m}: has its test module now, drop its line" for m in sorted({*EXCUSED, *UNMIRRORED}) if mirrored(m)]
    assert not stale, "\n".join(stale)


def test_code_lines_leaves_out_docstrings_comments_and_blank_lines(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('"""A docstring\nof two lines."""\n\n# a comment\nX = "a string"\n\n\ndef f() -> str:\n'
                      '    """Its docstring."""\n    return """a\nvalue"""\n')  # fmt: skip
    assert code_lines(source) == 4  # X, def, and the return's two lines
