"""Codex, Gemini CLI, opencode and aider workers in a run's container, offline: the real binaries in the
worker image (which carries every agent: tests/dockertest.py IMAGE_AGENTS) against the scripted model
through the run's gateway. Claude Code's container tests are test_fleet.py, test_hostile.py and others.

For each agent, one fleet of two workers under strict isolation (each worker its own uid, its config dir
seeded by the worker itself: what `orch run` uses in a container) is shared by the checks in this order:
no dialog on a brand-new workdir (and, for aider and Gemini CLI, each worker's pane socket its own alone), a
30-line message as one submission, a brief's shell and write tool calls
(bus post, result, done flag), a killed agent shown as crashed and restarted with its session. Then a
strict fleet of one meets the run's deny policy. The suite is the same for every agent: a case only one
agent has is in its own module (test_agent_gemini.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from orch.agents.registry import get_adapter
from orch.backends.docker.sandbox import DockerSandbox
from orch.backends.local import relay
from orch.container.layout import LABEL_RUN, run_mount
from orch.fleet import launch
from orch.gateway.recording.exchanges import read_exchanges
from orch.run.events import Event
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo, Isolation, PermissionAnswer, WorkerState
from orch.waits import wait_until
from tests.agents.codex.test_adapter import DIALOGS as CODEX_DIALOGS
from tests.agents.test_gemini import _webfetch_brief as gemini_fetch_brief
from tests.agents.test_opencode import _webfetch_brief as opencode_fetch_brief
from tests.dockertest import BUILD_TIMEOUT, RUN_UID, events, unique, worker_uid
from tests.helpers import orch, prompts, worker_brief

AGENTS = ("codex", "gemini", "opencode", "aider")
pytestmark = [pytest.mark.docker, pytest.mark.timeout(BUILD_TIMEOUT)]
BOOT = "180"  # seconds: opencode and aider take 10-30 s to draw their TUI on a busy 2-core machine
# What each agent's idle screen shows, and the first-run dialogs it must not show.
SCREEN = {"codex": "OpenAI Codex", "gemini": "Type your message", "opencode": "Ask anything", "aider": "Aider v"}
DIALOGS = {
    "codex": CODEX_DIALOGS,
    "gemini": ("Do you trust", "authenticate"),
    "opencode": ("Connect a provider", "Zen"),
    "aider": ("(Y)es/(N)o", "raw.githubusercontent"),
}
# Agents whose tool calls stop at orch's permission policy in a container: a brief with a call that asks.
ASKS: dict[str, Callable[[Path], Path]] = {"gemini": gemini_fetch_brief, "opencode": opencode_fetch_brief}


def _marked(kind: str) -> Any:
    """The agent's name as a parameter, with its marker (`pytest -m codex` selects it)."""
    return pytest.param(kind, marks=getattr(pytest.mark, kind), id=kind)


class Fleet:
    def __init__(self, kind: str, home: Path, run: RunFolder) -> None:
        self.kind, self.home, self.run = kind, home, run

    @property
    def name(self) -> str:
        return self.run.name


def _container_workdir(path: Path) -> Path:
    """A brand-new workdir the container's uid may use (the tests run as root in CI)."""
    path.mkdir(parents=True)
    (path / "README.md").write_text("a project\n")
    if os.getuid() == 0:
        for p in (path, path / "README.md"):
            os.chown(p, RUN_UID, RUN_UID)
    return path


def _up(kind: str, name: str, workdir: Path, workers: int, *extra: str) -> RunFolder:
    result = orch("up", name, "-n", str(workers), "--workdir", workdir, "--offline", "--agent", kind,
                  "--egress", "none", "--boot-timeout", BOOT, *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name)


def _remove(engine: docker.DockerClient, name: str) -> None:
    orch("kill", name)
    for container in engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True):
        container.remove(force=True)


