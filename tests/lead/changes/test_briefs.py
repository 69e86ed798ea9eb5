"""Reviewers' briefs and offline steps (orch/lead/changes/briefs.py): the line a scripted reviewer cites."""

from __future__ import annotations

import pytest

from orch.lead.changes.briefs import first_added_line

pytestmark = pytest.mark.pure  # starts nothing


def test_first_added_line() -> None:
    patch = "--- a/calc.py\n+++ b/calc.py\n@@ -3,3 +3,4 @@\n def f():\n-    return 1\n+\n+    return 2\n"
    assert first_added_line(patch) == ("calc.py", 5, "return 2")
    assert first_added_line("--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n") is None
