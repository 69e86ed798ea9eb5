"""orch/lead/changes/writing.py: the changes flow end to end on a real tmux server with orch's scripted agent
(fast tier): writers in their own worktrees, the gate, reviewers, the integration queue, rebases, hostile writers and
reviewers;
the checks off the controller's loop (a slow check holds up no nudge or restart, a controller killed mid-check
checks again, a hanging check times out), `change: required`, and a controller killed around a writer's done
flag (its change taken at the resume, or refused when a job was saved done without it).

The scripted agent runs the `$ ` lines of its brief in its cwd: the role templates below turn each task's goal
into those lines, so a writer's lines run in the worktree the controller started it in, a reviewer's in its
read-only checkout of base + patch. The scripted agent calls no model, so the gateway's ledger holds none of its
commands: an honest approval cannot be shown here (the real agents' demo test does), so the tests of the gate and
the queue run with `reviewers_per_change: 0`, and the lazy reviewer's test shows the refusal. The tests of the
checks off the loop drive the scripted agent with offline scripts through the run's gateway instead (as
tests/scenarios/test_scripted.py does), so a worker can crash, idle and be nudged while a check hangs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from orch.entry.demo import DEMO_AUTHOR, prepare_changes
from orch.jobs.changes import ChangeStatus
from orch.jobs.state import ChangeStage, ControllerState, JobStatus, load_state, save_state
from orch.lead import base
from orch.lead.changes.repo import branch_name
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import Isolation
from orch.waits import wait_until
from tests.helpers import SAMPLE as SAMPLE_FILES
from tests.helpers import diagnose, ended, orch, own_processes, run_events
from tests.lead.changes.gitfix import BROKEN_MEAN, PYTEST, RUNNER_CHECKS, SELF_GRADING, runner_project
from tests.lead.leadrun import DONE, RESULT, reply, write_spec
from tests.lead.leadrun import events as leadrun_events

SAMPLE = Path(__file__).parents[3] / "orch" / "data" / "demo" / "changes" / "sample"
CHECK = "python3 -B test_calc.py"
MEAN_FIX = "$ sed -i 's|return sum(values) / len(values)|return sum(values) / len(values) if values else 0.0|' calc.py"
NOTE = "$ sed -i '/return sum(values)/ s|$|  # the arithmetic mean|' calc.py"
CLAMP = "$ sed -i 's|return max(low, min(x, high))|return min(max(x, low), high)|' calc.py"

WRITER = """\
Job {{job_id}} in {{workdir}}.
{{goal}}
$ echo "{{title}}: done" > {{result_file}}
$ touch {{done_file}}
"""


def _verdict(verdict: str, evidence: str) -> str:
    body = (
        '{"job": "{{job}}", "finding": "{{change_id}}", "verdict": "' + verdict + '", "reason": "checked", '
        '"evidence": [' + evidence + "]}"
    )
    return f"$ echo '{body}' > {{{{verdict_file}}}}"


LAZY_REVIEW = f"""\
Review {{{{change_id}}}}: approved without running anything.
{_verdict("CONFIRMED", '{"file": "calc.py", "line": 1, "quote": "A tiny calculator"}')}
$ echo reviewed > {{{{result_file}}}}
$ touch {{{{done_file}}}}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The user's repository: the demo's tiny calculator, one commit."""
    work = tmp_path / "repo"
    shutil.copytree(SAMPLE, work)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*DEMO_AUTHOR, "commit", "-q", "-m", "calc"]):
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True)
    return work


def _run(
    repo: Path, name: str, tasks: list[dict[str, Any]], reviewer: str = LAZY_REVIEW, reviewers: int = 0
) -> RunFolder:
    spec = {
        "workdir": str(repo),
        "agent": "scripted",
        "workers": 3,
        "checks": [CHECK],
        "roles": {"writer": {"template": WRITER}, "reviewer": {"template": LAZY_REVIEW}},
        "tasks": tasks,
        "timeouts": {"boot": 30, "job": 60, "run": 240},
        "limits": {"nudge_after": 5, "max_nudges": 1, "max_corrections": 1},
        "changes": {"reviewers_per_change": reviewers},
    }
    path = repo.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    result = orch("run", path, "--local", "--name", name)
    run = RunFolder.for_name(name)
    assert result.exit_code in (0, 4), result.output + diagnose(run)
    # The user's repository is only read.
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout == head
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    return run


def _rows(run: RunFolder) -> dict[str, dict[str, Any]]:
    report = json.loads(run.report_json.read_text())
    return {row["task"]: row for row in report["changes"]}


def test_honest_lands_scope_and_leftover_process_are_refused(repo: Path) -> None:
    """Three writers at once: the honest fix lands; the
    test-editing "fix" is REJECTED (scope) with no review asked; the writer that leaves a process to edit its
    worktree after its done flag is REJECTED, and its change was taken from the snapshot (no late edit in it)."""
    # The lurker edits once its job is accepted (the test says so: `go`), which comes after the take (the change's
    # snapshot, then the look for what the writer left running): it is running at that look however slow the
    # machine, and its edit, if it comes before it is stopped, lands in the worktree only, never in the change.
    # (A sleep of a minute before the edit raced the take, as a sleep of two seconds had, only less often.)
    hostile = RunFolder.for_name("chg-hostile")
    go = hostile.root / "go"
    edit = f"until [ -e {go} ]; do sleep 0.05; done; echo 'evil = 1' >> calc.py"
    lurker = f"{CLAMP}\n$ ({edit}) </dev/null >/dev/null 2>&1 &"

    def release() -> None:
        try:
            wait_until(
                lambda: _has(hostile, Event.JOB_ACCEPTED, job="lurk") or _ended(hostile),
                240, "the lurker's job to be accepted (or the run to end)",
            )  # fmt: skip
        finally:
            if hostile.root.is_dir():
                go.touch()

    watcher = Watcher(release)
    run = _run(
        repo,
        "chg-hostile",
        [
            {"id": "mean", "role": "writer", "goal": MEAN_FIX, "worker": 1},
            {"id": "cheat", "role": "writer", "goal": "$ sed -i '/clamp(-1, 0, 3)/d' test_calc.py", "worker": 2},
            {"id": "lurk", "role": "writer", "goal": lurker, "worker": 3},
        ],
    )
    watcher.join()
    rows = _rows(run)
    assert rows["mean"]["status"] == ChangeStatus.LANDED, rows
    assert rows["cheat"]["status"] == ChangeStatus.REJECTED and rows["cheat"]["reason"] == "scope"
    assert "test_calc.py" in rows["cheat"]["detail"] and not rows["cheat"]["reviews"]
    assert rows["lurk"]["status"] == ChangeStatus.REJECTED and "process" in rows["lurk"]["detail"]
    assert "evil" not in (run.change_dir("lurk") / "patch.diff").read_text()
    # Each writer worked in its own worktree, its agent started there.
    moved = {e["worker"]: e["data"]["workdir"] for e in run_events(run, Event.WORKER_MOVED) if e["data"]["job"] in rows}
    assert moved == {n: str(run.worktrees_dir(n) / job) for n, job in ((1, "mean"), (2, "cheat"), (3, "lurk"))}
    # The gate caught two bad changes to tasks that needed none: its verdicts, a run that went as designed.
    assert json.loads(run.report_json.read_text())["exit_code"] == 0
    landed = subprocess.run(
        ["git", "--git-dir", str(run.repo_dir), "show", f"orch/{run.name}:calc.py"], capture_output=True, text=True
    ).stdout
    assert "if values else 0.0" in landed and "evil" not in landed and "min(max(" not in landed
    assert "## Changes" in run.report_md.read_text()


def test_a_reviewer_that_ran_nothing_is_refused(repo: Path) -> None:
    """An approval citing no command it ran: refused (told once), then the review job fails and the change is
    REJECTED for review; the attempt is in the report."""
    run = _run(repo, "chg-lazy", [{"id": "mean", "role": "writer", "goal": MEAN_FIX, "worker": 1}], reviewers=1)
    row = _rows(run)["mean"]
    assert row["status"] == ChangeStatus.REJECTED and row["reason"] == "review", row
    assert any(cell["verdict"] == "REFUSED" for cell in row["reviews"])
    problems = [p for e in run_events(run, Event.OUTPUT_REJECTED) for p in e["data"]["problems"]]
    assert any("approval needs a command" in p["detail"] for p in problems)


def test_two_changes_to_one_line_land_one_after_the_other(repo: Path) -> None:
    """The second to reach the queue conflicts, goes back to its writer as a rebase job at the new head (a fresh
    worktree) and lands; exit 0."""
    run = _run(
        repo,
        "chg-rebase",
        [
            {"id": "mean", "role": "writer", "goal": MEAN_FIX, "worker": 1},
            {"id": "note", "role": "writer", "goal": NOTE, "worker": 2},
        ],
    )
    rows = _rows(run)
    assert {t: r["status"] for t, r in rows.items()} == {"mean": "LANDED", "note": "LANDED"}, rows
    assert sorted(r["rebases"] for r in rows.values()) == [0, 1]
    state = load_state(run)
    rebased = next(c for c in state.changes if c.rebase_of is not None)
    assert rebased.stage is ChangeStage.LANDED
    assert any(e["data"]["workdir"].endswith(rebased.id) for e in run_events(run, Event.WORKER_MOVED))
    assert json.loads(run.report_json.read_text())["exit_code"] == 0
    landed = subprocess.run(
        ["git", "--git-dir", str(run.repo_dir), "show", f"orch/{run.name}:calc.py"], capture_output=True, text=True
    ).stdout
    assert "if values else 0.0  # the arithmetic mean" in landed


def test_demo_changes_and_mixed_are_two_demos() -> None:
    result = orch("demo", "--changes", "--mixed")
    assert result.exit_code == 2 and "two different demos" in result.output


def test_demo_changes_workdir_is_a_fresh_git_repository() -> None:
    """The demo's workdir: the calculator committed once, clean (a run with writers starts from its HEAD)."""
    spec, _ = prepare_changes("chg-prep")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=spec.workdir, capture_output=True, text=True)
    assert status.returncode == 0 and status.stdout == ""
    assert [t.id for t in spec.tasks] == ["mean", "cheat", "note"] and spec.checks == [CHECK]
    assert {kind for kind, _ in spec.agent_models().values()} == {"claude", "codex"}


