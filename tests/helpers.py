"""Small helpers for tests: run the CLI in-process, read a run's files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner, Result

from orch import procs
from orch.agents.registry import get_adapter
from orch.cli.commands import app
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, DockerRunInfo, LocalRunInfo, RunInfo, WorkerState
from orch.waits import wait_until

# The demo's sample tree and the two claims about it the tests play: pages.py really skips a page (true),
# mean([]) is guarded (false). Each reproduce command exits 0 if and only if its claim holds.
SAMPLE = Path(str(resources.files("orch") / "data" / "demo" / "sample"))
PAGES_QUOTE = "start = page * size"
PAGES_REPRO = (
    "python3 -c 'import sys; from pages import paginate; "
    "sys.exit(0 if paginate(list(range(10)), 1, 5) != [0, 1, 2, 3, 4] else 1)'"
)
MEAN_QUOTE = "return sum(values) / len(values)"
MEAN_REPRO = "python3 -c 'from stats import mean; mean([])' 2>&1 | grep -q ZeroDivisionError"

runner = CliRunner()


def demo_spec(folder: Path, agent: str) -> Path:
    """The offline demo's spec with every worker of one agent kind, and a copy of its sample tree beside it."""
    shutil.copytree(SAMPLE, folder / "workdir")
    spec = folder / "fleet.yaml"
    text = (SAMPLE.parent / "fleet.yaml").read_text().replace("\nworkers: 3\n", f"\nworkers: 3\nagent: {agent}\n")
    spec.write_text(text + "\noffline: true\n")
    return spec


def orch(*args: str | Path, input: str | bytes | None = None) -> Result:
    return runner.invoke(app, [str(a) for a in args], input=input)


def prompts(run: RunFolder, n: int) -> list[str]:
    return [e.prompt or "" for e in run.hook_events(n) if e.hook_event_name == "UserPromptSubmit"]


def diagnose(run: RunFolder) -> str:
    """What each worker was doing: for assertion messages when a fleet did not finish."""
    from orch.fleet import talk

    out = []
    for n in range(1, run.info().workers + 1):
        events = [f"{e.hook_event_name}:{e.tool_name or ''}" for e in run.hook_events(n)[-8:]]
        try:
            screen = talk.read(run, n, 15)
        except Exception as exc:  # diagnostics must not raise
            screen = f"<no screen: {exc}>"
        out.append(f"--- worker {n}: events {events}\n{screen}")
    return "\n".join(out)


def run_info(
    name: str,
    workers: int = 1,
    workdir: str = "/workspace",
    container: ContainerInfo | None = None,
    writers: bool = False,
) -> RunInfo:
    """A run's record as `orch up` writes it (a container run when `container` is given; an `orch run` with writer
    tasks, its worktrees/ and changes/ made, with `writers`), for folders made without starting anything."""
    local = LocalRunInfo(
        name=name,
        agent="scripted",
        workers=workers,
        workdir=workdir,
        permission_mode="default",
        tmux_socket=f"orch-{name}",
        orch_version="test",
        writers=writers,
    )
    return local if container is None else DockerRunInfo.of(local, container=container)


def gateway_books(run: RunFolder, ready: Callable[[dict[str, Any], list[dict[str, Any]]], bool]) -> None:
    """Wait until the run's gateway books (usage.json, the ledger's lines) satisfy `ready`: the agent sends
    its last tool result after it touched its done flag, and the gateway writes it just after answering."""

    def books() -> bool:
        try:
            usage = json.loads(run.model_usage.read_text())
            lines = run.model_ledger.read_text().splitlines() if run.model_ledger.exists() else []
            ledger = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError):
            return False
        return ready(usage, ledger)

    wait_until(books, 60, "the gateway's books to count the worker's last calls", watch=run.model_dir)


def pinned_bin(name: str) -> Path:
    """An agent's pinned binary as its facts find it (ORCH_<NAME>_BIN, else the copy `orch setup`
    installed in ~/.cache/orch), or the test fails saying how to install it."""
    facts = get_adapter(name).facts
    setting = facts.bin_setting
    explicit = setting.get() if setting else None
    path = Path(explicit) if explicit else facts.cache_bin
    if not path.exists():
        version = facts.install.version if facts.install else ""
        pytest.fail(f"{facts.title} {version} not found at {path}: run orch setup --agents {facts.name}")
    return path


