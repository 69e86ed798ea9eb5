"""No comment or docstring names a pinned agent CLI version: orch/versions.py is the one place a version is
written, and what a CLI was seen to do at its version is written in docs/agents/. Elsewhere a comment says
"the pinned Claude Code", so bumping a pin leaves no comment behind that is no longer true.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch import versions

pytestmark = pytest.mark.pure  # reads sources only

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("orch", "tests", "bench", "scripts")
# Files another engineer rewrites this round (issue 25's protocol classes): their provenance notes
# (which version sent the captured bodies) move to "the pinned Codex" or docs/agents/ there. Delete a line once clean.
OWNED_ELSEWHERE = {
    "tests/scenarios/test_claude_gateway.py",
    "tests/gateway/apis/test_gemini.py",
    "tests/scenarios/test_gemini_gateway.py",
    "tests/gateway/apis/test_openai_chat.py",
    "tests/gateway/recording/test_replay.py",
    "tests/gateway/apis/test_openai_responses.py",
    "tests/offline/apis/test_gemini.py",
    "tests/offline/test_modelserver.py",
}
CLI_NAMES = r"(?:claude code|claude|codex(?: cli)?|gemini cli|gemini|opencode|aider|node(?:\.js)?)"


def pinned() -> list[str]:
    """Every pinned version string in orch/versions.py."""
    return [v for k, v in vars(versions).items() if k.endswith("_VERSION") and isinstance(v, str)]


def version_pattern() -> re.Pattern[str]:
    exact = "|".join(re.escape(v) for v in pinned())
    return re.compile(rf"(?<![\w.])(?:{exact})(?![\w.]*\d)|\b{CLI_NAMES} v?\d+\.\d+", re.IGNORECASE)


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and each docstring (a string standing alone as a statement)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        for block in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if not isinstance(block, list):
                continue
            for stmt in block:
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    yield stmt.lineno, stmt.value.value


def shell_comments(source: str) -> Iterator[tuple[int, str]]:
    for i, line in enumerate(source.splitlines(), 1):
        if "#" in line and not line.startswith("#!"):
            yield i, line[line.index("#") :]


def named_versions(path: Path, pattern: re.Pattern[str]) -> Iterator[str]:
    source = path.read_text()
    if not pattern.search(source):  # most files name no version at all: nothing to parse
        return
    texts = prose(source) if path.suffix == ".py" else shell_comments(source)
    for line, text in texts:
        for match in pattern.finditer(text):
            yield f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}"


def test_no_comment_names_a_pinned_version() -> None:
    pattern = version_pattern()
    files = [p for d in SCANNED for p in (REPO / d).rglob("*") if p.suffix in (".py", ".sh") and p.is_file()]
    assert any(p.name == "versions.py" for p in files)
    found = [
        hit
        for path in sorted(files)
        if path.relative_to(REPO).as_posix() not in {"orch/versions.py", *OWNED_ELSEWHERE}
        for hit in named_versions(path, pattern)
    ]
    assert not found, "say `the pinned ...` (versions in orch/versions.py, behaviour in docs/agents/):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    "source",
    [
        f"# Claude Code {versions.CLAUDE_CODE_VERSION} asks twice\n",
        f'"""Bodies Gemini CLI {versions.GEMINI_CLI_VERSION} sent."""\n',
        "def f() -> None:\n    # since codex 0.99 it retries\n    pass\n",
        f"x = 1  # seen from {versions.CODEX_VERSION}\n",
    ],
)
def test_the_check_catches_a_version(source: str, tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert list(prose(source)) and any(version_pattern().search(text) for _, text in prose(source)), source


@pytest.mark.parametrize(
    "source",
    [
        f'VERSION = "{versions.CLAUDE_CODE_VERSION}"  # the pinned Claude Code\n',
        "# listens on 127.0.0.1:0; SARIF 2.1.0\n",
        '"""The model gemini-2.5-pro answers."""\n',
    ],
)
def test_the_check_leaves_code_and_other_numbers(source: str) -> None:
    assert not any(version_pattern().search(text) for _, text in prose(source)), source


# --- literals: code spells no pinned version, it reads orch.versions ------------------------------------
CODE_FILES = ("docker/Dockerfile", "action.yml", "compose.yaml", ".ci/run")
"""Beyond SCANNED's Python and shell: the other files that build, install or run something."""


def exact_pattern() -> re.Pattern[str]:
    """A pinned version exactly (not a longer one it is the start of: 2.1.3320)."""
    exact = "|".join(re.escape(v) for v in pinned())
    return re.compile(rf"(?<![\w.])(?:{exact})(?![\w.]*\d)")


def literals(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each string literal of a Python file (f-strings' fixed parts included); of any
    other file, each line."""
    source = path.read_text()
    if path.suffix != ".py":
        yield from enumerate(source.splitlines(), 1)
        return
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def spelled_versions(path: Path, pattern: re.Pattern[str]) -> Iterator[str]:
    if not pattern.search(path.read_text()):
        return
    for line, text in literals(path):
        for match in pattern.finditer(text):
            yield f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}"


def test_no_code_spells_a_pinned_version() -> None:
    """A test or a build file that writes the pinned version goes stale at the next bump: read orch.versions (Python)
    or take the build arg orch/backends/docker/image.py passes (the Dockerfile). Docs say what was measured at
    which version: they are not scanned."""
    pattern = exact_pattern()
    files = [p for d in SCANNED for p in (REPO / d).rglob("*") if p.suffix in (".py", ".sh") and p.is_file()]
    files += [REPO / f for f in CODE_FILES if (REPO / f).is_file()]
    assert REPO / "docker" / "Dockerfile" in files
    found = [
        hit
        for path in sorted(files)
        if path.relative_to(REPO).as_posix() not in {"orch/versions.py", *OWNED_ELSEWHERE}
        for hit in spelled_versions(path, pattern)
    ]
    assert not found, "read the version from orch.versions (or the build arg):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("t.py", f'assert "{versions.CLAUDE_CODE_VERSION}" in out\n'),
        ("t.py", f'hint = f"npm install -g {{pkg}}@{versions.GEMINI_CLI_VERSION}"\n'),
        ("Dockerfile", f"ARG CLAUDE_CODE_VERSION={versions.CLAUDE_CODE_VERSION}\n"),
    ],
)
def test_the_literal_check_catches_a_version(
    name: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / name
    path.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(spelled_versions(path, exact_pattern())), source


def test_the_literal_check_leaves_other_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.py"
    path.write_text(f'x = "{versions.CLAUDE_CODE_VERSION}0"; y = CLAUDE_CODE_VERSION; z = "127.0.0.1"\n')
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert not list(spelled_versions(path, exact_pattern()))