OUTSIDE = {
    "another writer's worktree": "echo 'evil = 1' >> {{run_dir}}/worktrees/agent-1/mean/calc.py",
    "beside its own worktree (where its next job's goes)": "echo x > {{run_dir}}/worktrees/agent-2/next",
    "the changes folder": "mkdir -p {{run_dir}}/changes/mean && echo LANDED > {{run_dir}}/changes/mean/evil.json",
    "the findings folder": "mkdir -p {{run_dir}}/findings && echo '{}' > {{run_dir}}/findings/evil.json",
    "the controller's events": """echo '{"event": "change-landed"}' >> {{run_dir}}/events.jsonl""",
    "the report": "echo '{}' > {{run_dir}}/report.json",
    "the run's refs": "git --git-dir={{run_dir}}/repo.git update-ref refs/heads/evil HEAD",
    "the run's objects": "echo evil | git --git-dir={{run_dir}}/repo.git hash-object -w --stdin",
    "the run's hooks": "echo 'touch /tmp/pwned' > {{run_dir}}/repo.git/hooks/post-merge",
    "the run's config": "git --git-dir={{run_dir}}/repo.git config core.hooksPath /tmp",
}
"""What a hostile writer tries beyond its worktree (each `$ ` line a shell call of its own)."""
LINKS = (
    "$ mkdir -p sub && ln -s .. sub/up && ln -s sub/up/.. escape && ln -s l2 l1 && ln -s l1 l2 && ln -s .git/config g"
)
"""Links in its own worktree whose text each stays inside: `escape` leads out (through `sub/up`)."""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_writer_cannot_write_outside_its_worktree(repo: Path) -> None:
    """Under local strict isolation (bubblewrap), a writer that writes into another writer's worktree, the run
    folder and the run's repository is refused each time, lands nothing of it, and each attempt is flagged in the
    report; the honest writer beside it lands."""
    root = str(RunFolder.for_name("chg-outside").root)  # a goal is not a template: the run's folder, spelled out
    attempts = "\n".join(f"$ {line.replace('{{run_dir}}', root)}" for line in OUTSIDE.values())
    attempts += f"\n{LINKS}"
    run = _run(
        repo,
        "chg-outside",
        [
            {"id": "mean", "role": "writer", "goal": MEAN_FIX, "worker": 1},
            {"id": "clamp", "role": "writer", "goal": f"{CLAMP}\n{attempts}", "worker": 2},
        ],
    )
    assert run.info().isolation is Isolation.STRICT
    rows = _rows(run)
    assert rows["mean"]["status"] == ChangeStatus.LANDED, rows
    # Links that each look inside but lead out (or loop, or into .git): its change is refused, never applied.
    assert rows["clamp"]["status"] == ChangeStatus.REJECTED and rows["clamp"]["reason"] == "scope", rows["clamp"]
    for refused in ("escape: a link out of the tree", "l1: a chain of links that never ends", "g: a link into git"):
        assert refused in rows["clamp"]["detail"], rows["clamp"]["detail"]
    git = ["git", "--git-dir", str(run.repo_dir)]
    landed = subprocess.run([*git, "show", f"orch/{run.name}:calc.py"], capture_output=True, text=True).stdout
    assert "if values else 0.0" in landed and "evil" not in landed
    # Nothing it wrote outside its worktree is there, nor in any change.
    refs = subprocess.run([*git, "for-each-ref", "--format=%(refname)"], capture_output=True, text=True).stdout
    assert "evil" not in refs, refs
    blob = subprocess.run([*git, "hash-object", "--stdin"], input="evil\n", capture_output=True, text=True).stdout
    assert subprocess.run([*git, "cat-file", "-e", blob.strip()], capture_output=True).returncode != 0
    assert not (run.repo_dir / "hooks" / "post-merge").exists()
    config = subprocess.run([*git, "config", "--get", "core.hooksPath"], capture_output=True, text=True).stdout
    assert config == ""
    assert not (run.change_dir("mean") / "evil.json").exists() and not (run.root / "findings" / "evil.json").exists()
    assert not (run.worktrees_dir(2) / "next").exists()
    assert '"event": "change-landed"}' not in run.events.read_text()
    for task in rows:
        assert "evil" not in (run.change_dir(task) / "patch.diff").read_text()
    # Each attempt was refused by the sandbox, and the report shows it.
    flagged = [e for e in run_events(run, Event.WRITE_DENIED) if e["worker"] == 2]
    denied = [c for e in flagged for c in e["data"]["commands"]]
    for what, line in OUTSIDE.items():
        assert any(line.replace("{{run_dir}}", root) in c for c in denied), (what, denied)
    report = json.loads(run.report_json.read_text())
    assert ("write-denied", 2) in {(a["kind"], a["worker"]) for a in report["attempts"]}
    assert "write-denied" in run.report_md.read_text()


