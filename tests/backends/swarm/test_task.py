"""A swarm task's first process: the tree made unwritable to every uid but its owner's, a collector that never
answers said in one line, bad arguments refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orch.backends.swarm import task


def test_the_tree_loses_every_group_and_other_write_bit(tmp_path: Path) -> None:
    tree = tmp_path / "workspace"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "app.py").write_text("print()\n")
    (tree / "open.txt").write_text("anyone\n")
    os.chmod(tree / "open.txt", 0o666)
    os.chmod(tree / "src", 0o777)
    (tree / "link").symlink_to("/etc/passwd")
    task.strip_group_writes(tree)
    for path in (tree / "src", tree / "src" / "app.py", tree / "open.txt"):
        assert not stat.S_IMODE(path.stat().st_mode) & 0o022, path
    assert stat.S_IMODE((tree / "open.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE(Path("/etc/passwd").stat().st_mode) & 0o777 == 0o644  # the link was not followed


def test_a_collector_that_never_answers_is_one_line() -> None:
    with pytest.raises(task.TaskError, match=r"timed out after 0\.3s waiting for the collector orch-nowhere-home"):
        task.find_collector("nowhere", timeout=0.3)


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert task.main(["demo"]) == 2 and "usage:" in capsys.readouterr().err
    assert task.main(["../x", "--", "true"]) == 2 and "invalid run name" in capsys.readouterr().err
