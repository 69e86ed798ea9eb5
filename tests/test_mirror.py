"""Tests mirror the packages (CONTRIBUTING.md): every module in orch/ with logic, over LIMIT lines of code,
has its test module at the mirrored path, `tests/<pkg>/test_<module>.py` for `orch/<pkg>/<module>.py` (or
`test_<module>_<aspect>.py`, one aspect of it: tests/run/test_folder_names.py).

A module may go without one only with a line in EXCUSED saying why (pure data, thin glue whose behaviour
another named test shows). UNMIRRORED is the debt left when this check was written: it may only shrink, and a
module in it that gains its test module fails the check until its line goes."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure  # reads sources only

REPO = Path(__file__).resolve().parents[1]
ORCH = REPO / "orch"
LIMIT = 60  # lines of code: no blank line, comment or docstring

# orch/<path> -> why it has no test module of its own.
EXCUSED: dict[str, str] = {
    "contracts.py": "the architecture's Protocols and dataclasses: tests/agents/test_contract.py runs them",
    "run/events.py": "the Event names, data: every producer's and consumer's test uses the members",
    "lead/sarifmodel.py": "the SARIF subset as pydantic models, data: tests/lead/test_sarif.py checks them",
    "cli/container.py": "typer glue over orch/container: tests/cli/test_commands.py and the docker tier",
    "cli/fleet.py": "typer glue over orch/fleet: tests/cli/test_commands.py, tests/cli/test_bad_input.py",
    "cli/lead.py": "typer glue over orch/lead: tests/cli/test_bad_input.py, tests/lead/test_scripted.py",
    "cli/runs.py": "typer glue over the sandboxes: tests/cli/test_commands.py",
    "cli/watch.py": "typer glue over orch/view: tests/view/test_snapshot.py, tests/view/test_tui.py",
    "cli/doctor.py": "typer glue over each adapter's doctor: tests/agents/test_contract.py, tests/cli",
    "lead/controller.py": "the loop: tests/lead/test_scripted.py runs it end to end in the fast tier",
    "lead/desk.py": "what the controller's parts share: tests/lead/test_scripted.py",
    "lead/recovery.py": "nudges and restarts as effects (their decisions: test_decisions.py): test_scripted.py",
    "lead/writing.py": "the changes flow, owned by another engineer now: tests/lead/test_changes_flow.py",
}

# orch/<path>: modules with logic and no mirrored test module yet. Only ever remove a line.
UNMIRRORED: set[str] = set()


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


def modules() -> list[str]:
    """orch/'s modules with logic, relative to orch/ (package markers, entry points and orch/data aside)."""
    out = []
    for path in sorted(ORCH.rglob("*.py")):
        relative = path.relative_to(ORCH)
        if relative.parts[0] == "data" or path.name in ("__init__.py", "__main__.py"):
            continue
        if code_lines(path) > LIMIT:
            out.append(relative.as_posix())
    return out


def mirrored(module: str) -> bool:
    relative = Path(module)
    folder = REPO / "tests" / relative.parent
    return (folder / f"test_{relative.name}").is_file() or any(folder.glob(f"test_{relative.stem}_*.py"))


def test_every_module_with_logic_has_its_test_module() -> None:
    missing = [m for m in modules() if not mirrored(m) and m not in EXCUSED and m not in UNMIRRORED]
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
