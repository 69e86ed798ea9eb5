"""Issue 34 end to end, offline: a worker asks for a permission the run's policy leaves to a person, through the
real hook program (orch/run/hookwriter.py, as Claude Code's PermissionRequest hook runs it), with hostile text
in what it waits on. `orch run` in a real tmux pane posts to a loopback webhook and writes its terminal's
notification, naming the worker, the reason and the command to attach, carrying none of the hostile text;
the run's end posts its outcome. `orch up --notify` does the same with a notifier of its own, ringing the
terminal of a client attached to the run's tmux. How soon is printed here, and measured by bench/notify.py
(p99 under 1 s)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orch.backends.local import relay
from orch.fleet.tmux import TmuxServer
from orch.run import hookwriter
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.paths import sockets_dir
from orch.run.records import RunStatus
from orch.waits import wait_until
from tests.helpers import SAMPLE, ended, orch, run_events
from tests.lead.leadrun import DONE, RESULT, findings_step, reply, write_spec
from tests.notify.hostile import HOSTILE, carries
from tests.notify.receiver import Receiver

HOOKWRITER = Path(hookwriter.__file__).resolve()
ASKING = {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": HOSTILE}}
CLI = [sys.executable, "-c", "from orch.cli.main import main; main()"]
OSC9 = re.compile(r"\x1b\]9;([^\x07\x1b]*)\x07")
OSC777 = re.compile(r"\x1b\]777;notify;([^;\x07\x1b]*);([^;\x07\x1b]*)\x07")


def asks(policy_file: str) -> dict[str, str]:
    """An offline step that fires the PermissionRequest hook as the agent would: its payload on the hook's stdin."""
    payload = shlex.quote(json.dumps(ASKING))
    return {"bash": f'printf %s {payload} | python3 -S {HOOKWRITER} event "$ORCH_STATE_FILE" {policy_file}'}


class Pane:
    """A real tmux pane of the test's own server, its output (escape sequences and all) piped to a file."""

    def __init__(self, tmp: Path, command: list[str]) -> None:
        self.socket, self.out = f"nt{os.getpid()}", tmp / "pane.out"
        env = ["env", "-u", "TMUX", *(f"{k}={v}" for k, v in self.env().items())]
        self.tmux("new-session", "-d", "-x", "200", "-y", "50", shlex.join([*env, "sleep", "infinity"]))
        self.tmux("pipe-pane", "-o", f"cat >> {shlex.quote(str(self.out))}")
        self.tmux("respawn-pane", "-k", shlex.join([*env, *command]))

    @staticmethod
    def env() -> dict[str, str]:
        keep = ("ORCH_HOME", "XDG_CONFIG_HOME", "TMUX_TMPDIR", "PATH", "HOME", "PYTHONPATH")
        return {k: os.environ[k] for k in keep if k in os.environ}

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:
        """Close its terminal: its processes get SIGHUP."""
        self.tmux("kill-server")

    def received(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> tuple[re.Match[str], float]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for m in [pattern.search(self.received())] if m is not None]
            return bool(found)

        wait_until(seen, timeout, f"{pattern.pattern!r} on the pane", interval=0.01)
        return found[0], time.time()


def said(asked: float, posted: float, rung: float) -> None:
    """How long the person waited (printed, not asserted: bench/notify.py measures it, against 1 s)."""
    print(f"hook -> webhook {posted - asked:.3f} s, hook -> terminal {rung - asked:.3f} s (the pane read every 10 ms)")


def the_ask(run: RunFolder, n: int) -> float:
    (asked,) = [e for e in run.hook_events(n) if e.hook_event_name == "PermissionRequest"]
    assert asked.orch_decision is None  # the policy left it to a person
    return asked.ts


