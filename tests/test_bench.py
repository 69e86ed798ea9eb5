"""The benchmark harness: its quick mode of the cheap pieces runs and writes results of the right shape.

No timing is asserted: the figures depend on the machine. Only the harness, and the bus's own
correctness (no line lost or torn), are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import parse_size
from bench.table import Row, Target, percentile, render_markdown, render_text, row_from_json

REPO = Path(__file__).resolve().parent.parent
STATUSES = {"MET", "MISSED", "-", "SKIPPED", "ERROR"}
ROW_KEYS = {"bench", "metric", "unit", "values", "median", "min", "max", "n", "target", "status", "note"}


def _quick(tmp_path: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "quick.json"
    argv = [sys.executable, "-m", "bench", "--quick", "--only", "bus,notice", "--json", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text()), done.stdout


def _writes_the_documented_shape(quick: tuple[dict[str, Any], str]) -> None:
    data, _ = quick
    assert data["schema"] == 1
    assert data["quick"] is True and data["repeat"] == 1
    assert data["command"].startswith("python -m bench --quick")
    assert {"cores", "cpu", "memory_total_bytes", "kernel", "loadavg_at_start"} <= data["machine"].keys()
    assert set(data["benches"]) == {"bus", "notice"}
    for name, entry in data["benches"].items():
        assert entry["status"] == "ok", (name, entry.get("error"))
        assert entry["duration_s"] >= 0
    assert data["skipped"] == {}
    for row in data["rows"]:
        assert row.keys() >= ROW_KEYS
        assert row["status"] in STATUSES
        assert row["n"] == len(row["values"]) >= 1
        assert row["min"] <= row["median"] <= row["max"]
        if row["target"] is not None:
            assert row["status"] in ("MET", "MISSED")
            assert {"op", "value", "text"} <= row["target"].keys()


def _covers_the_cheap_benchmarks(quick: tuple[dict[str, Any], str]) -> None:
    data, stdout = quick
    metrics = {(r["bench"], r["metric"]): r for r in data["rows"]}
    lost = next(r for (b, m), r in metrics.items() if b == "bus" and m.startswith("lines lost"))
    torn = next(r for (b, m), r in metrics.items() if b == "bus" and m.startswith("lines torn"))
    assert lost["values"] == [0] and torn["values"] == [0]  # the bus's guarantee, not a timing
    p99 = [r for (b, m), r in metrics.items() if b == "notice" and m.endswith("p99")]
    assert len(p99) >= 3 and all(r["median"] > 0 for r in p99)
    raw = data["benches"]["notice"]["raw"]
    assert len(raw["done_flag_ms"][0]) == data["config"]["notice_samples"]
    # The printed table carries every row and its status.
    for row in data["rows"]:
        assert row["metric"] in stdout
    assert "results in" in stdout


def _renders_again_from_json(quick: tuple[dict[str, Any], str], tmp_path: Path) -> None:
    data, _ = quick
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    argv = [sys.executable, "-m", "bench", "--from-json", str(path), "--markdown"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| bench | metric |") and len(lines) == len(data["rows"]) + 2


def test_the_quick_run_of_the_cheap_benchmarks(tmp_path: Path) -> None:
    """One run of `python -m bench --quick` (half a minute) checked three ways: one test, so no two
    pytest-xdist workers make it each."""
    quick = _quick(tmp_path)
    _writes_the_documented_shape(quick)
    _covers_the_cheap_benchmarks(quick)
    _renders_again_from_json(quick, tmp_path)


def test_rows_judge_and_render() -> None:
    met = Row("x", "fast", "ms", [1.0, 3.0, 2.0], Target("<=", 2.5, "<= 2.5 ms")).judge()
    missed = Row("x", "slow", "ms", [5.0], Target("<=", 2.5, "<= 2.5 ms")).judge()
    exact = Row("x", "lost", "count", [0.0], Target("==", 0, "0")).judge()
    empty = Row("x", "nothing", "s").judge()
    assert (met.status, met.median) == ("MET", 2.0)
    assert missed.status == "MISSED" and exact.status == "MET" and empty.status == "ERROR"
    text = render_text([met, missed])
    assert "1.00-3.00" in text and "MISSED" in text
    assert "**MISSED**" in render_markdown([missed])
    again = row_from_json(json.loads(json.dumps(met.as_json())))
    assert again.values == met.values and again.target == met.target


def test_two_setups_are_measured_in_turn_and_their_ratios_pair_one_repeat() -> None:
    from bench.pairs import paired, ratios

    order: list[str] = []

    def measure(what: str) -> float:
        order.append(what)
        return float(len(order))

    a, b = paired(3, measure, "a", "b")
    assert order == ["a", "b", "b", "a", "a", "b"]  # the first of each pair alternates: the same load for both
    assert (a, b) == ([1.0, 4.0, 5.0], [2.0, 3.0, 6.0])
    assert ratios([2.0, 3.0, 1.0], [1.0, 0.0, 2.0]) == [2.0, 0.5]  # a zero sample is left out, not divided by
    assert ratios({0: 2.0, 2: 9.0}, {0: 4.0, 1: 1.0}) == [0.5]  # by repeat: only the repeats both have


def test_percentile_and_sizes() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 50) == 50 and percentile(samples, 99) == 99 and percentile(samples, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert parse_size("24G") == 24 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("1000") == 1000


@pytest.mark.claude  # its replay rows run the offline demo: three real Claude Code workers, twice
def test_quick_gateway_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "gateway.json"
    argv = [sys.executable, "-m", "bench", "--quick", "--only", "gateway", "--json", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["benches"]["gateway"]["status"] == "ok", data["benches"]["gateway"].get("error")
    rows = {r["metric"]: r for r in data["rows"] if r["bench"] == "gateway"}
    assert rows["64 concurrent streams, failed"]["values"] == [0]  # correctness, not a timing
    assert "latency through the gateway, p99" in rows and "added time to first byte, p50" in rows


def test_agents_bench_pairs_ratios_by_repeat_and_reports_a_failed_agent() -> None:
    from bench import agents

    claude = agents.Samples(ups={1: {0: 2.0, 1: 4.0}, 4: {0: 5.0, 1: 5.0}}, idle=[200.0], after=[260.0], done={0: 5.0})
    # Up failed in the second repeat: the ratios pair the repeats both have; nothing is raised.
    other = agents.Samples(ups={1: {0: 3.0}, 4: {}}, idle=[100.0], done={}, errors=["up N=4: boom"], stopped=True)
    rows = {r.metric: r.judge() for r in agents.rows_of("x", other, claude)}
    assert rows["x: up -> 1 ready / Claude Code's"].values == [1.5]
    assert rows["x: up -> 4 ready"].status == "ERROR" and "boom" in rows["x: up -> 4 ready"].note
    assert rows["x: RSS per worker, after a task"].status == "ERROR"
    assert rows["x: up -> 1 ready"].status == "-" and "1 failure" in rows["x: up -> 1 ready"].note
    assert not any("Claude Code's" in m for m in (r.metric for r in agents.rows_of("claude", claude, claude)))


def test_agents_bench_task_is_the_same_three_steps_for_every_agent(tmp_path: Path) -> None:
    from bench import agents
    from orch.run.folder import RunFolder

    run = RunFolder(tmp_path / "r")
    assert "aider" in agents.AGENTS  # it runs shell blocks now: the same task as the others
    steps = agents.task(run)
    assert steps[0]["bash"].startswith("orch bus post") and steps[2] == {"bash": f"touch {run.done(1)}"}


def test_images_bench_reads_the_opt_layers_of_an_image_history() -> None:
    from bench.images import opt_layers

    history = [
        {"CreatedBy": "/bin/sh -c #(nop) COPY dir:d0be in /opt/orch ", "Size": 116},
        {"CreatedBy": "/bin/sh -c #(nop) COPY dir:2278 in /opt/agents ", "Size": 815},
        {"CreatedBy": "COPY /opt/node /opt/node # buildkit", "Size": 125},
        {"CreatedBy": "/bin/sh -c #(nop) COPY dir:f2c5 in /opt/aider ", "Size": 0},
        {"CreatedBy": "|1 DEBIAN_FRONTEND=noninteractive /bin/sh -c apt-get install tmux", "Size": 152},
    ]
    assert opt_layers(history) == {"/opt/orch": 116, "/opt/agents": 815, "/opt/node": 125}


def test_reports_bench_writes_valid_files_of_its_big_report() -> None:
    from bench import reports
    from orch.report.render import render_html, render_markdown
    from orch.run.folder import RunFolder
    from tests.helpers import run_info
    from tests.report.ciformats import junit, valid_sarif

    run = RunFolder.for_name("bench-reports")
    run.create(run_info("bench-reports", workers=3))
    report = reports.big_report(run.name, "/workspace", findings=30)
    timed = reports.once(run, report)
    assert set(timed) == {"sarif", "junit", "json", "md", "html", "both", "ratio", "html_json"}
    assert all(v > 0 for v in timed.values())
    assert run.report_html.read_text() == render_html(report)
    assert run.report_md.read_text() == render_markdown(report)
    results = valid_sarif(run.report_sarif)["runs"][0]["results"]
    assert len(results) == 30 and {r["level"] for r in results} == {"error", "warning", "note"}
    xml = junit(run.report_junit)
    assert xml.tests == reports.TASKS + 30 and xml.failures == 10  # the third unverified; refuted ones pass


def test_the_gate_bench_compares_one_spec_with_and_without_its_gate(tmp_path: Path) -> None:
    """The gated and ungated specs are orch specs (loaded as `orch run` loads them) that differ only in the gate."""
    import yaml

    from bench.gate import spec
    from orch.spec.load import load_spec

    loaded = {}
    for gated in (True, False):
        path = tmp_path / f"{gated}.yaml"
        path.write_text(yaml.safe_dump(spec(tmp_path, gated)))
        loaded[gated] = load_spec(path)
    on, off = loaded[True], loaded[False]
    assert on.checks and on.changes.reviewers_per_change == 1 and on.protected()
    assert not off.checks and off.changes.reviewers_per_change == 0 and off.protected() == []
    assert on.tasks == off.tasks and on.offline and off.offline


def test_the_swarm_bench_costs_a_pass_here_and_skips_without_a_swarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its pass rows need no swarm (a pass made and applied in this process); the rest needs the swarm of
    scripts/swarm-cluster.sh, without which it says so in one line."""
    from bench import swarm

    rows = {row.metric: row for row in swarm._pass_costs(1)}
    assert rows["its size (the tail and the tar around it)"].values[0] < 64 << 10  # a tail, not the file
    assert rows["its size"].values[0] > 3  # MiB: the first pass carries the whole folder
    monkeypatch.setattr(swarm, "SCRIPT", Path("/nonexistent/swarm-cluster.sh"))
    skipped = swarm.run(None)  # type: ignore[arg-type]  # it looks at nothing else before it skips
    assert skipped.skipped is not None and "swarm-cluster.sh up" in skipped.skipped
