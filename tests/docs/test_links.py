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
    for match in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
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
