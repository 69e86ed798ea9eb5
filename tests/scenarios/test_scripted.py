"""The fast tier's controller: `orch run` end to end, in process, with orch's scripted agent in real tmux panes.

No agent binary and no Docker: each worker is orch's scripted agent (orch.agents.scripted.turns), which
sends its prompts through the run's real gateway to the offline scripted model and runs the tool calls
the script asks for. So every effect the controller has (briefs delivered, outputs checked against the
tree and the gateway's ledger, corrections, nudges, restarts, verification rounds, budget stops) is the
real one, checked against events.jsonl, controller.json and report.json. What only a real agent CLI can
show (its dialogs, hooks, session resume, permission prompts) stays in the claude tier (test_claude.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orch.backends.local import relay
from orch.gateway.process import handle_path
from orch.jobs.state import JobStatus, load_state
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.spec.model import Role
from orch.waits import wait_for_paths, wait_until
from tests.helpers import PAGES_QUOTE, PAGES_REPRO, SAMPLE, orch, prompts
from tests.hostile import deputy_scripts
from tests.lead.leadrun import (
    DONE,
    MEAN_FINDING,
    PAGES_FINDING,
    RESULT,
    RUBBER_STAMP,
    assert_each_brief_sent_once,
    assert_never_self_verified,
    events,
    findings_step,
    reply,
    report,
    statuses,
    write_spec,
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    shutil.copytree(SAMPLE, path)
    return path


SABOTEUR = {"isolation": "shared"}
"""For a test whose worker plays saboteur of the run's own processes (the tmux server, the gateway), which a
strict sandbox hides from it: the test is of the controller's recovery, not of the isolation."""


def run_spec(
    tmp_path: Path, workdir: Path, name: str, tasks: list[dict[str, Any]], exit_code: int, **extra: Any
) -> RunFolder:
    """Run a spec of scripted workers to the end; the run folder, once it exited with `exit_code`."""
    extra.setdefault("agent", "scripted")
    extra.setdefault("timeouts", {"job": 90, "run": 120})  # a broken controller fails in minutes, not hangs
    extra.setdefault("limits", {})
    extra["limits"] = {"nudge_after": 30, **extra["limits"]}  # a nudge only where a test wants one
    spec = write_spec(tmp_path / f"{name}.yaml", workdir, tasks, **extra)
    # A writer (fixer, scribe) works in a worktree of the run's repository: the sample is no git repository.
    writers = any(t.get("role") in WRITERS for t in tasks)
    result = orch("run", spec, "--local", "--name", name, *(["--snapshot"] if writers else []))
    assert result.exit_code == exit_code, result.output
    return RunFolder.for_name(name)


