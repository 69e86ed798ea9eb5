"""report.html from its Jinja2 template (orch/data/report/report.html): a hostile worker's text (a claim, a
reason, its `out` note, a job id, a change's detail) lands as text, never as markup, in every section."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from orch.jobs.changes import ChangeRow, ChangeStatus, CheckResult, ReviewCell
from orch.jobs.findings import Verdict
from orch.jobs.state import load_state
from orch.report.model import AttemptRow, FlagRow, RunReport, build_report
from orch.report.render import render_html
from tests.report.ciformats import SPEC, Claim, run_with

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

EVIL = """<script>alert("x")</script><img src=x onerror='alert(1)'> ' " &amp;"""
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span", "code", "table", "tr",
        "th", "td", "b", "ul", "li", "a", "br", "svg", "rect", "text", "line", "polyline", "g"}  # fmt: skip


class Page(HTMLParser):
    """The page as a browser parses it: its tags, their attributes, and its text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def hostile(report: RunReport, EVIL: str = EVIL) -> RunReport:  # the one text it puts everywhere
    """Every text a worker can write, set to EVIL."""
    cells = [c.model_copy(update={"job": EVIL, "reason": EVIL, "evidence": [EVIL], "flags": [EVIL]})
             for c in report.findings[0].verdicts]  # fmt: skip
    finding = report.findings[0].model_copy(
        update={"id": EVIL, "claim": EVIL, "evidence": [EVIL], "reproduce": EVIL, "verdicts": cells}
    )
    change = ChangeRow(
        task=EVIL, writer=1, agent="claude", job=EVIL, status=ChangeStatus.REJECTED, detail=EVIL, diffstat=EVIL,
        checks=[CheckResult(command=EVIL, exit_code=1, seconds=0.1, output_tail=EVIL)],
        reviews=[ReviewCell(job=EVIL, reviewer=2, agent=EVIL, verdict="REFUTED", reason=EVIL)],
    )  # fmt: skip
    return report.model_copy(
        update={
            "reason": EVIL,
            "findings": [finding],
            "workers": [w.model_copy(update={"out": EVIL, "model": EVIL}) for w in report.workers],
            "jobs": [j.model_copy(update={"id": EVIL, "failure": EVIL}) for j in report.jobs],
            "flags": [FlagRow(worker=1, job=EVIL, role="finder", problems=[EVIL])],
            "attempts": [AttemptRow(worker=1, job=EVIL, kind="refused", detail=EVIL)],
            "changes": [change],
            "caps": EVIL,
        }
    )


def test_a_workers_text_is_escaped_everywhere_in_report_html() -> None:
    run = run_with("hostile", [Claim("pages", "F1", "paginate() drops the last page", verdicts=(Verdict.REFUTED,))])
    page = render_html(hostile(build_report(run, SPEC, load_state(run))))
    parsed = Page(page)
    assert {tag for tag, _ in parsed.tags} <= TAGS, "a worker's text became a tag"
    assert "<script" not in page and "<img" not in page
    assert not any(name.startswith("on") for _, attrs in parsed.tags for name in attrs), "an event handler attribute"
    # Attributes that carry a worker's text keep it whole (its quotes did not end them)...
    assert ("h3", {"id": EVIL}) in parsed.tags and ("tr", {"id": f"change-{EVIL}"}) in parsed.tags
    assert ("a", {"href": f"changes/{EVIL}/patch.diff"}) in parsed.tags
    # ...and every text shows as the worker wrote it, `&amp;` included (escaped once, not unescaped).
    text = "".join(parsed.text)
    assert text.count(EVIL) >= 15
