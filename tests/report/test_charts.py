"""The timeline and cost-over-time charts (orch.report.charts) in report.html: inline SVG, escaped, no assets."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from orch.jobs.state import load_state
from orch.lead.controller import read_spec
from orch.report.charts import CostPoint, JobBar, cost_svg, timeline_svg
from orch.report.model import build_report, load_report
from orch.report.render import render_html, write_reports
from tests.view.fakerun import lead_run

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

SVG = "{http://www.w3.org/2000/svg}"


def test_report_html_draws_the_jobs_and_the_costs(orch_home: Path) -> None:
    run = lead_run()
    report = write_reports(run, read_spec(run), load_state(run))
    assert [b.job for b in report.timeline] == ["pages", "pages-F1.v1", "pages-F1.v2"]
    assert [p.usd for p in report.costs[1]] == [0.0, 0.5, 0.5]
    page = run.report_html.read_text()
    svgs = re.findall(r"<svg .*?</svg>", page)
    assert len(svgs) == 2
    timeline, costs = (ET.fromstring(s) for s in svgs)
    bars = timeline.findall(f"{SVG}rect")
    assert [b.get("data-job") for b in bars] == ["pages", "pages-F1.v1", "pages-F1.v2"]
    assert float(bars[1].get("x") or 0) > float(bars[0].get("x") or 0)  # the verifier came after the finder
    assert [line.get("data-worker") for line in costs.findall(f"{SVG}polyline")] == ["1", "2", "3"]
    # No external asset: nothing is fetched by the page (the SVG namespace is a name, not a fetch).
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)
    assert load_report(run) == report  # report.json keeps the charts' data


def test_charts_escape_and_clip_what_they_draw() -> None:
    bars = [
        JobBar(worker=1, job="<script>alert(1)</script>", role="finder", status="failed", start=0, end=5),
        JobBar(worker=9, job="elsewhere", role="finder", status="done", start=0, end=5),  # no such worker row
        JobBar(worker=2, job="running", role="verifier", status="running", start=4),
    ]
    svg = timeline_svg(bars, workers=2, start=0, end=10)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    tree = ET.fromstring(svg)
    assert [r.get("data-job") for r in tree.findall(f"{SVG}rect")] == ["<script>alert(1)</script>", "running"]
    costs = ET.fromstring(cost_svg({1: [CostPoint(ts=0, usd=0), CostPoint(ts=5, usd=2)], 2: []}, 0, 10))
    assert len(costs.findall(f"{SVG}polyline")) == 2


def test_a_report_without_jobs_has_no_charts(orch_home: Path) -> None:
    run = lead_run()
    state = load_state(run)
    state.jobs = []
    assert "<svg" not in render_html(build_report(run, read_spec(run), state))
