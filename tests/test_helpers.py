"""The shared test helpers do what the fixtures they replaced did: the user's endpoint set from the agent's
credentials, a worker's brief and its script in the scripted model's shape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orch.run.folder import RunFolder
from tests.helpers import orch_script, user_endpoint, worker_brief

pytestmark = pytest.mark.pure  # starts nothing


def test_user_endpoint_sets_the_agents_variables_and_clears_its_other_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"):
        monkeypatch.setenv(var, "left over")
    user_endpoint(monkeypatch, "claude", "http://127.0.0.1:9", "sk-key", tmp_path / "claude", ["CLAUDE_CONFIG_DIR"])
    assert (os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"]) == ("http://127.0.0.1:9", "sk-key")
    assert os.environ["ORCH_CLAUDE_BIN"] == str(tmp_path / "claude")
    assert not {"ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"} & set(os.environ)
    user_endpoint(monkeypatch, "gemini", "http://127.0.0.1:8", "AIza-key")
    assert (os.environ["GOOGLE_GEMINI_BASE_URL"], os.environ["GEMINI_API_KEY"]) == ("http://127.0.0.1:8", "AIza-key")


def test_a_worker_brief_is_long_and_its_script_finishes_the_job() -> None:
    run = RunFolder(Path("/runs/r"))
    brief = worker_brief(run, 2)
    assert len(brief.splitlines()) > 25  # long: a send must deliver it as one submission
    block = brief.split("```orch-script\n", 1)[1].split("```", 1)[0]
    steps = [json.loads(line) for line in block.splitlines()]
    assert steps[1] == {"write": str(run.result(2)), "content": "# Result of worker 2\nall good\n"}
    assert steps[2] == {"bash": f"touch {run.done(2)}"} and steps[-1] == {"reply": "Finished."}
    assert worker_brief(run, 1, outbox="/orch/runs/r/outbox/agent-1").count("/orch/runs/r/outbox/agent-1/") == 2
    assert orch_script({"reply": "x"}) == '```orch-script\n{"reply": "x"}\n```\n'