# --- the checks off the controller's loop, and `change: required` (offline scripts through the gateway) -----------
HOLD = "if [ -e hold.sh ]; then sh hold.sh; fi"
"""The check: it passes on the base; a change that adds hold.sh makes it run that (a sleep a test ends)."""


def _hold_argv(seconds: int) -> list[str]:
    """hold.sh's sleep: about `seconds`, its argument this test process's own (its pid as the fraction). Other
    engineers run the same tests on this machine, some with copies of this file that killed every `sleep SECONDS`
    on the machine: one killed this test's hold (its check then passed early, before the events it must come
    after)."""
    return ["sleep", f"{seconds}.{os.getpid()}"]


def _hold(seconds: int) -> dict[str, str]:
    """A writer's step: a hold.sh whose sleep (found and killed by the test) hangs the check."""
    return {"write": "{{workdir}}/hold.sh", "content": f"{' '.join(_hold_argv(seconds))}\nexit 0\n"}


def _sleepers(seconds: int, root: int | None = None) -> list[psutil.Process]:
    """hold.sh's sleep in this test's checks (`root`'s tree: by default this process's, where an in-process
    `orch run` starts them), never another test's."""
    return own_processes(_hold_argv(seconds), root)


def _kill_sleepers(seconds: int) -> bool:
    for proc in _sleepers(seconds):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return False


