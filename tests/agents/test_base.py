"""The adapter base: what it derives from an agent's facts (pure: nothing is started)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orch.agents.base import HOOK_START, HOOKWRITER, hook_command
from orch.agents.credentials import gateway_env, openai_key
from orch.agents.registry import get_adapter
from orch.contracts import AgentFacts, ImageInstall
from orch.errors import UsageError
from orch.modelaccess import Credentials
from orch.run.paths import agent_cache
from tests.agents.toy_agent import FACTS as TOY
from tests.agents.toy_agent import ToyAdapter


def test_session_args_resume_a_kept_session_or_name_a_new_one() -> None:
    claude_like = ToyAdapter(dataclasses.replace(TOY, new_session_args=("--session-id",)))
    assert claude_like.session_argv("abc") == ["--resume", "abc"]
    flag, fresh = claude_like.session_argv(None)
    assert flag == "--session-id" and len(fresh) == 36  # a uuid: the agent keeps its session under it
    codex_like = ToyAdapter(dataclasses.replace(TOY, resume_args=("resume",)))
    assert codex_like.session_argv("abc") == ["resume", "abc"]  # Codex's subcommand
    assert codex_like.session_argv(None) == []  # it names its sessions itself


def test_the_pinned_copy_is_where_orch_setup_installs_it() -> None:
    npm = ImageInstall(package="toy-agent", version="1.2.3", build_arg="TOY")
    facts = dataclasses.replace(TOY, install=npm, cache="toy-cli", command="toy")
    assert facts.cache_bin == agent_cache() / "toy-cli" / "1.2.3" / "node_modules" / ".bin" / "toy"
    assert facts.how_to_install == "orch setup --agents toy"
    pip = dataclasses.replace(npm, pip_command="toy")
    facts = dataclasses.replace(facts, install=pip)
    assert facts.cache_bin == agent_cache() / "toy-cli" / "1.2.3" / "bin" / "toy"
    assert facts.how_to_install == "orch setup --agents toy"


def test_the_gateway_variables_follow_from_the_credentials() -> None:
    creds = openai_key("openai-chat", base_url_env="TOY_BASE_URL")
    assert gateway_env(creds).base_url_env == "TOY_BASE_URL" and gateway_env(creds).key_env == "OPENAI_API_KEY"
    assert "TOY_BASE_URL" in creds.hint and "Chat Completions" in creds.hint
    assert dataclasses.replace(TOY, credentials=Credentials(env=())).gateway is None  # it calls no model API
    with pytest.raises(ValueError):
        gateway_env(Credentials(env=()))


def test_facts_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TOY.name = "other"  # type: ignore[misc]


def test_an_agent_with_no_binary_setting_is_found_on_path_or_named_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert ToyAdapter().binary().name == "sh"  # on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = AgentFacts(name="toy", title="Toy agent", permission_modes=("x",), default_permission_mode="x")
    with pytest.raises(UsageError, match="Toy agent is not installed"):
        ToyAdapter(dataclasses.replace(missing, command="no-such-toy")).binary()
    assert ToyAdapter(dataclasses.replace(missing, command="no-such-toy")).version() is None


# The composer of a pane of the pinned Gemini CLI, seen right after its resumed session's first turn ended (AfterAgent
# logged, so the worker reads as idle): a paste then was dropped. Then the same pane a second later.
GEMINI_RESUMING = """ > are you back

✦ OK

⠦ Resuming session...

? for shortcuts
 Shift+Tab to accept edits
"""
GEMINI_READY = """ > are you back

✦ OK

? for shortcuts
 Shift+Tab to accept edits

 >   Type your message or @path/to/file
"""


def test_a_send_waits_while_the_screen_says_typed_text_is_dropped() -> None:
    gemini = get_adapter("gemini")
    assert not gemini.takes_input(GEMINI_RESUMING)
    assert gemini.takes_input(GEMINI_READY)
    # The words inside a reply do not hold sends back: only the composer's own line does.
    assert gemini.takes_input(GEMINI_READY.replace("✦ OK", "✦ Resuming session... is what it said"))
    assert ToyAdapter().takes_input(GEMINI_RESUMING)  # an agent that states no such screen always takes input


def test_an_empty_input_box_tells_a_dropped_paste() -> None:
    gemini = get_adapter("gemini")
    assert gemini.draft_empty(GEMINI_READY)
    assert not gemini.draft_empty(GEMINI_READY.replace("  Type your message or @path/to/file", " third prompt"))
    assert not gemini.draft_empty(GEMINI_RESUMING)
    assert not ToyAdapter().draft_empty(GEMINI_READY)  # no way to tell: never pasted twice


def _no_bytecode_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def test_a_hook_command_runs_orchs_writer_not_one_in_the_workers_folder(tmp_path: Path) -> None:
    """A worker's hook runs in its workdir, which it writes: a hookwriter.py there (and a compiled one) is not
    what the command imports (`-c` would put the current folder first on sys.path)."""
    marker = tmp_path / "planted"
    decoy = f"import pathlib; pathlib.Path({str(marker)!r}).touch()\ndef main(argv):\n    return 0\n"
    (tmp_path / "hookwriter.py").write_text(decoy)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp_path)], check=True)
    state = tmp_path / "agent-1.jsonl"
    payload = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1"})
    done = subprocess.run(
        ["sh", "-c", hook_command("event", state)], input=payload, text=True, capture_output=True,
        cwd=tmp_path, env=_no_bytecode_setting(), timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    (line,) = state.read_text().splitlines()
    assert json.loads(line)["hook_event_name"] == "SessionStart"


def test_the_hook_writer_is_imported_so_its_compiled_file_is_used_and_kept_fresh(tmp_path: Path) -> None:
    """Imported, not run as a script: the first start compiles it into its folder's __pycache__ (where it can
    write), later ones load that; a source changed since is compiled again, never the stale file run."""
    folder = tmp_path / "run"
    folder.mkdir()
    writer = folder / "hookwriter.py"
    shutil.copy(HOOKWRITER, writer)
    start = HOOK_START.format(folder=json.dumps(str(folder)))

    def usage() -> str:  # no arguments: the writer prints its usage (its docstring) and exits 2
        done = subprocess.run(
            [sys.executable, "-S", "-c", start], capture_output=True, text=True, env=_no_bytecode_setting(), timeout=30
        )
        assert done.returncode == 2
        return done.stderr

    assert "hookwriter.py event STATE_FILE" in usage()
    assert list((folder / "__pycache__").glob("hookwriter.*.pyc"))
    writer.write_text(writer.read_text().replace("Hook commands run by agents", "Changed since compiled", 1))
    assert "Changed since compiled" in usage()
