"""Every relative link in the docs leads somewhere: the file exists, and a `#anchor` names one of its headings
(GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.pages import FENCE, REPO, pages

pytestmark = pytest.mark.pure  # reads files only

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces as -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m[1]) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


def test_slug_is_githubs() -> None:
    assert slug("Exit codes of `orch run` (and `orch demo --live`)") == "exit-codes-of-orch-run-and-orch-demo---live"
    assert slug("compose.yaml: a machine without orch") == "composeyaml-a-machine-without-orch"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page: Path) -> None:
    broken = []
    prose = re.sub(r"`[^`]*`", "", FENCE.sub("", page.read_text(encoding="utf-8")))  # code is not a link
    for match in LINK.finditer(prose):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


PATH = re.compile(r"(?<![\w/.$~-])((?:orch/[\w-]+|scripts|docs|bench|docker|\.ci)/[\w./-]*[\w/]|orch/[\w-]+\.py)")
"""orch's own paths: in a folder of orch/ (`orch/<run>` alone is a branch), scripts, docs... (`tests/...` in a
guide is the user's project)."""
PATTERNS = ("NEW", "agent-", "NAME")
"""Paths that stand for others: an agent to add, a worker's number, a run's name."""


def named_paths(text: str) -> set[str]:
    """orch's paths in a text, but those a glob or placeholder goes on from (`opencode-*.js`, `runs/<name>`)."""
    return {m[1].rstrip("/.") for m in PATH.finditer(text) if text[m.end() : m.end() + 2] not in ("-*", "*", "<")
            and text[m.end() : m.end() + 1] not in ("*", "<")}  # fmt: skip


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_repository_path_the_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named = {p for code in re.findall(r"`([^`]+)`", text) for p in named_paths(code)}
    named |= named_paths(LINK.sub("", FENCE.sub("", text)))
    missing = sorted(p for p in named if not any(x in p for x in PATTERNS) and not (REPO / p).exists())
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"