def _offline_spec(tmp_path: Path, name: str, tasks: list[dict[str, Any]], **extra: Any) -> Path:
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLE_FILES, workdir)
    extra.setdefault("timeouts", {"job": 90, "run": 150})
    extra.setdefault("limits", {"nudge_after": 30})
    return write_spec(tmp_path / f"{name}.yaml", workdir, tasks, agent="scripted", checks=[HOLD], **extra)


def _writer(tid: str, script: list[dict[str, Any]], worker: int, role: str = "writer", **more: Any) -> dict[str, Any]:
    return {"id": tid, "role": role, "goal": f"Work on {tid}.", "worker": worker, "offline_script": script, **more}


def _index(run: RunFolder, name: Event, nth: int = 0, **match: Any) -> int:
    """Where the nth event `name` whose worker or data match is in events.jsonl (ordering, not timings)."""
    found = [
        i
        for i, e in enumerate(leadrun_events(run))
        if e.event == name and all((e.worker if k == "worker" else e.data.get(k)) == v for k, v in match.items())
    ]
    assert len(found) > nth, (name, match, found)
    return found[nth]


class Watcher:
    """A thread beside `orch run`: the test's side of a run (release a worker, end a check), its error kept."""

    def __init__(self, target: Any) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self._thread.start()

    def _run(self, target: Any) -> None:
        try:
            target()
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc

    def join(self) -> None:
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def _ended(run: RunFolder) -> bool:
    return run.events.exists() and any(e.event == Event.FINISHED for e in leadrun_events(run))


