"""Every example output the docs show is produced by a test: each `console` block is marked `<!-- example: ID
-->`, and a test names its ID (`marked("example", ID)`) and compares what orch prints with it. The troubleshooting
examples are made here: in a fresh git repository, what the page says is missing, missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import REPO, all_blocks, console, marked
from tests.helpers import orch, stand_in_binaries
from tests.lead.changes.gitfix import ugit, user_repo

TESTS = REPO / "tests"


def test_every_console_example_is_marked_and_made_by_a_test() -> None:
    examples = [b for b in all_blocks() if b.lang == "console"]
    unmarked = [b.where for b in examples if b.mark is None or b.mark[0] != "example"]
    assert not unmarked, "mark these <!-- example: ID --> and produce them in a test: " + ", ".join(unmarked)
    sources = "".join(p.read_text() for p in TESTS.rglob("test_*.py"))
    made = [b for b in examples if b.mark and f'"{b.mark[1]}"' in sources]  # the test that compares it names it
    assert [b.where for b in examples if b not in made] == []


def _project(tmp_path: Path) -> Path:
    """A git repository with the example spec committed, as `orch spec init` writes it."""
    repo = user_repo(tmp_path / "project", {"src/parser.py": "def parse(text):\n    return text\n"})
    assert orch("spec", "init", repo / "fleet.yaml").exit_code == 0
    ugit(repo, "add", "fleet.yaml")
    ugit(repo, "commit", "-qm", "the spec")
    return repo


@pytest.mark.parametrize(
    ("example", "broken"),
    [("troubleshooting-bubblewrap", "ORCH_BWRAP"), ("troubleshooting-agent", "ORCH_CLAUDE_BIN")],
)
def test_the_troubleshooting_examples(
    example: str, broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_binaries(monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv(broken, str(tmp_path / "missing"))
    monkeypatch.chdir(_project(tmp_path))
    for shown in console(marked("example", example)):
        result = orch(*shown.command.split()[1:])
        assert result.exit_code == 2 and result.output.strip() == shown.output.strip(), result.output
