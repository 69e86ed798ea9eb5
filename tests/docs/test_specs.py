"""Every fleet spec the docs show passes `orch spec check`: each YAML block with `tasks:`, in a git repository
of its own (its `workdir` pointed there), with every agent's binary and credential standing in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.pages import Block, all_blocks
from tests.helpers import orch, stand_in_binaries
from tests.lead.changes.gitfix import ugit, user_repo


def specs() -> list[Block]:
    found = []
    for block in all_blocks():
        if block.lang not in ("yaml", "yml"):
            continue
        data = yaml.safe_load(block.body)
        if isinstance(data, dict) and "tasks" in data:
            found.append(block)
    return found


def test_the_docs_show_specs() -> None:
    assert {b.mark for b in specs()} >= {("spec", "quickstart")}
    assert len(specs()) >= 2


@pytest.mark.parametrize("block", specs(), ids=lambda b: b.where)
def test_every_spec_in_the_docs_passes_spec_check(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_binaries(monkeypatch)
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(key, "sk-test")
    repo = user_repo(tmp_path / "project", {"README.md": "a project\n"})
    spec: dict[str, Any] = yaml.safe_load(block.body)
    spec["workdir"] = str(repo)
    path = repo / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    ugit(repo, "add", "fleet.yaml")
    ugit(repo, "commit", "-qm", "the spec")
    result = orch("spec", "check", path, "--local")
    assert result.exit_code == 0, f"{block.where}: {result.output}"
    assert f"{path}: ok: " in result.output