def test_a_slow_check_does_not_hold_up_nudges_or_restarts(tmp_path: Path) -> None:
    """Worker 1's change makes the check hang; while it runs, worker 2 crashes and is restarted, idles and is
    nudged, and finishes its job: all of it before the check ends (events.jsonl's order). Then the change lands."""
    name = "slowcheck"
    run = RunFolder.for_name(name)
    go, marker = run.root / "go", run.sessions(2) / "crashed-once"
    scribe = [
        {"bash": f"while [ ! -e {go} ]; do sleep 0.05; done"},  # starts once the check runs
        {"bash": f"[ -e {marker} ] || {{ touch {marker}; kill -9 $PPID; }}"},
        RESULT,
        reply("Written."),  # idle without its done flag: nudged
        DONE,
        reply(),
    ]
    tasks = [_writer("w", [_hold(86399), RESULT, DONE, reply()], 1), _writer("notes", scribe, 2, role="scribe")]
    spec = _offline_spec(
        tmp_path,
        name,
        tasks,
        workers=2,
        changes={"reviewers_per_change": 0},
        limits={"nudge_after": 0.5, "restart_backoff": 0.2},
    )

    def side() -> None:
        try:
            wait_until(lambda: _has(run, Event.CHECKS_STARTED, change="w"), 120, "worker 1's checks to start")
            go.touch()
            wait_until(lambda: _has(run, Event.JOB_ACCEPTED, job="notes"), 120, "worker 2's job, during the check")
        finally:  # end each hold (the gate's, then the integration's) until the run is over
            wait_until(lambda: _kill_sleepers(86399) or _ended(run), 150, "the run to end")

    watcher = Watcher(side)
    result = orch("run", spec, "--local", "--name", name, "--snapshot")
    watcher.join()
    assert result.exit_code == 0, result.output + diagnose(run)
    checks_started = _index(run, Event.CHECKS_STARTED, change="w", work="gate")
    restarted = _index(run, Event.RESTARTED_WORKER, worker=2)
    # The nudge after its restart: on a loaded machine a brief's prompt may take longer than nudge_after (0.5 s)
    # to reach the agent's hook, and the worker is nudged then too.
    nudges = [i for i, e in enumerate(leadrun_events(run)) if e.event == Event.NUDGE_SENT and e.worker == 2]
    nudged = next(i for i in nudges if i > restarted)
    accepted = _index(run, Event.JOB_ACCEPTED, job="notes")
    checks_ended = _index(run, Event.CHECKS_ENDED, change="w", work="gate")
    assert checks_started < restarted < nudged < accepted < checks_ended
    assert _index(run, Event.CHECKS_STARTED, change="w", work="integration") > checks_ended
    assert _rows(run)["w"]["status"] == ChangeStatus.LANDED and _rows(run)["notes"]["status"] == "UNCHANGED"


def _has(run: RunFolder, name: Event, **match: Any) -> bool:
    if not run.events.exists():
        return False
    return any(e.event == name and all(e.data.get(k) == v for k, v in match.items()) for e in leadrun_events(run))