def task(tid: str, script: list[dict[str, Any]], role: str = "finder", worker: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": tid, "role": role, "goal": f"Look into {tid}.", "offline_script": script}
    if worker is not None:
        out["worker"] = worker
    return out


WRITERS = ("writer", "fixer", "scribe")


def changes(run: RunFolder) -> dict[str, str]:
    """Each writer task's change status in report.json."""
    return {row["task"]: row["status"] for row in report(run)["changes"]}


FINDS_PAGES = [findings_step(PAGES_FINDING), RESULT, DONE, reply()]
FINDS_MEAN = [findings_step(MEAN_FINDING), RESULT, DONE, reply()]


# --- dispatch and verification -------------------------------------------------------------------
def test_findings_are_verified_by_other_workers_confirmed_or_refuted(workdir: Path, tmp_path: Path) -> None:
    """Two finders, each finding to the two other workers; orch runs each finding's reproduce command in the checks'
    sandbox first, and the verdicts come from the verifiers' own Bash calls (grep the quote) and orch's run, which
    they cite and no verifier runs itself."""
    tasks = [task("pages", FINDS_PAGES, worker=1), task("stats", FINDS_MEAN, worker=2)]
    run = run_spec(
        tmp_path, workdir, "verify", tasks, exit_code=0, workers=3, verification={"verifiers_per_finding": 2}
    )
    assert statuses(run) == {"pages-F1": "CONFIRMED", "stats-F1": "REFUTED"}
    state = load_state(run)
    assert_never_self_verified(state)
    assert_each_brief_sent_once(run, state)
    assert sorted(v.job for v in state.verdicts) == ["pages-F1.v1", "pages-F1.v2", "stats-F1.v1", "stats-F1.v2"]
    assert {e.data["finding"]: e.data["exit_code"] for e in events(run, Event.REPRODUCED)} == {
        "pages-F1": 0,
        "stats-F1": 1,
    }
    for verdict in state.verdicts:  # each cites orch's run of the reproduce command, and never ran it itself
        ledger = [json.loads(line) for line in run.model_ledger.read_text().splitlines()]
        ran = [e["input"]["command"] for e in ledger if e["worker"] == verdict.verifier and e["kind"] == "tool_use"
               and e.get("tool") == "Bash"]  # fmt: skip
        repro = state.finding(verdict.finding).finding.reproduce
        assert repro and ran and not any(repro in command for command in ran)
        assert repro in [getattr(ev, "command", None) for ev in verdict.report.evidence]
    assigned = [(e.worker, e.data["job"]) for e in events(run, Event.ASSIGNED)]
    assert assigned[:2] == [(1, "pages"), (2, "stats")]  # pinned tasks to their workers, first
    data = report(run)
    assert (data["exit_code"], data["status"]) == (0, "passed")  # the false positive caught: as designed
    assert {row["id"]: sorted(v["verdict"] for v in row["verdicts"]) for row in data["findings"]} == {
        "pages-F1": ["CONFIRMED", "CONFIRMED"],
        "stats-F1": ["REFUTED", "REFUTED"],
    }
    assert data["attempts"] == []  # honest workers: nothing refused, nothing left running


def test_find_refute_confirm_runs_round_three_for_survivors_and_the_fixer_last(workdir: Path, tmp_path: Path) -> None:
    tasks = [
        task("t1", [findings_step(PAGES_FINDING, {**MEAN_FINDING, "id": "F2"}), RESULT, DONE, reply()], worker=1),
        {"id": "fix", "role": "fixer", "goal": "Decide what change the confirmed findings call for."},  # orch's steps
    ]
    run = run_spec(tmp_path, workdir, "rounds", tasks, exit_code=4, workers=3,
                   verification={"rounds": "find-refute-confirm"})  # fmt: skip
    state = load_state(run)
    assert statuses(run) == {"t1-F1": "CONFIRMED", "t1-F2": "REFUTED"}
    assert sorted(v.job for v in state.verdicts) == ["t1-F1.c1", "t1-F1.r1", "t1-F2.r1"]
    assert [e.data["finding"] for e in events(run, Event.CONFIRM_ROUND)] == ["t1-F1"]
    assert state.job("t1-F1.c1").worker != state.job("t1-F1.r1").worker
    assert_never_self_verified(state)
    fix = state.job("fix")
    last_verdict = max(j.ended_at or 0 for j in state.jobs if j.role is Role.VERIFIER)
    assert fix.status is JobStatus.DONE and (fix.sent_at or 0) >= last_verdict
    for handed in (run.job_brief("fix").read_text(), run.job_result("fix").read_text()):
        assert "t1-F1" in handed and "t1-F2" not in handed  # the fixer is handed only what was confirmed
    assert fix.worker is not None and fix.workdir is not None
    assert Path(fix.workdir).is_relative_to(run.worktrees_dir(fix.worker))  # it wrote in its own worktree
    # orch's steps change nothing: a fixer handed a confirmed finding that leaves the tree as it was is open.
    assert changes(run) == {"fix": "UNCHANGED"}
    assert "change fix UNCHANGED" in report(run)["reason"]


def test_a_rubber_stamping_verifier_is_told_what_is_wrong_and_the_finding_stays_unverified(
    workdir: Path, tmp_path: Path
) -> None:
    """A verifier that confirms without evidence, then with a false quote, then citing a command it only
    echoed (a real Bash call in the gateway's ledger, but not a run of that command): each output is
    rejected with what is wrong, the job fails at the correction limit, the finding is UNVERIFIED."""
    run = run_spec(tmp_path, workdir, "stamp", [task("t1", FINDS_PAGES, worker=1)], exit_code=4, workers=2,
                   roles={"verifier": {"offline_script": RUBBER_STAMP}})  # fmt: skip
    state = load_state(run)
    assert [[p.kind.value for p in f.problems] for f in state.flags] == [
        ["no-evidence"],
        ["false-evidence"],
        ["unrun-command"],
    ]
    assert all(f.worker == 2 for f in state.flags)
    assert [e.worker for e in events(run, Event.CORRECTION_SENT)] == [2, 2]
    told = [p for p in prompts(run, 2) if p.startswith("orch: job t1-F1.v1 is not accepted yet")]
    assert len(told) == 2 and "needs evidence you checked" in told[0] and "is not in lines" in told[1]
    assert state.job("t1-F1.v1").status is JobStatus.FAILED and state.job("t1-F1.v1").corrections == 2
    (row,) = report(run)["findings"]
    assert row["status"] == "UNVERIFIED" and row["verdicts"][0]["verdict"] == "INVALID"


# --- corrections, nudges, restarts ---------------------------------------------------------------
def test_malformed_output_is_rejected_and_the_worker_corrects_it(workdir: Path, tmp_path: Path) -> None:
    """Findings that are not JSON, then a stale copy from an earlier job: each rejected with what is wrong,
    the worker asked again; its third try is accepted and verified."""
    stale = json.dumps({"job": "t1@00000000", "findings": [PAGES_FINDING]})
    script = [
        {"write": "{{findings_file}}", "content": "{not json"},
        RESULT,
        DONE,
        reply(),
        {"write": "{{findings_file}}", "content": stale},
        DONE,
        reply(),
        *FINDS_PAGES,
    ]
    run = run_spec(tmp_path, workdir, "fix-it", [task("t1", script)], exit_code=0, workers=2)
    state = load_state(run)
    rejected = [[p["kind"] for p in e.data["problems"]] for e in events(run, Event.OUTPUT_REJECTED)]
    assert rejected == [["malformed-output"], ["stale-output"]]
    t1 = state.job("t1")
    assert t1.status is JobStatus.DONE and t1.corrections == 2 and t1.worker is not None
    told = [p for p in prompts(run, t1.worker) if p.startswith("orch: job t1 is not accepted yet")]
    assert "is not valid JSON" in told[0] and "t1@00000000" in told[1] and "(correction 2 of 2)" in told[1]
    assert statuses(run) == {"t1-F1": "CONFIRMED"}
    assert report(run)["status"] == "passed"


def test_output_wrong_past_the_correction_limit_fails_the_job(workdir: Path, tmp_path: Path) -> None:
    no_evidence = {**PAGES_FINDING, "evidence": []}
    script = [findings_step(no_evidence), RESULT, DONE, reply()] * 2
    run = run_spec(tmp_path, workdir, "no-ev", [task("t1", script)], exit_code=5, workers=2,
                   limits={"max_corrections": 1})  # fmt: skip
    t1 = load_state(run).job("t1")
    assert t1.status is JobStatus.FAILED and t1.corrections == 1
    assert "still not acceptable after 1 correction(s)" in (t1.failure or "")
    assert [e.data["job"] for e in events(run, Event.JOB_FAILED)] == ["t1"]
    assert report(run)["status"] == "failed" and not report(run)["findings"]


def test_a_stalled_worker_is_nudged_and_finishes(workdir: Path, tmp_path: Path) -> None:
    """It writes its result and stops without the done flag: idle past nudge_after, it is nudged (the nudge
    names the done flag), and its next turn creates it."""
    script = [RESULT, reply("Written."), DONE, reply()]
    run = run_spec(tmp_path, workdir, "stall", [task("notes", script, role="scribe")], exit_code=0, workers=1,
                   limits={"nudge_after": 0.5})  # fmt: skip
    state = load_state(run)
    assert state.job("notes").status is JobStatus.DONE and state.job("notes").nudges == 1
    assert changes(run) == {"notes": "UNCHANGED"}  # a scribe that changed nothing completed: exit 0
    assert [e.worker for e in events(run, Event.NUDGE_SENT)] == [1]
    (nudge,) = [p for p in prompts(run, 1) if p.startswith("orch: job notes is not finished")]
    assert str(run.done(1)) in nudge


def test_a_worker_that_never_finishes_fails_after_its_nudges(workdir: Path, tmp_path: Path) -> None:
    run = run_spec(tmp_path, workdir, "idle", [task("notes", [RESULT, reply("Written.")], role="scribe")],
                   exit_code=5, workers=1, limits={"nudge_after": 0.3, "max_nudges": 2})  # fmt: skip
    notes = load_state(run).job("notes")
    assert notes.status is JobStatus.FAILED and notes.nudges == 2
    assert "idle without a done flag after 2 nudge(s)" in (notes.failure or "")
    assert len(events(run, Event.NUDGE_SENT)) == 2


def test_a_crashed_worker_is_restarted_and_pointed_back_at_its_brief(workdir: Path, tmp_path: Path) -> None:
    """Its agent is killed (SIGKILL, once) during the job: the controller sees the crash, restarts the worker
    after the backoff with a prompt naming its brief, and the new life finishes the job."""
    marker = RunFolder.for_name("crash").sessions(1) / "crashed-once"  # its sandbox may write there, and it stays
    crash_once = {"bash": f"[ -e {marker} ] || {{ touch {marker}; kill -9 $PPID; }}"}
    script = [crash_once, RESULT, DONE, reply()]
    run = run_spec(tmp_path, workdir, "crash", [task("notes", script, role="scribe")], exit_code=0, workers=1,
                   limits={"restart_backoff": 0.2})  # fmt: skip
    state = load_state(run)
    assert state.job("notes").status is JobStatus.DONE and state.book(1).restarts == 1
    assert changes(run) == {"notes": "UNCHANGED"}
    assert Path(state.book(1).cwd or "").is_relative_to(run.worktrees_dir(1))  # restarted in its worktree
    (crash,) = events(run, Event.CRASH_SEEN)
    assert "signal 9" in crash.data["why"] and crash.data["job"] == "notes"
    (restarted,) = events(run, Event.RESTARTED_WORKER)
    assert restarted.worker == 1 and restarted.data["restarts"] == 1
    starts = [e for e in run.hook_events(1) if e.hook_event_name == "SessionStart"]
    assert len(starts) == 3  # its launch, its move into the scribe's worktree, the restart (there too)
    assert len(events(run, Event.WORKER_MOVED)) == 1
    assert any(p.startswith("orch restarted you (killed by signal 9)") for p in prompts(run, 1))


def test_a_worker_that_keeps_crashing_is_taken_out_and_its_job_fails(workdir: Path, tmp_path: Path) -> None:
    script = [{"bash": "kill -9 $PPID"}, RESULT, DONE, reply()]
    run = run_spec(tmp_path, workdir, "crashes", [task("notes", script, role="scribe")], exit_code=5, workers=1,
                   limits={"restart_backoff": 0.1, "max_restarts": 1})  # fmt: skip
    state = load_state(run)
    book = state.book(1)
    assert book.restarts == 1 and book.dead is not None and "restart limit (1) reached" in book.dead
    assert [e.worker for e in events(run, Event.WORKER_OUT)] == [1]
    assert state.job("notes").status is JobStatus.FAILED
    assert report(run)["status"] == "failed"


def test_the_fleet_is_relaunched_after_its_tmux_server_dies(workdir: Path, tmp_path: Path) -> None:
    """The worker kills the fleet's tmux server mid-job (once): the controller relaunches the fleet on the same
    folder, re-points the worker at its brief, and it finishes; one gateway served both lives."""
    marker = tmp_path / "server-killed"
    kill_once = {"bash": f"[ -e {marker} ] || {{ touch {marker}; tmux kill-server; }}"}
    run = run_spec(tmp_path, workdir, "relaunch", [task("notes", [kill_once, RESULT, DONE, reply()], role="scribe")],
                   exit_code=0, workers=1, verification=SABOTEUR)  # fmt: skip
    state = load_state(run)
    assert state.job("notes").status is JobStatus.DONE and state.relaunches == 1
    assert changes(run) == {"notes": "UNCHANGED"}
    assert len(events(run, Event.FLEET_RELAUNCHING)) == 1 and len(events(run, Event.FLEET_RELAUNCHED)) == 1
    assert len(events(run, Event.CONTROLLER_STARTED)) == 1  # the same controller
    assert [e.worker for e in events(run, Event.REPOINT_SENT)] == [1]
    assert any(p.startswith("orch restarted you (relaunched)") for p in prompts(run, 1))
    assert len(events(run, Event.GATEWAY_STARTED)) == 1 and not handle_path("relaunch").exists()


def test_a_killed_gateway_is_started_again_and_the_worker_carries_on(workdir: Path, tmp_path: Path) -> None:
    """The worker SIGKILLs the run's gateway (once) mid-job: its next model call fails (or is the last answer
    of the server child closing after its supervisor), the controller's next look starts the gateway again on
    the same address with the workers' tokens (by the supervisor's pid: that closing child's health answer is
    not trusted, tests/fleet/test_rungateway_lost.py), waits out the failed turn and tells the worker to
    continue; it finishes without a restart."""
    marker, handle = tmp_path / "gateway-killed", handle_path("gk")
    pid = f'python3 -c \'import json; print(json.load(open("{handle}"))["pid"])\''
    kill_once = {"bash": f"[ -e {marker} ] || {{ touch {marker}; kill -9 $({pid}); }}"}
    run = run_spec(tmp_path, workdir, "gk", [task("notes", [kill_once, RESULT, DONE, reply()], role="scribe")],
                   exit_code=0, workers=1, limits={"restart_backoff": 0.2}, verification=SABOTEUR)  # fmt: skip
    assert load_state(run).job("notes").status is JobStatus.DONE
    started = events(run, Event.GATEWAY_STARTED)
    assert len(started) == 2 and started[1].data["replaces"] == started[0].data["pid"]
    assert started[1].data["url"] == started[0].data["url"]
    assert not events(run, Event.RESTARTED_WORKER)
    gateway_says = [json.loads(line) for line in run.model_log.read_text().splitlines()]
    assert "bad-token" not in [e["event"] for e in gateway_says]  # the worker's token lived on


def test_a_dead_relay_is_started_again_and_the_sandboxed_worker_carries_on(workdir: Path, tmp_path: Path) -> None:
    """Local strict: the relay of the workers' sockets is SIGKILLed mid-job (from outside: the worker's sandbox
    cannot see it); the controller's next look starts it again (relay-started), and the worker, never
    restarted, makes its next model calls through the same folder of sockets and finishes."""
    run, back = RunFolder.for_name("rk"), RunFolder.for_name("rk").root / "relay-back"
    wait = f"for i in $(seq 600); do [ -e {back} ] && break; sleep 0.1; done"  # the test's go, within a minute
    waiting = {"bash": f"touch {run.outbox(1)}/waiting; {wait}"}

    def kill_the_relay_once() -> None:
        wait_until(lambda: (run.outbox(1) / "waiting").exists(), 60, "the worker to wait mid-job")
        os.kill(wait_until(lambda: relay._running(run), 10, "the run's relay"), signal.SIGKILL)
        wait_until(lambda: events(run, Event.RELAY_STARTED), 30, "the controller to start the relay again")
        back.touch()

    killer = threading.Thread(target=kill_the_relay_once, daemon=True)
    killer.start()
    run = run_spec(tmp_path, workdir, "rk", [task("notes", [waiting, RESULT, DONE, reply()], role="scribe")],
                   exit_code=0, workers=1)  # fmt: skip
    killer.join(5)
    assert load_state(run).job("notes").status is JobStatus.DONE
    (started,) = events(run, Event.RELAY_STARTED)
    assert started.data["by"] == "controller"
    assert not events(run, Event.RESTARTED_WORKER)


def test_a_rate_limited_turn_is_continued(workdir: Path, tmp_path: Path) -> None:
    """The scripted model answers 429 (retry-after 1) through the gateway: the agent's turn ends on it, the
    controller waits what the gateway saw and tells the worker to continue."""
    script: list[dict[str, Any]] = [{"bash": "ls"}, {"fail": "rate_limit", "retry_after": 1}, RESULT, DONE, reply()]
    run = run_spec(tmp_path, workdir, "limited", [task("notes", script, role="scribe")], exit_code=0, workers=1,
                   limits={"rate_limit_wait": 600})  # fmt: skip
    (waited,) = events(run, Event.RATE_LIMITED)
    assert waited.worker == 1 and waited.data["wait_from"] == "gateway" and waited.data["wait"] <= 1
    assert [e.worker for e in events(run, Event.CONTINUE_SENT)] == [1]
    assert load_state(run).job("notes").status is JobStatus.DONE


def test_a_killed_controller_resumes_where_it_stopped(workdir: Path, tmp_path: Path) -> None:
    """SIGKILL `orch run` while one round-2 verdict is in and another verifier is at work; that verifier
    finishes while no controller runs. `orch run --resume` files its verdict, redoes nothing, opens round 3
    and ends the run."""
    gate = RunFolder.for_name("rs").root / "gate"  # in the run folder, which a verifier's sandbox reads
    second = {**PAGES_FINDING, "id": "F2"}
    tasks = [task("t1", [findings_step(PAGES_FINDING, second), RESULT, DONE, reply()], worker=1)]
    # The verifiers cite orch's run of the reproduce command (exit 0); t1-F2's round-2 verifier waits for the gate.
    cited = [{"file": "pages.py", "line": 15, "quote": PAGES_QUOTE}, {"command": PAGES_REPRO, "exit_code": 0}]
    verdict = {"job": "{{job}}", "finding": "{{finding_id}}", "verdict": "CONFIRMED", "reason": "it reproduces"}
    verifier = [
        {"bash": f"case {{{{finding_id}}}}.{{{{round}}}} in t1-F2.2) while [ ! -e {gate} ]; do sleep 0.1; done;; esac"},
        {"write": "{{verdict_file}}", "content": json.dumps({**verdict, "evidence": cited})},
        RESULT,
        DONE,
        reply(),
    ]
    spec = write_spec(tmp_path / "rs.yaml", workdir, tasks, agent="scripted", workers=3,
                      timeouts={"job": 90, "run": 120}, verification={"rounds": "find-refute-confirm"},
                      roles={"verifier": {"offline_script": verifier}})  # fmt: skip
    cmd = [sys.executable, "-c", "from orch.cli.main import main; main()", "run", str(spec), "--local", "--name", "rs"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = RunFolder.for_name("rs")
    try:

        def mid_verification() -> bool:
            if not run.events.exists():
                return False
            accepted = [e.data["job"] for e in events(run, Event.VERDICT_ACCEPTED)]
            return "t1-F1.r1" in accepted and "t1-F2.r1" in [e.data["job"] for e in events(run, Event.BRIEF_SENT)]

        wait_until(mid_verification, 60, "one verdict in and the other verification under way", interval=0.05)
    finally:
        first.kill()
        first.wait(30)
    before = load_state(run)
    slow_worker = before.job("t1-F2.r1").worker
    assert slow_worker is not None and before.job("t1-F2.r1").status is JobStatus.RUNNING
    gate.touch()
    assert not wait_for_paths([run.done(slow_worker)], 60)
    result = orch("run", "--resume", "rs")
    assert result.exit_code == 0, result.output
    state = load_state(run)
    assert len(events(run, Event.CONTROLLER_STARTED)) == 2
    assert statuses(run) == {"t1-F1": "CONFIRMED", "t1-F2": "CONFIRMED"}
    assert sorted(v.job for v in state.verdicts) == ["t1-F1.c1", "t1-F1.r1", "t1-F2.c1", "t1-F2.r1"]
    assert state.verdicts[0].job == "t1-F1.r1" and state.verdicts[0] == before.verdicts[0]  # not lost, not redone
    assert_each_brief_sent_once(run, state)
    assert_never_self_verified(state)
    for fid in ("t1-F1", "t1-F2"):  # round 3 went to a worker that had not judged the finding in round 2
        assert state.job(f"{fid}.c1").worker != state.job(f"{fid}.r1").worker


# --- deputies: nothing a worker wrote runs as another ---------------------------------------------
def test_a_finders_command_never_runs_as_its_verifiers_and_a_forged_verdict_is_refused(
    workdir: Path, tmp_path: Path
) -> None:
    """orch runs the hostile finder's reproduce command in the checks' sandbox, where it fails: its verifiers are
    told so and refute the claim. W2 runs the command in its own shell anyway; the forger it leaves rewrites W2's
    verdict after W2 wrote it. That verdict is no call of W2's: refused as forged, the forger stopped, and W2's
    verdict written again is accepted."""
    finder, verifier = deputy_scripts(PAGES_FINDING, PAGES_QUOTE)
    run = run_spec(tmp_path, workdir, "deputies", [task("t1", finder, worker=1)], exit_code=0,
                   workers=3, verification={"verifiers_per_finding": 2}, limits={"max_corrections": 1},
                   roles={"verifier": {"offline_script": verifier}})  # fmt: skip
    (reproduced,) = events(run, Event.REPRODUCED)
    assert reproduced.data["exit_code"] == 2  # in the sandbox: no run folder, so no script and no forger
    (forged,) = events(run, Event.VERDICT_FORGED)
    assert forged.worker == 2 and forged.data["verdict"] == "CONFIRMED"
    stopped = [e for e in events(run, Event.LEFTOVERS_STOPPED) if e.worker == 2]
    assert stopped and stopped[0].data["killed"]
    state = load_state(run)
    assert statuses(run) == {"t1-F1": "REFUTED"}
    assert sorted((v.verifier, v.report.reason) for v in state.verdicts) == [
        (2, "orch's run failed"),
        (3, "orch's run failed"),
    ]
    flagged = [p.kind for f in state.flags for p in f.problems]
    assert flagged == ["forged-output"]


# --- budget --------------------------------------------------------------------------------------
def test_the_fleets_token_budget_stops_the_run(workdir: Path, tmp_path: Path) -> None:
    script = [{"bash": "grep -n def stats.py"}, {"bash": "grep -n return stats.py"}, RESULT, DONE, reply()]
    run = run_spec(tmp_path, workdir, "budget", [task("notes", script, role="scribe")], exit_code=5, workers=1,
                   budget={"max_tokens": 500})  # fmt: skip
    (aborted,) = events(run, Event.ABORTED)
    assert "500" in aborted.data["reason"], aborted.data
    (exceeded,) = events(run, Event.BUDGET_EXCEEDED)
    assert exceeded.worker is None and exceeded.data["reason"] == aborted.data["reason"]
    (warned,) = events(run, Event.BUDGET_WARNING)  # 80 % spent: said once, before (or with) the overrun
    assert warned.worker is None and warned.data["cap"] == "max_tokens" and warned.ts <= exceeded.ts
    (finished,) = events(run, Event.FINISHED)  # what a person hears of the end (orch.notify)
    assert finished.data["status"] == "failed" and finished.data["cost_usd"] >= 0
    assert load_state(run).job("notes").status is JobStatus.CANCELLED
    data = report(run)
    assert data["status"] == "failed" and "500" in data["reason"]


def test_a_worker_over_its_own_budget_gets_no_more_jobs(workdir: Path, tmp_path: Path) -> None:
    """Worker 1 spends its tokens on a long first job (its history grows with each long tool output) and is
    capped; the other tasks go to worker 2."""
    long = [{"bash": "seq 1 5000"} for _ in range(5)]
    tasks = [
        task("a", [*long, RESULT, DONE, reply()], role="scribe", worker=1),
        task("b", [RESULT, DONE, reply()], role="scribe"),
        task("c", [RESULT, DONE, reply()], role="scribe"),
    ]
    run = run_spec(tmp_path, workdir, "cap", tasks, exit_code=5, workers=2,
                   budget={"max_tokens_per_worker": 20000})  # fmt: skip
    state = load_state(run)
    assert state.book(1).capped and not state.book(2).capped
    over = [e for e in events(run, Event.BUDGET_EXCEEDED) if e.worker == 1]
    assert len(over) == 1 and over[0].data["source"] == "gateway"
    assert state.job("a").status is JobStatus.FAILED and "budget exceeded" in (state.job("a").failure or "")
    assert {state.job("b").worker, state.job("c").worker} == {2}
    assert state.job("b").status is JobStatus.DONE and state.job("c").status is JobStatus.DONE