def stand_in_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point every agent's ORCH_<NAME>_BIN at /bin/true: for a fast test that only needs a path, or doctor
    lines of some shape (a real `--version` starts Node or a venv's Python: seconds each; each agent's
    tier runs the real one)."""
    from orch.agents.registry import ADAPTERS
    from orch.settings.user import agent_bin

    for setting in filter(None, map(agent_bin, ADAPTERS)):
        monkeypatch.setenv(setting.name, "/bin/true")


def orch_script(*steps: Mapping[str, object]) -> str:
    """A fenced orch-script block: the steps the scripted model answers a brief with, one JSON line each."""
    return "```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n"


def worker_brief(run: RunFolder, n: int, outbox: str | None = None, result: str = "all good\n") -> str:
    """A brief of about 30 lines whose script posts to the bus (a shell call), writes worker n's result and
    touches its done flag. `outbox`: the outbox's path as the agent sees it (a container's), else the run
    folder's."""
    where = outbox or str(run.outbox(n))
    prose = "\n".join(f"Context line {i} for worker {n}." for i in range(1, 21))
    script = orch_script(
        {"bash": f"orch bus post {run.name} --as {n} 'worker {n} checked in'"},
        {"write": f"{where}/result.md", "content": f"# Result of worker {n}\n{result}"},
        {"bash": f"touch {where}/done"},
        {"reply": "Finished."},
    )
    return f"# Task for worker {n}\n\n{prose}\n\n{script}"


def kill_agent(run: RunFolder, n: int) -> None:
    """SIGKILL the agent under worker n's pane (local runs) and wait until its status says so."""
    from orch.fleet import control, launch

    pid = launch.agent_pid(launch.server_for(run.info()).pane(n))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    row = wait_until(
        lambda: next(
            (w for w in control.status(run).workers if w.worker == n and w.state is WorkerState.CRASHED), None
        ),
        15,
        f"worker {n} to show as crashed",
    )
    assert row.detail and "signal 9" in row.detail, row.detail


def user_endpoint(
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    url: str,
    key: str,
    binary: Path | None = None,
    clear: Iterable[str] = (),
) -> None:
    """The user's own endpoint for `agent` (a scripted model standing where their API or proxy would be), as
    its credentials name it: its base URL and first credential variable set, its other credential variables
    and `clear` (its config dir's, say) unset, and its binary (ORCH_<AGENT>_BIN) when given."""
    adapter = get_adapter(agent)
    credentials = adapter.facts.credentials
    assert credentials.base_url_env is not None, f"{agent} takes no endpoint"
    for var in (*credentials.variables, *clear):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(credentials.base_url_env, url)
    monkeypatch.setenv(credentials.env[0], key)
    if binary is not None:
        assert adapter.facts.bin_setting is not None
        monkeypatch.setenv(adapter.facts.bin_setting.name, str(binary))


def run_events(run: RunFolder, name: Event | str | None = None) -> list[dict[str, Any]]:
    """events.jsonl as JSON (of one name), in order: the tests index into `data`, whose shape each event
    picks; nothing before the run logged any."""
    text = run.events.read_text() if run.events.exists() else ""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [e for e in lines if name is None or e["event"] == name]


def own_processes(argv: Sequence[str], root: int | None = None) -> list[psutil.Process]:
    """The live processes in `root`'s tree (this test's process by default) whose command line is `argv`: this
    test's own, never another's. Other engineers run the same tests on this machine at once, with the same
    argv: a scan of every process found (and killed) theirs. A check's sandbox is a pid namespace of its own, so
    nothing in it leaves the tree of the process that started it while that process lives (an orphan goes to
    the namespace's first process); a test that kills that process keeps what it found and waits for `ended`."""
    found = []
    for pid in procs.tree(os.getpid() if root is None else root):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.cmdline() == list(argv) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def ended(found: Iterable[psutil.Process]) -> bool:
    """Every process of `found` has exited (a zombie has; a pid used again since is another process)."""

    def running(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    return not any(running(p) for p in found)
