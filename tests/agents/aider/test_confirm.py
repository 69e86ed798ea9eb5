"""The pure parts of aider's question answering (orch/agents/aider/confirm.py) and of finding aider's Python;
the real aider answering its questions is tests/agents/aider/test_adapter.py."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from orch.agents.aider.adapter import interpreter
from orch.agents.aider.confirm import Answerer, confine, denied, install
from orch.errors import UsageError

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


@pytest.mark.parametrize(
    ("commands", "refused"),
    [
        ("rm -rf /", "rm -rf /"),
        ("echo hi\nsudo true", "sudo true"),
        ("cd x && git push origin main", "git push origin main"),
        ("true; rm -rf ~ | cat", "rm -rf ~"),
        ("# sudo in a comment\necho fine", None),
        ("echo 'no sudo here'", None),
        ("rm -r build", None),
    ],
)
def test_the_deny_list_looks_at_every_command_of_a_block(commands: str, refused: str | None) -> None:
    assert denied(commands) == refused


@pytest.mark.parametrize(
    ("head", "python"),
    [
        ("#!/opt/aider/bin/python3\n# -*- coding: utf-8 -*-\n", "/opt/aider/bin/python3"),
        ("#!/usr/bin/python3.11 -E\n", "/usr/bin/python3.11"),
        (
            "#!/bin/sh\n'''exec' \"/a/very long/venv/bin/python3\" \"$0\" \"$@\"\n' '''\n",
            "/a/very long/venv/bin/python3",
        ),
    ],
)
def test_aiders_python_is_read_from_its_console_script(tmp_path: Path, head: str, python: str) -> None:
    script = tmp_path / "aider"
    script.write_text(head + "from aider.main import main\n")
    assert interpreter(script) == Path(python)


@pytest.mark.parametrize("content", [b"\x7fELF\x02\x01", b'#!/bin/bash\nexec aider-real "$@"\n', b""])
def test_an_aider_that_is_no_python_script_is_refused_with_a_hint(tmp_path: Path, content: bytes) -> None:
    binary = tmp_path / "aider"
    binary.write_bytes(content)
    with pytest.raises(UsageError, match="not a pip-installed aider") as raised:
        interpreter(binary)
    assert "pip install aider-chat" in (raised.value.hint or "")


def test_another_aiders_question_function_is_refused_at_start() -> None:
    class OtherIO:
        def confirm_ask(self, question: str, default: str = "y") -> bool:
            return True

    answerer = Answerer(hookwriter=None, state="", policy="", mode="build")  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match=r"use the aider orch pins \(orch/versions.py\)"):
        install(answerer, OtherIO)
    assert OtherIO().confirm_ask("Run shell command?") is True  # left as it was


def _aider_main(seen: list[object]) -> ModuleType:
    """A stand-in for aider.main's two search functions with the pinned signatures, recording what they get."""
    module = ModuleType("aider_main")

    def get_parser(default_config_files: list[str], git_root: str | None) -> list[str]:
        seen.append(default_config_files)
        return default_config_files

    def generate_search_path_list(default_file: str, git_root: str | None, command_line_file: str | None) -> list[str]:
        return ["/home/w/" + default_file, *([git_root + "/" + default_file] if git_root else []), default_file]

    module.get_parser = get_parser  # type: ignore[attr-defined]  # a module's attributes are set at run time
    module.generate_search_path_list = generate_search_path_list  # type: ignore[attr-defined]
    return module


def test_aiders_config_search_is_confined_to_the_workers_home() -> None:
    """aider has no switch to skip its folder's .aider.conf.yml (whose `load:` runs /run commands at start), .env or
    model files: orch keeps it to the worker's home and what its command line names."""
    seen: list[object] = []
    module = _aider_main(seen)
    confine(module, "/home/w")
    module.get_parser(["/repo/sub/.aider.conf.yml", "/repo/.aider.conf.yml", "/home/w/.aider.conf.yml"], "/repo")
    assert seen == [["/home/w/.aider.conf.yml"]]
    assert module.generate_search_path_list(".env", "/repo", "/etc/x.env") == ["/home/w/.env", "/etc/x.env"]


def test_an_aider_whose_search_differs_is_refused_at_start_in_one_line() -> None:
    module = _aider_main([])
    module.get_parser = lambda files: files  # type: ignore[attr-defined]  # another aider's signature
    with pytest.raises(SystemExit) as refused:
        confine(module, "/home/w")
    assert "get_parser('files',) is not the one orch confines" in str(refused.value)
    assert "\n" not in str(refused.value)
