"""report.sarif (orch.report.sarif.render): valid SARIF 2.1.0 by the official schema, one result per finding with its
verification, levels that follow severity and status, a REFUTED finding suppressed with its verifiers' reasons,
fingerprints that survive a second run, worker text that cannot make a link."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orch import __version__
from orch.jobs.findings import CodeEvidence, Severity, Verdict
from orch.jobs.state import FindingStatus
from orch.report.sarif.render import FINGERPRINT, LEVELS, build_sarif, fingerprint, level, render_sarif
from tests.report.ciformats import Claim, report_with_changes, run_with, valid_sarif

C, R = Verdict.CONFIRMED, Verdict.REFUTED
DEMO = [
    Claim("pages", "F1", "paginate(items, 1, size) skips the first page"),
    Claim("stats", "F1", "mean([]) raises ZeroDivisionError", verdicts=(R, R), file="stats.py", line=10, quote="q"),
    Claim("stats", "F2", "median is off by one", severity="critical", verdicts=(C, R), file="stats.py", line=20),
    Claim("stats", "F3", "a docstring is stale", severity="info", file="./docs/x y#1.md", line=3, quote="old"),
]


def _results(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["properties"]["finding"]: r for r in data["runs"][0]["results"]}


def test_a_run_is_valid_sarif_with_one_result_per_finding() -> None:
    data = valid_sarif(run_with("mixed", DEMO).report_sarif)
    (run,) = data["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("orch", __version__)
    assert driver["informationUri"].startswith("https://")
    # One rule per task, those without findings too; each result points at its task's rule.
    assert [r["id"] for r in driver["rules"]] == ["task/pages", "task/stats"]
    assert driver["rules"][0]["shortDescription"]["text"] == "Pagination"
    assert driver["rules"][1]["fullDescription"]["text"] == "determine whether mean() handles every input"
    results = _results(data)
    assert list(results) == ["pages-F1", "stats-F1", "stats-F2", "stats-F3"]
    for result in results.values():
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    pages, refuted, split, info = results.values()
    assert pages["ruleId"] == "task/pages" and refuted["ruleId"] == "task/stats"
    # Status, verifiers and verdicts in the properties; the message says it too.
    props = refuted["properties"]
    assert (props["status"], props["severity"], props["finder"], props["finderAgent"]) == (
        "REFUTED",
        "high",
        1,
        "claude",
    )
    assert [(v["worker"], v["verdict"], v["reason"]) for v in props["verifiers"]] == [
        (2, "REFUTED", "ran it: REFUTED"),
        (3, "REFUTED", "ran it: REFUTED"),
    ]
    assert "Verification: REFUTED (W2 REFUTED; W3 REFUTED)" in refuted["message"]["text"]
    assert refuted["message"]["text"].startswith("mean(\\[\\]) raises ZeroDivisionError")  # SARIF's escaped brackets
    # A refuted finding is a false positive caught: suppressed, the verifiers' reasons its justification.
    assert refuted["suppressions"] == [
        {"kind": "external", "status": "accepted", "justification": "REFUTED by its verifiers: W2: ran it: REFUTED; "
         "W3: ran it: REFUTED"}
    ]  # fmt: skip
    assert all("suppressions" not in r for r in (pages, split, info))
    assert props["report"] == "report.html#stats-F1" and "report.html#stats-F1" in refuted["message"]["text"]
    assert split["properties"]["status"] == "UNVERIFIED"
    # Levels: confirmed high is an error, refuted high a note, a split critical one a warning.
    assert (pages["level"], refuted["level"], split["level"], info["level"]) == ("error", "note", "warning", "note")
    # Locations: the file relative to the workdir, the line and the quoted text.
    (loc,) = pages["locations"]
    physical = loc["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "pages.py", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == {"startLine": 15, "snippet": {"text": "start = page * size"}}
    assert info["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "docs/x%20y%231.md"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file:///workspace/"
    # The invocation: the run's exit code (4: a finding has no verdict), and it ran to its end.
    (invocation,) = run["invocations"]
    assert invocation["exitCode"] == 4 and invocation["executionSuccessful"] is True
    assert invocation["startTimeUtc"].startswith("2023-11-14T22:13:20")
    assert run["automationDetails"]["id"] == "orch/mixed"
    assert run["properties"]["status"] == "incomplete"


def test_an_empty_run_is_valid_sarif_with_zero_results() -> None:
    data = valid_sarif(run_with("empty", []).report_sarif)
    (run,) = data["runs"]
    assert run["results"] == []
    assert run["invocations"][0]["exitCode"] == 0 and run["invocations"][0]["executionSuccessful"] is True
    assert len(run["tool"]["driver"]["rules"]) == 2  # ran and found nothing: code scanning closes old alerts


def test_a_run_still_going_has_no_exit_code_and_its_pending_findings_are_no_errors() -> None:
    claims = [Claim("pages", "F1", "paginate skips a page", severity="critical", verdicts=(C, None))]
    data = valid_sarif(run_with("going", claims, finished=False).report_sarif)
    (run,) = data["runs"]
    assert "exitCode" not in run["invocations"][0] and run["invocations"][0]["executionSuccessful"] is False
    (result,) = run["results"]
    assert result["properties"]["status"] == "pending" and result["level"] == "warning"


def test_the_fingerprint_is_the_same_in_a_second_run_for_the_same_claim_at_the_same_place() -> None:
    first = run_with("first", [Claim("pages", "F1", "paginate(items, 1, size) skips the first page")])
    # Another run, another workdir (absolute paths in the evidence), another finding id, other verdicts,
    # the claim worded with other spacing and case: the same alert.
    again = Claim(
        "pages", "F7", "Paginate(items, 1,  size) skips\nthe first page.", verdicts=(R, R), file="/ci/src/pages.py"
    )
    second = run_with("second", [again], workdir="/ci/src")
    one, two = (_results(valid_sarif(r.report_sarif)) for r in (first, second))
    (a,), (b,) = one.values(), two.values()
    assert a["partialFingerprints"] == b["partialFingerprints"]
    assert set(a["partialFingerprints"]) == {FINGERPRINT}
    assert b["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "pages.py"
    # Another claim, another file, another quote: another alert.
    here = CodeEvidence(file="pages.py", line=15, quote="start = page * size")
    base = fingerprint("paginate skips", here, "/workspace")
    assert fingerprint("mean skips", here, "/workspace") != base
    assert fingerprint("paginate skips", here.model_copy(update={"file": "other.py"}), "/workspace") != base
    assert fingerprint("paginate skips", here.model_copy(update={"quote": "end = start"}), "/workspace") != base
    assert fingerprint("paginate skips", here.model_copy(update={"line": 17}), "/workspace") == base  # code moved


@pytest.mark.parametrize(
    ("severity", "status", "expected"),
    [
        ("critical", FindingStatus.CONFIRMED, "error"),
        ("high", FindingStatus.CONFIRMED, "error"),
        ("medium", FindingStatus.CONFIRMED, "warning"),
        ("low", FindingStatus.CONFIRMED, "note"),
        ("info", FindingStatus.CONFIRMED, "note"),
        ("critical", FindingStatus.UNVERIFIED, "warning"),
        ("low", FindingStatus.UNVERIFIED, "note"),
        ("critical", FindingStatus.PENDING, "warning"),
        ("critical", FindingStatus.REFUTED, "note"),
        ("info", FindingStatus.REFUTED, "note"),
        ("bogus", FindingStatus.CONFIRMED, "warning"),  # an unknown severity counts as medium
    ],
)
def test_levels_follow_severity_and_status(severity: str, status: FindingStatus, expected: str) -> None:
    assert level(severity, status) == expected


def test_only_a_confirmed_finding_is_ever_an_error() -> None:
    for status in FindingStatus:
        for severity in Severity:
            got = level(severity.value, status)
            assert got != "error" or status is FindingStatus.CONFIRMED, (severity, status)
            if status is not FindingStatus.CONFIRMED:
                assert got in ("warning", "note"), (severity, status)
    assert set(LEVELS) == {FindingStatus.CONFIRMED, FindingStatus.UNVERIFIED, FindingStatus.REFUTED}


def test_worker_text_cannot_break_the_log() -> None:
    # A lying worker's claim, quote and file name: control characters, markup, quotes, a path outside.
    nasty = Claim("pages", "F1", 'x"}]}\x1b[31m</script>\x00 \u202e', quote="\x07'\"<>", file="../../etc/pass wd")
    outside = Claim("pages", "F2", "ok", file="/etc/passwd", line=1, quote="root")
    results = _results(valid_sarif(run_with("nasty", [nasty, outside]).report_sarif))
    first = results["pages-F1"]
    # No control character, and no bracket that could open or close a link (SARIF 2.1.0, 3.11.6).
    assert first["message"]["text"].startswith('x"}\\]} \\[31m</script>  \u202e')
    assert first["locations"][0]["physicalLocation"]["region"]["snippet"]["text"] == "\x07'\"<>"
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "../../etc/pass%20wd"
    loc = results["pages-F2"]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "file:///etc/passwd"}  # not under the workdir: an absolute URI, no base


def test_a_claim_cannot_make_a_link_in_its_alert() -> None:
    link = Claim("pages", "F1", "see [the fix](https://evil.example) \\[x\\](y) [t](1)", verdicts=(R, R))
    (result,) = _results(valid_sarif(run_with("links", [link]).report_sarif)).values()
    text = result["message"]["text"]
    assert text.startswith("see \\[the fix\\](https://evil.example) \\\\\\[x\\\\\\](y) \\[t\\](1)")
    # Every bracket in the text is escaped: an odd run of backslashes before each.
    for i, char in enumerate(text):
        if char in "[]":
            run = len(text[:i]) - len(text[:i].rstrip("\\"))
            assert run % 2 == 1, text
    justification = result["suppressions"][0]["justification"]
    assert justification == "REFUTED by its verifiers: W2: ran it: REFUTED; W3: ran it: REFUTED"


def test_the_schema_check_catches_what_code_scanning_would_refuse(tmp_path: Path) -> None:
    data = valid_sarif(run_with("checked", DEMO[:1]).report_sarif)
    broken = tmp_path / "broken.sarif"
    for path, value in (
        (("runs", 0, "results", 0, "level"), "fatal"),
        (("runs", 0, "tool", "driver", "informationUri"), "not a uri"),
        (("runs", 0, "invocations", 0, "startTimeUtc"), "yesterday"),
    ):
        copy = json.loads(json.dumps(data))
        node = copy
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        broken.write_text(json.dumps(copy))
        with pytest.raises(AssertionError, match=str(path[-1])):
            valid_sarif(broken)


def test_a_change_that_did_not_land_is_a_result_at_the_files_it_touched(tmp_path: Path) -> None:
    report = report_with_changes(run_with("changes", []))
    path = tmp_path / "report.sarif"
    path.write_text(render_sarif(report))
    results = valid_sarif(path)["runs"][0]["results"]
    by_task = {r["properties"]["task"]: r for r in results}
    assert set(by_task) == {"fix-b", "fix-c"}  # LANDED and UNCHANGED are no result
    rejected = by_task["fix-b"]
    assert rejected["level"] == "warning" and rejected["ruleId"] == "task/fix-b"
    assert rejected["properties"]["reason"] == "scope" and "protected paths" in rejected["message"]["text"]
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for loc in rejected["locations"]]
    assert uris == ["tests/test_pages.py", "pages.py"]
    assert rejected["properties"]["reviews"] == ["fix-a.rv1 W3 (codex): REFUTED: misses page 0"]
    # The gate caught it, for a task that needed no change: a suppressed result, its reason the justification.
    assert rejected["suppressions"] == [
        {"kind": "external", "status": "accepted",
         "justification": "REJECTED by the gate (scope): edits protected paths: tests/test_pages.py"}
    ]  # fmt: skip
    assert by_task["fix-c"]["level"] == "note" and "suppressions" not in by_task["fix-c"]
    needed = [r.model_copy(update={"fails": True}) if r.task == "fix-b" else r for r in report.changes]
    (alert,) = [r for r in build_sarif(report.model_copy(update={"changes": needed})).runs[0].results
                if r.properties is not None and getattr(r.properties, "task", None) == "fix-b"]  # fmt: skip
    assert alert.suppressions is None  # a change its task needed: the rejection is an alert
    again = report_with_changes(run_with("changes-again", []))
    assert valid_fingerprints(render_sarif(again)) == valid_fingerprints(path.read_text())


def valid_fingerprints(text: str) -> list[str]:
    return [r["partialFingerprints"][FINGERPRINT] for r in json.loads(text)["runs"][0]["results"]]