def test_a_controller_killed_mid_check_checks_again_when_resumed(tmp_path: Path) -> None:
    """SIGKILL `orch run` while a change's checks run: the check's sandbox dies with it (no process left), its
    books still say CHECKING, and `orch run --resume` runs the checks again (never a half result) and lands it."""
    name = "killcheck"
    run = RunFolder.for_name(name)
    spec = _offline_spec(tmp_path, name, [_writer("w", [_hold(86398), RESULT, DONE, reply()], 1)], workers=1)
    cmd = [sys.executable, "-c", "from orch.cli.main import main; main()", "run", str(spec), "--local"]
    first = subprocess.Popen([*cmd, "--name", name, "--snapshot"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        hung = wait_until(lambda: _sleepers(86398, first.pid), 120, "the change's check to hang in its sandbox")
    finally:
        first.kill()
        first.wait(30)
    # Its sandbox is no child of this process once `first` is gone: the processes found are waited on.
    wait_until(lambda: ended(hung), 30, "the check's processes to die with their controller")
    assert load_state(run).change("w").stage is ChangeStage.CHECKING
    watcher = Watcher(lambda: wait_until(lambda: _kill_sleepers(86398) or _ended(run), 150, "the run to end"))
    result = orch("run", "--resume", name)
    watcher.join()
    assert result.exit_code == 0, result.output + diagnose(run)
    second_life = _index(run, Event.CONTROLLER_STARTED, nth=1)
    assert _index(run, Event.CHECKS_STARTED, nth=1, change="w", work="gate") > second_life  # started again
    assert _index(run, Event.CHECKS_ENDED, change="w", work="gate") > second_life  # the only end: the second's
    assert load_state(run).change("w").stage is ChangeStage.LANDED


def test_a_hanging_check_times_out_and_a_required_change_that_never_came_fails(tmp_path: Path) -> None:
    """A check that would hang for a day is killed at check_timeout (the change REJECTED for its checks, nothing
    left running); a writer whose task says `change: required` and that changes nothing fails its task. Both tasks
    need their change: neither REJECTED nor left as it was is then a result, and the run is incomplete."""
    name = "hangcheck"
    run = RunFolder.for_name(name)
    tasks = [
        _writer("hang", [_hold(86397), RESULT, DONE, reply()], 1, change="required"),
        _writer("idle", [RESULT, DONE, reply()], 2, change="required"),
    ]
    spec = _offline_spec(tmp_path, name, tasks, workers=2, changes={"reviewers_per_change": 0, "check_timeout": 1})
    result = orch("run", spec, "--local", "--name", name, "--snapshot")
    assert result.exit_code == 4, result.output + diagnose(run)
    rows = _rows(run)
    assert rows["hang"]["status"] == ChangeStatus.REJECTED and rows["hang"]["reason"] == "checks", rows["hang"]
    (check,) = rows["hang"]["checks"]
    assert check["timed_out"] and check["exit_code"] is None
    assert not _sleepers(86397)
    assert rows["idle"]["status"] == ChangeStatus.FAILED
    assert "requires a change (change: required)" in rows["idle"]["detail"]
    reason = json.loads(run.report_json.read_text())["reason"]
    assert "change idle FAILED (the task requires a change" in reason and "change hang REJECTED" in reason


def test_a_controller_killed_at_a_writers_done_flag_takes_its_change_at_the_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL `orch run` while two writers work; both then finish while no controller runs. Worker 1's job is
    left running with its done flag there: what a controller killed anywhere before the one save that accepts a
    writer's job and records its change leaves. `orch run --resume` collects it and lands its change. Worker 2's
    job is saved done with no change, as a controller that saved the two apart left it when killed between them,
    and worker 2 kept writing its worktree after that: the resume takes nothing from it (its change FAILED,
    saying why), so no later edit lands by forcing a resume. Every controller.json the resumed controller
    writes (each one a state a kill could leave) that has worker 1's job done has its change too."""
    name = "killdone"
    run = RunFolder.for_name(name)
    go = run.root / "go"

    def script(n: int, file: str) -> list[dict[str, Any]]:
        ready = run.sessions(n) / "ready"
        wait = {"bash": f"touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done"}
        return [wait, {"write": f"{{{{workdir}}}}/{file}", "content": f"{file}\n"}, RESULT, DONE, reply()]

    tasks = [_writer("w", script(1, "notes.md"), 1), _writer("old", script(2, "late.md"), 2)]
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLE_FILES, workdir)
    spec = write_spec(
        tmp_path / f"{name}.yaml",
        workdir,
        tasks,
        agent="scripted",
        workers=2,
        changes={"reviewers_per_change": 0},
        timeouts={"job": 90, "run": 150},
        limits={"nudge_after": 30},
    )
    cmd = [sys.executable, "-c", "from orch.cli.main import main; main()", "run", str(spec), "--local"]
    first = subprocess.Popen([*cmd, "--name", name, "--snapshot"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def both_working() -> bool:
        if not all((run.sessions(n) / "ready").exists() for n in (1, 2)):
            return False
        state = load_state(run)
        return all(state.job(j).status is JobStatus.RUNNING for j in ("w", "old"))

    try:
        wait_until(both_working, 120, "both writers to be running, waiting for the test's go")
    finally:
        first.kill()
        first.wait(30)
    state = load_state(run)
    old = state.job("old")
    old.status, old.ended_at, state.book(2).job = JobStatus.DONE, time.time(), None
    save_state(run, state)
    go.touch()
    wait_until(lambda: run.done(1).exists() and run.done(2).exists(), 60, "both writers' done flags")
    saved: list[tuple[JobStatus, bool]] = []

    def save(folder: RunFolder, state: ControllerState) -> None:  # the real save, each state it writes noted
        saved.append((state.job("w").status, any(c.id == "w" for c in state.changes)))
        save_state(folder, state)

    monkeypatch.setattr(base, "save_state", save)
    result = orch("run", "--resume", name)
    assert result.exit_code == 4, result.output + diagnose(run)
    second_life = _index(run, Event.CONTROLLER_STARTED, nth=1)
    assert _index(run, Event.JOB_ACCEPTED, job="w") > second_life
    assert _index(run, Event.CHANGE_TAKEN, job="w") > second_life
    rows = _rows(run)
    assert rows["w"]["status"] == ChangeStatus.LANDED, rows["w"]
    assert rows["old"]["status"] == ChangeStatus.FAILED and "not taken at the resume" in rows["old"]["detail"]
    assert not run.change_dir("old").exists()  # nothing of its worktree was read
    ended = [e for e in run_events(run, Event.CHANGE_ENDED) if e["data"]["change"] == "old"]
    assert [e["data"]["status"] for e in ended] == ["FAILED"]
    git = ["git", "--git-dir", str(run.repo_dir), "ls-tree", "-r", "--name-only", branch_name(name)]
    landed = subprocess.run(git, capture_output=True, text=True, check=True).stdout.split()
    assert "notes.md" in landed and "late.md" not in landed
    assert (JobStatus.DONE, True) in saved and (JobStatus.DONE, False) not in saved, saved
    final = load_state(run)
    assert [c.id for c in final.changes].count("w") == 1 and final.job("w").status is JobStatus.DONE


def _writes(files: dict[str, str]) -> list[dict[str, Any]]:
    return [{"write": f"{{{{workdir}}}}/{name}", "content": text} for name, text in files.items()]


def test_a_change_cannot_grade_itself(tmp_path: Path) -> None:
    """A project checked by unittest and a shell script. A writer breaks `mean` and makes each check pass anyway
    (a testx.py unittest discovers, the check's own script rewritten), with a task that allows it every path:
    the checks run with the base's versions of those files, fail, and the change is REJECTED (checks); the
    honest fix beside it lands. (Without the allowance those paths are out of scope:
    tests/lead/changes/test_gate.py::test_scope; pytest's conftest: tests/lead/changes/test_grading.py.)"""
    name = "selfgrade"
    workdir = runner_project(tmp_path / "work", with_pytest=False)  # pytest's own case: test_grading.py
    fixed = "def mean(v):\n    return sum(v) / len(v) if v else 0.0\n"
    cheats = {name: text for name, text in SELF_GRADING.items() if name != "conftest.py"}
    tasks = [
        _writer("mean", [*_writes({"calc.py": fixed}), RESULT, DONE, reply()], 1),
        _writer("grade", [*_writes({"calc.py": BROKEN_MEAN, **cheats}), RESULT, DONE, reply()], 2, allow=["**"]),
    ]
    spec = write_spec(
        tmp_path / f"{name}.yaml",
        workdir,
        tasks,
        agent="scripted",
        workers=2,
        checks=[c for c in RUNNER_CHECKS if c != PYTEST],
        changes={"reviewers_per_change": 0},
        timeouts={"job": 90, "run": 150},
    )
    result = orch("run", spec, "--local", "--name", name)
    run = RunFolder.for_name(name)
    assert result.exit_code == 0, result.output + diagnose(run)  # the gate caught the cheat: a run as designed
    rows = _rows(run)
    assert rows["mean"]["status"] == ChangeStatus.LANDED, rows["mean"]
    assert rows["grade"]["status"] == ChangeStatus.REJECTED and rows["grade"]["reason"] == "checks", rows["grade"]
    assert not any(c["exit_code"] == 0 for c in rows["grade"]["checks"]), rows["grade"]["checks"]
