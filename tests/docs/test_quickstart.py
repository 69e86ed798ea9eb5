"""docs/quickstart.md, walked in a fresh home: a git repository of one's own, `orch spec init`, the guide's
spec, `orch spec check` (its output as the page shows it), a dry run (`offline: true`: orch's scripted agent
plays the workers here, with steps that find the defect and fix it), the report, the cost, `orch apply` (its
output as the page shows it) and the fix on the new branch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orch.run.folder import RunFolder
from tests.docs.pages import console, marked
from tests.helpers import orch, stand_in_binaries
from tests.lead.changes.gitfix import ugit, user_repo
from tests.lead.leadrun import DONE, RESULT, finding, findings_step, reply

DATES = '''import datetime


def parse_date(text: str) -> datetime.date:
    """An ISO date (YYYY-MM-DD)."""
    year, month, day = text.split("-")
    return datetime.date(int(year), int(month), int(day))
'''
FIXED = '''import datetime
import re


def parse_date(text: str) -> datetime.date:
    """An ISO date (YYYY-MM-DD)."""
    if not re.fullmatch(r"\\d{4}-\\d{2}-\\d{2}", text):
        raise ValueError(f"not an ISO date: {text!r}")
    year, month, day = text.split("-")
    return datetime.date(int(year), int(month), int(day))
'''
TEST = """import unittest

from dates import parse_date


class ParseDate(unittest.TestCase):
    def test_a_date(self) -> None:
        self.assertEqual(parse_date("2024-02-29").day, 29)
"""
NEW_TEST = """
    def test_no_padding_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            parse_date("2024-1-5")
"""
REPRO = "python3 -c 'import sys; from dates import parse_date; parse_date(\"2024-1-5\"); sys.exit(0)'"
QUOTE = 'year, month, day = text.split("-")'
FINDS = [
    findings_step(finding("F1", "parse_date accepts 2024-1-5, not an ISO date", "dates.py", 6, QUOTE, REPRO)),
    RESULT,
    DONE,
    reply(),
]
FIXES = [
    {"write": "{{workdir}}/dates.py", "content": FIXED},
    {"write": "{{workdir}}/tests/test_dates.py", "content": TEST + NEW_TEST},
    RESULT,
    DONE,
    reply(),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ORCH_HOME", str(home / ".orch"))  # its default, said for the test's cleanup
    return home


def test_the_quick_start_from_a_spec_to_the_fix_on_a_branch(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"dates.py": DATES, "tests/__init__.py": "", "tests/test_dates.py": TEST}
    project = user_repo(home / "src" / "project", files)
    monkeypatch.chdir(project)
    # 2. A spec: the example, then the guide's.
    assert orch("spec", "init", "fleet.yaml").exit_code == 0
    guide = yaml.safe_load(marked("spec", "quickstart").body)
    Path("fleet.yaml").write_text(yaml.safe_dump(guide, sort_keys=False))
    ugit(project, "add", "fleet.yaml")
    ugit(project, "commit", "-qm", "orch: fleet spec")
    # 3. Check it: as the page shows (the key set, as step 1 says; the agent's path is all the check needs).
    stand_in_binaries(monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    for shown in console(marked("example", "quickstart-check")):
        result = orch(*shown.command.split()[1:])
        assert result.exit_code == 0 and result.output.strip() == shown.output.strip(), result.output
    # 4. A dry run of the same spec: offline, its workers played by orch's scripted agent.
    dry: dict[str, Any] = {**guide, "offline": True, "agent": "scripted", "timeouts": {"job": 120, "run": 300}}
    dry["tasks"] = [{**guide["tasks"][0], "offline_script": FINDS}, {**guide["tasks"][1], "offline_script": FIXES}]
    Path("fleet.yaml").write_text(yaml.safe_dump(dry, sort_keys=False))
    ugit(project, "commit", "-qam", "orch: a dry run")
    ran = orch("run", "fleet.yaml", "--local")
    run = RunFolder.for_name("audit")
    assert ran.exit_code == 0, ran.output
    assert run.root == home / ".orch" / "runs" / "audit"
    # 5. The report and the cost.
    for command in (["report", "audit"], ["status", "audit"]):
        result = orch(*command)
        assert result.exit_code == 0, result.output
    assert "$" in orch("status", "audit").output
    assert run.report_html.is_file() and run.report_md.is_file() and run.report_sarif.is_file()
    # 6. Take the fix: as the page shows, and the branch holds it.
    for shown in console(marked("example", "quickstart-apply")):
        result = orch(*shown.command.split()[1:])
        assert result.exit_code == 0 and result.output.strip() == shown.output.strip(), result.output
    assert ugit(project, "show", "orch/audit:dates.py") == FIXED.strip()
    assert ugit(project, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # the current branch left alone
    assert "test_no_padding_is_refused" in ugit(project, "show", "orch/audit:tests/test_dates.py")
    assert (project / "dates.py").read_text() == DATES  # the working tree left alone