def test_orch_run_tells_a_person_within_a_second_and_posts_its_end(tmp_path: Path, receiver: Receiver) -> None:
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLE, workdir)
    script = [asks("{{run_dir}}/state/permissions.json"), findings_step(), RESULT, DONE, reply()]
    tasks = [{"id": "notes", "goal": "Look into notes.", "offline_script": script}]
    spec = write_spec(tmp_path / "ask.yaml", workdir, tasks, agent="scripted", workers=2, permissions="report")
    pane = Pane(tmp_path, [*CLI, "run", str(spec), "--local", "--name", "asks", "--notify", f"json:{receiver.url()}"])
    run = RunFolder.for_name("asks")
    (post,) = receiver.wait_for(1, timeout=120)
    parts = running_parts(run)  # it waits on a person: it runs
    osc9, rung = pane.wait_for(OSC9, timeout=10)
    said(the_ask(run, 1), post.at, rung)
    body = post.json()
    assert (body["run"], body["worker"], body["agent"], body["reason"]) == ("asks", 1, "scripted", "permission")
    assert body["action"] == "orch attach asks 1 --write" and carries(post.body.decode()) == []
    osc777 = OSC777.search(pane.received())
    assert osc777 is not None
    for shown in (osc9.group(1), osc777.group(1) + " " + osc777.group(2)):
        assert "W1 (scripted) waits on a permission" in shown and "orch attach asks 1 --write" in shown
        assert carries(shown) == []
    assert "\x07\x1b]9;" in pane.received()  # the bell first
    ended = receiver.wait_for(2, timeout=120)[1]
    pane.close()  # told, the person closes the terminal at once: `orch run` is still tearing the fleet down
    assert ended.json()["reason"] == "run-ended" and ended.json()["text"].startswith("passed (exit 0)")
    assert ended.json()["action"] == f"open {run.report_html}"
    wait_until(lambda: len(run_events(run, Event.NOTIFIED)) == 2, 10, "both deliveries in events.jsonl")
    assert [e["data"]["channels"] for e in run_events(run, Event.NOTIFIED)] == [
        ["terminal", "json webhook at 127.0.0.1"]
    ] * 2
    nothing_of_the_run_left(run, parts)


def running_parts(run: RunFolder) -> list[psutil.Process]:
    """A live local strict run's processes that no test's tree holds (the terminal's tmux server is no child):
    `orch run` itself (its controller), its model gateway and its workers' relay."""
    (controller,) = run_events(run, Event.CONTROLLER_STARTED)
    (gateway,) = run_events(run, Event.GATEWAY_STARTED)
    pids = [controller["data"]["pid"], gateway["data"]["pid"], relay._running(run)]
    assert None not in pids, pids
    return [psutil.Process(pid) for pid in pids]


def nothing_of_the_run_left(run: RunFolder, parts: list[psutil.Process]) -> None:
    """Once `orch run` has ended, however its terminal went: its fleet torn down whole, no process of it left."""
    wait_until(lambda: ended(parts[:1]), 60, "`orch run` to end")
    assert ended(parts), [p for p in parts if not ended([p])]
    assert not TmuxServer(run.info().tmux_socket).alive() and not sockets_dir(run.root).exists()
    assert run.info().status is RunStatus.STOPPED and run_events(run, Event.KILLED)


def test_orch_up_has_a_notifier_of_its_own_that_rings_attached_clients(tmp_path: Path, receiver: Receiver) -> None:
    up = orch(
        "up", "ups", "--local", "--agent", "scripted", "-n", "2", "--notify", receiver.url(), "--notify", "terminal"
    )
    assert up.exit_code == 0, up.output
    assert "notifier started" in up.output
    run = RunFolder.for_name("ups")
    socket = run.info().tmux_socket
    pane = Pane(tmp_path, ["tmux", "-L", socket, "-f", "/dev/null", "attach", "-r"])  # someone attached
    wait_until(lambda: bool(subprocess.run(["tmux", "-L", socket, "list-clients"], capture_output=True).stdout),
               10, "the client to attach")  # fmt: skip
    hook = subprocess.run(
        ["python3", "-S", str(HOOKWRITER), "event", str(run.state(2))], input=json.dumps(ASKING), text=True
    )
    assert hook.returncode == 0
    (post,) = receiver.wait_for(1)
    osc9, rung = pane.wait_for(OSC9, timeout=10)
    said(the_ask(run, 2), post.at, rung)
    assert post.json()["action"] == "orch attach ups 2 --write" and "W2 (scripted)" in osc9.group(1)
    assert carries(post.body.decode()) == [] and carries(osc9.group(1)) == []
    notifier = psutil.Process(int(run.notify_lock.read_text()))
    assert orch("kill", "ups").exit_code == 0
    notifier.wait(15)  # it ends with its run (it is this test's child: waited for, not left a zombie)
    assert len(receiver.posts) == 1  # the kill is no crash


def test_orch_up_without_a_channel_starts_no_notifier() -> None:
    up = orch("up", "quiet", "--local", "--agent", "scripted", "-n", "1")
    assert up.exit_code == 0, up.output
    assert "notifier" not in up.output and not RunFolder.for_name("quiet").notify_lock.exists()
    assert orch("kill", "quiet").exit_code == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--notify", "pager"], "orch: error: --notify 'pager': not a target"),
        (["--notify", "json:${NOT_SET_ANYWHERE}"], "orch: error: --notify 'json:${NOT_SET_ANYWHERE}': not a target"),
    ],
)
def test_a_bad_notify_flag_starts_nothing(args: list[str], said: str) -> None:
    up = orch("up", "bad", "--local", "--agent", "scripted", *args)
    assert up.exit_code == 2 and up.output.strip().splitlines()[-1].startswith(said), up.output
    assert not RunFolder.for_name("bad").exists()