@pytest.fixture(scope="module", params=[_marked(kind) for kind in AGENTS])
def strict_fleet(
    request: pytest.FixtureRequest, image: str, engine: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    """Two workers of one agent under strict isolation, shared by this module's checks of that agent."""
    kind = str(request.param)
    root = tmp_path_factory.mktemp(f"strict-{kind}")
    home = root / "orch-home"
    name = unique(f"st{kind[:2]}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ORCH_HOME", str(home))
        run = _up(kind, name, _container_workdir(root / "brand-new-workdir"), 2, "--isolation", "strict")
        try:
            yield Fleet(kind, home, run)
        finally:
            _remove(engine, name)


@pytest.fixture
def fleet(strict_fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """The module's fleet, seen from this test (each test gets its own ORCH_HOME otherwise)."""
    monkeypatch.setenv("ORCH_HOME", str(strict_fleet.home))
    return strict_fleet


def _uid(run: RunFolder, n: int) -> int:
    """The uid worker n's processes and files have: its own under strict isolation, else the run's."""
    info = run.info()
    return worker_uid(info, n) if info.isolation is Isolation.STRICT else RUN_UID


def _status(run: RunFolder, n: int) -> WorkerState:
    return DockerSandbox().status(run).workers[n - 1].state


def _turn_over(run: RunFolder, n: int, since: int) -> bool:
    return any(e.hook_event_name == "Stop" for e in run.hook_events(n)[since:])


def _brief(run: RunFolder, n: int, kind: str) -> str:
    """A 30-line brief whose script posts to the bus (a shell call), writes the result and touches the done
    flag. Paths are the container's."""
    return worker_brief(run, n, outbox=f"{run_mount(run.name)}/outbox/agent-{n}")


def test_boots_with_no_dialog_each_worker_its_own_uid(fleet: Fleet, engine: docker.DockerClient) -> None:
    run = fleet.run
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    assert info.isolation is Isolation.STRICT
    assert [w.state for w in DockerSandbox().status(run).workers] == [WorkerState.IDLE] * 2
    assert Event.DIALOG_ANSWERED not in [e["event"] for e in events(run)]
    for n in (1, 2):
        screen = orch("read", fleet.name, str(n)).output
        assert SCREEN[fleet.kind] in screen, screen
        assert not [d for d in DIALOGS[fleet.kind] if d in screen], screen
        # The worker seeded its own config and writes its own hook log and outbox, as its own uid.
        assert run.state(n).stat().st_uid == run.outbox(n).stat().st_uid == _uid(run, n)
    _config_dir_is_closed(engine, info)
    if get_adapter(fleet.kind).facts.own_pane:
        _pane_socket_is_its_own(engine, info, SCREEN[fleet.kind])


def _config_dir_is_closed(engine: docker.DockerClient, info: DockerRunInfo) -> None:
    """Worker 1's config dir (its gateway token is in it) is closed to worker 2, and the controller may only
    pass through it (to look up the ready marker), not list it. (Gemini CLI's adapter, which has no marker,
    closes it to the controller too.)"""
    where = f"from orch.run.folder import RunFolder; print(RunFolder.for_name({info.name!r}).config_dir(1))"
    code, out = DockerSandbox().run_as_user(info, ["python3", "-c", where])
    assert code == 0, out
    cfg = out.split()[-1]
    container = engine.containers.get(info.container.id)
    other = container.exec_run(["sh", "-c", f"ls {cfg}; cd {cfg} && echo entered"], user=str(worker_uid(info, 2)))
    assert b"Permission denied" in other.output and b"entered" not in other.output, other.output
    # One ordered stream: ls's error, then the mode (stdout and stderr apart interleave at random).
    code, out = DockerSandbox().run_as_user(info, ["sh", "-c", f"ls {cfg} 2>&1; stat -c %a {cfg}"])
    assert "Permission denied" in out and out.split()[-1] in ("710", "700"), out  # Gemini CLI's: 0700


# As a worker: connect to each socket given, ask for its pane's screen; one line per socket.
PANE_PROBE = """
import json, socket, sys
for path in sys.argv[1:]:
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.settimeout(10)
            sock.connect(path)
            sock.sendall(b'{"op": "screen"}\\n')
            print(json.dumps(json.loads(sock.makefile().readline()).get("screen", "")))
        except OSError as exc:
            print(type(exc).__name__)
"""


def _pane_socket_is_its_own(engine: docker.DockerClient, info: DockerRunInfo, screen: str) -> None:
    """Worker 1 reads its own pane through its pane socket (its watcher's or approver's way), and reaches
    neither worker 2's pane socket nor the run's tmux server (which would let it type into every pane)."""
    inside = RunFolder(Path(run_mount(info.name)))
    own, other = (str(relay.own_pane_socket(inside, n)) for n in (1, 2))
    tmux = f"/tmp/tmux-{RUN_UID}/{launch.socket_name(info.name)}"
    container = engine.containers.get(info.container.id)
    uid = worker_uid(info, 1)  # its gid too: docker exec gives a bare uid with no passwd entry gid 0
    probe = container.exec_run(["python3", "-c", PANE_PROBE, own, other, tmux], user=f"{uid}:{uid}")
    assert probe.exit_code == 0 and isinstance(probe.output, bytes), probe.output
    lines = probe.output.decode().splitlines()
    assert len(lines) == 3, lines
    assert screen in json.loads(lines[0]), lines[0]  # its own pane's screen
    assert lines[1:] == ["PermissionError", "PermissionError"], lines  # not worker 2's folder, not tmux's


def test_thirty_line_message_is_one_submission(fleet: Fleet) -> None:
    text = "\n".join(f"{i:02d}: a line of a long multi-line brief" for i in range(1, 31))
    before = len(prompts(fleet.run, 2))
    result = orch("send", fleet.name, "2", "--file", "-", input=text)
    assert result.exit_code == 0, result.output
    got = prompts(fleet.run, 2)[before:]
    assert len(got) == 1, got  # exactly one submission
    # every line in order (Gemini CLI adds its session context around it, opencode a trailing space)
    assert [line.rstrip() for line in got[0].splitlines() if line[:2].isdigit()] == text.splitlines()


def test_brief_runs_shell_and_write_calls_and_finishes(fleet: Fleet, tmp_path: Path) -> None:
    run = fleet.run
    brief = tmp_path / "brief.md"
    brief.write_text(_brief(run, 1, fleet.kind))
    result = orch("brief", fleet.name, "1", brief)
    assert result.exit_code == 0, result.output
    waited = orch("wait", fleet.name, "--only", "1", "--timeout", "180")
    screen = orch("read", fleet.name, "1").output
    assert waited.exit_code == 0, f"{waited.output}\n--- screen\n{screen}"
    assert run.result(1).read_text() == "# Result of worker 1\nall good\n"
    assert run.result(1).stat().st_uid == _uid(run, 1)
    assert "[W1] worker 1 checked in" in run.bus.read_text()  # stamped by the bus server (strict) as worker 1
    wait_until(lambda: _status(run, 1) is WorkerState.IDLE, 60, "the end of worker 1's turn")
    view = DockerSandbox().status(run)
    assert view.workers[0].done and view.workers[0].result


# Prints the pid and uid of the agent under worker N's pane (run as the run's uid, which owns tmux).
AGENT_PID = (
    "import sys\n"
    "from orch.fleet import launch\n"
    "from orch.run.folder import RunFolder\n"
    "run = RunFolder.for_name(sys.argv[1])\n"
    "pid = launch.agent_pid(launch.server_for(run.info()).pane(int(sys.argv[2])))\n"
    "uid = [l.split()[1] for l in open(f'/proc/{pid}/status') if l.startswith('Uid:')][0]\n"
    "print(pid, uid)\n"
)


def _kill_agent(engine: docker.DockerClient, run: RunFolder, n: int) -> None:
    """SIGKILL worker n's agent process from inside the container, as the uid it runs as (the container has
    no capability: only its owner may signal it)."""
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    code, out = DockerSandbox().run_as_user(info, ["python3", "-c", AGENT_PID, run.name, str(n)])
    assert code == 0, out
    pid, uid = out.split()[-2:]
    assert int(uid) == _uid(run, n), out
    killed = engine.containers.get(info.container.id).exec_run(["sh", "-c", f"kill -9 {pid}"], user=uid)
    assert killed.exit_code == 0, killed.output


def test_killed_agent_shows_as_crashed_and_restarts_resumed(fleet: Fleet, engine: docker.DockerClient) -> None:
    run = fleet.run
    seen = len(run.hook_events(1))
    assert orch("send", fleet.name, "1", "remember the word heliotrope").exit_code == 0
    wait_until(lambda: _turn_over(run, 1, seen), 90, "the turn to end")
    wait_until(lambda: _status(run, 1) is WorkerState.IDLE, 30, "worker 1 idle")
    session = next(e.session_id for e in reversed(run.hook_events(1)) if e.session_id)
    _kill_agent(engine, run, 1)

    def crashed() -> str | None:
        row = DockerSandbox().status(run).workers[0]
        return (row.detail or "?") if row.state is WorkerState.CRASHED else None

    assert "signal 9" in wait_until(crashed, 30, "worker 1 to show as crashed")
    seen = len(run.hook_events(1))
    result = orch("restart", fleet.name, "1")
    assert result.exit_code == 0, result.output
    starts = wait_until(
        lambda: [e for e in run.hook_events(1)[seen:] if e.hook_event_name == "SessionStart"], 120, "the resumed start"
    )
    assert starts[0].session_id == session  # the same session (aider's: its chat history file)
    wait_until(lambda: _status(run, 1) is WorkerState.IDLE, 120, "the resumed worker to idle")
    # The next prompt reaches the model with the earlier conversation: the session was resumed.
    seen = len(run.hook_events(1))
    result = orch("send", fleet.name, "1", "which word did I ask you to remember?")
    assert result.exit_code == 0, result.output
    wait_until(lambda: _turn_over(run, 1, seen), 90, "the resumed worker's turn")
    asked = [
        json.dumps(x.request)
        for x in read_exchanges(run.exchanges(1))
        if "which word did I ask" in json.dumps(x.request)
    ]
    assert asked and any("heliotrope" in body for body in asked), asked


def policy_run(kind: str, answer: str, names: list[str], tmp_path: Path) -> RunFolder:
    """A strict fleet of one `kind` worker under the run's policy `answer`, briefed with a call that asks (the
    agents in ASKS) or else with _brief's, to the end of its turn; the run's events checked by the caller."""
    name = unique(f"pm{kind[:2]}{answer[0]}")
    names.append(name)
    run = _up(kind, name, _container_workdir(tmp_path / "w"), 1)
    assert isinstance(run.info(), DockerRunInfo) and run.info().isolation is Isolation.STRICT
    message = "orch policy: no fetching" if answer == "deny" else None
    policy = PermissionAnswer(answer=answer, message=message)  # type: ignore[arg-type]
    atomic_write(run.permission_policy, policy.model_dump_json())
    if kind in ASKS:
        brief = ASKS[kind](tmp_path)
    else:
        brief = tmp_path / "brief.md"
        brief.write_text(_brief(run, 1, kind))
    assert orch("brief", name, "1", brief).exit_code == 0
    wait_until(lambda: _turn_over(run, 1, 0), 120, "the worker's turn to end")
    wait_until(lambda: _status(run, 1) is WorkerState.IDLE, 60, "the worker to be idle")
    return run


@pytest.mark.parametrize("kind", [_marked(kind) for kind in AGENTS])
def test_permission_request_is_denied_by_the_policy(
    kind: str, image: str, engine: docker.DockerClient, names: list[str], tmp_path: Path
) -> None:
    """The run's deny policy (`orch run`'s `permissions`) answers a call that asks, with no dialog left on
    screen, under strict isolation (the default). Codex in a container runs with full access (its bubblewrap
    sandbox cannot start there) and aider never asks (--yes-always): for them nothing may reach a dialog, and
    the brief still finishes. (Gemini's approver pressing Allow: test_agent_gemini.py.)"""
    run = policy_run(kind, "deny", names, tmp_path)
    asked = [e for e in run.hook_events(1) if e.hook_event_name == "PermissionRequest"]
    if kind in ASKS:
        assert [e.orch_decision for e in asked] == ["deny"], asked
        assert asked[0].tool_name in ("web_fetch", "webfetch")
    else:
        assert asked == []
        assert run.result(1).read_text() == "# Result of worker 1\nall good\n" and run.done(1).exists()
    assert "Allow once" not in orch("read", run.name, "1").output
    assert orch("kill", run.name).exit_code == 0
