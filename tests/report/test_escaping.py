"""A hostile worker's text through every output orch writes (issue 30): names and reasons with line breaks,
backticks, pipes, `<script>`, terminal and OSC escapes, bidi overrides, `@channel` mentions and very long text
land in report.md (and the CI job summary cut from it), report.html, report.sarif, report.junit.xml,
events.jsonl, `orch run`'s commentary, `orch status`, the terminal matrices and one-line errors (notifications:
tests/notify/test_bodies.py). Each output stays well-formed, and the text in it stays text: it adds no line,
heading, cell, link, tag or escape of its own.
orch.escape's own tests (tests/test_escape.py) hold each medium's function to the same on its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from markdown_it import MarkdownIt

from orch import escape
from orch.cli.runs import status_lines
from orch.errors import OrchError
from orch.jobs.findings import Verdict
from orch.jobs.state import load_state
from orch.report.changes import changes_text
from orch.report.commentary import describe
from orch.report.junit import render_junit
from orch.report.model import RunReport, build_report
from orch.report.render import matrix_text, render_html, render_markdown
from orch.report.sarif.render import render_sarif
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunStatus, WorkerState
from orch.run.statusview import RunStatusView, WorkerStatus
from tests.report.ciformats import SPEC, Claim, junit, run_with, valid_sarif
from tests.report.test_render import TAGS, Page, hostile
from tests.test_escape import TEXT as ANY_TEXT
from tests.test_escape import shows_only

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
BENIGN = "plain words"
TEXT = ANY_TEXT.filter(lambda text: escape.one_line(text) != "")
"""Hostile text that shows something (an empty field is laid out as one, which is no injection)."""
EXAMPLES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def base_report() -> RunReport:
    run = run_with("hostile", [Claim("pages", "F1", "paginate() drops the last page", verdicts=(Verdict.REFUTED,))])
    return build_report(run, SPEC, load_state(run))


def blocks(markdown: str) -> list[tuple[str, int]]:
    """The block structure a renderer makes of a Markdown page, and each inline's kinds of token: what a
    worker's text may not change."""
    out = []
    for token in MD.parse(markdown):
        kinds = sorted({c.type for c in token.children or []} - {"text", "softbreak"})
        out.append((token.type + (":" + ",".join(kinds) if kinds else ""), token.level))
    return out


def test_report_md_and_the_job_summary_keep_their_shape() -> None:
    report = base_report()
    benign = render_markdown(hostile(report, BENIGN))

    @EXAMPLES
    @given(text=TEXT)
    def check(text: str) -> None:
        page = render_markdown(hostile(report, text))
        # The same headings, paragraphs, lists, table rows and cells, and inline syntax as with plain words.
        assert blocks(page) == blocks(benign)
        assert shows_only(page.replace("\u200b", ""), keep="\n")
        # The job summary is report.md's head, cut at its findings (action.yml): a worker cannot move the cut.
        assert page.count("\n## Findings") == 1

    check()


def test_report_html_is_text_only() -> None:
    report = base_report()

    @EXAMPLES
    @given(text=TEXT)
    def check(text: str) -> None:
        parsed = Page(render_html(hostile(report, text)))
        assert {tag for tag, _ in parsed.tags} <= TAGS, "a worker's text became a tag"
        assert not any(name.startswith("on") for _, attrs in parsed.tags for name in attrs)
        assert shows_only("".join(parsed.text), keep="\n\t")  # no bidi or control character reorders the page

    check()


def test_sarif_and_junit_stay_valid(tmp_path: Path) -> None:
    report = base_report()
    sarif, xml = tmp_path / "report.sarif", tmp_path / "report.junit.xml"

    @EXAMPLES
    @given(text=TEXT)
    def check(text: str) -> None:
        evil = hostile(report, text)
        sarif.write_text(render_sarif(evil))
        for result in valid_sarif(sarif)["runs"][0]["results"]:
            message = result["message"]["text"]
            assert shows_only(message, keep="\n\t") and "](" not in message.replace("\\](", "")
        xml.write_text(render_junit(evil))
        for suite in junit(xml):
            for case in suite:
                assert shows_only(case.name) and all(shows_only(r.message or "", keep="\n") for r in case.result)

    check()


def test_events_jsonl_stays_one_event_a_line(orch_home: Path) -> None:
    run = RunFolder.for_name("lines")
    run.root.mkdir(parents=True)

    @EXAMPLES
    @given(text=TEXT)
    def check(text: str) -> None:
        run.events.unlink(missing_ok=True)
        run.log_event(ControllerEvent(event=Event.JOB_FAILED, worker=1, data={"job": text, "reason": text}))
        (line,) = run.events.read_text().splitlines()  # what report.model and the commentary read
        assert json.loads(line)["data"] == {"job": text, "reason": text}

    check()


SHOWN: list[tuple[Event, Callable[[str], dict[str, object]]]] = [
    (Event.FINDING_ACCEPTED, lambda t: {"finding": t, "claim": t}),
    (Event.JOB_FAILED, lambda t: {"job": t, "reason": t}),
    (Event.CHANGE_TAKEN, lambda t: {"job": t, "diffstat": t, "scope": [t]}),
    (Event.WORKER_OUT, lambda t: {"reason": t}),
    (Event.CHANGE_ENDED, lambda t: {"change": t, "task": t, "status": t, "reason": t}),
]


def test_the_terminal_shows_each_text_on_its_line() -> None:
    report = base_report()

    @EXAMPLES
    @given(text=TEXT)
    def check(text: str) -> None:
        lines = [describe(ControllerEvent(event=event, worker=1, data=data(text))) or "" for event, data in SHOWN]
        evil = hostile(report, text)
        lines += matrix_text(evil).split("\n") + changes_text(evil.changes).split("\n")
        worker = WorkerStatus(worker=1, state=WorkerState.BUSY, detail=text, done=False, result=False, last_bus=text)
        view = RunStatusView(
            name="r", backend="local", agent="claude", status=RunStatus.RUNNING, alive=True, workers=[worker]
        )
        lines += status_lines(view)
        lines.append(OrchError(text, hint=text).one_line())
        assert all(shows_only(line) for line in lines), [line for line in lines if not shows_only(line)]
        assert len(matrix_text(evil).split("\n")) == len(matrix_text(hostile(report, BENIGN)).split("\n"))

    check()


def test_a_long_reason_is_cut_on_the_terminal() -> None:
    line = describe(ControllerEvent(event=Event.JOB_FAILED, worker=1, data={"job": "j", "reason": "x" * 100_000}))
    assert line is not None and len(line) < 200
