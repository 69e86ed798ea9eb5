"""A containerised run with real Claude Code workers (offline: the scripted model server inside).

Proves the issue-3 contract from the host's side: the run folder on the host fills with the workers'
bus lines, results and done flags, owned by the container's (non-root) uid; every process of the run is
non-root with no capabilities; the container carries the hardening defaults; fleet commands work through
the container; killing it from outside loses nothing and `orch up --resume` continues the same sessions.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import docker
import pytest

from orch.backends.docker.sandbox import DockerSandbox
from orch.container.layout import LABEL_MANAGED, LABEL_RUN
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import DockerRunInfo, RunStatus, WorkerState
from orch.run.statusview import RunStatusView
from orch.waits import wait_until
from tests.dockertest import (
    BUILD_TIMEOUT,
    GATEWAY_UID,
    PROCESS_SCRIPT,
    RUN_UID,
    assert_unprivileged,
    events,
    new_name,
    script_brief,
)
from tests.helpers import orch, prompts

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]


def _up(name: str, workdir: Path, *extra: str) -> RunFolder:
    result = orch(
        "up", name, "--isolation", "shared", "-n", "2", "--workdir", workdir, "--offline", "--egress", "none", *extra
    )
    assert result.exit_code == 0, result.output
    return RunFolder.for_name(name)


def test_workers_in_container_fill_the_host_folder(
    image: str, names: list[str], workdir: Path, tmp_path: Path, engine: docker.DockerClient
) -> None:
    name = new_name(names)
    run = _up(name, workdir)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.workdir == "/workspace"
    assert info.container.host_run_dir == str(run.root) and info.container.host_workdir == str(workdir)
    assert orch("status", name).exit_code == 0
    for n in (1, 2):
        brief = tmp_path / f"brief-{n}.md"
        brief.write_text(script_brief(run, n))
        result = orch("brief", name, str(n), brief)
        assert result.exit_code == 0, result.output
    result = orch("wait", name, "--timeout", "120")
    assert result.exit_code == 0, result.output
    bus_text = run.bus.read_text()
    for n in (1, 2):
        assert f"[W{n}] worker {n} checked in" in bus_text
        assert "all good" in run.result(n).read_text()
        assert len(prompts(run, n)) == 1
        # Written inside the container, owned on the host by the uid it runs as (never root).
        for path in (run.result(n), run.done(n), run.state(n), run.log(n)):
            assert path.stat().st_uid == RUN_UID, path
    view = DockerSandbox().status(run)
    assert view.alive and all(w.done and w.result for w in view.workers)
    # send with a multi-line message (stdin through the docker API) and read the screen back.
    text = "first line of a note\nsecond line of a note"
    result = orch("send", name, "1", "--file", "-", input=text)
    assert result.exit_code == 0, result.output
    assert [p for p in prompts(run, 1) if "second line of a note" in p]
    assert "❯" in orch("read", name, "1").output
    # The workspace was mounted, not copied: the original is what the workers see.
    assert orch("ls").output.count(name) == 1 and "running" in orch("ls").output
    # kill: container gone, run folder with transcripts kept, marked stopped.
    result = orch("kill", name)
    assert result.exit_code == 0, result.output
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)
    assert run.info().status is RunStatus.STOPPED
    assert run.log(1).stat().st_size > 0 and "all good" in run.result(2).read_text()
    assert "removed" in orch("ls").output
    # Read falls back to the transcript once the container is gone.
    assert orch("read", name, "1").exit_code == 0


def test_container_is_hardened_and_nothing_runs_as_root(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    name = new_name(names)
    # 128 per worker leaves --pids 512 its reserve (orch.fleet.caps.container_pids would raise it else).
    run = _up(name, workdir, "--memory", "3g", "--pids", "512", "--cpus", "1.5", "--pids-per-worker", "128")
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    attrs = engine.containers.get(info.container.id).attrs
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["PidsLimit"] == 512 and host["Memory"] == 3 * 1024**3 and host["NanoCpus"] == 1_500_000_000
    assert info.caps.pids == 128
    assert set(host["Tmpfs"]) == {"/tmp", "/home/worker"}
    assert attrs["Config"]["Labels"][LABEL_MANAGED] == "true" and attrs["Config"]["Labels"][LABEL_RUN] == name
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert set(mounts) == {f"/orch/runs/{name}", "/workspace"}  # no Docker socket, nothing else
    assert not any("docker.sock" in (m.get("Source") or "") for m in attrs["Mounts"])

    # Every process of the run (PID 1's tree) is the run's uid, or the gateway's, with empty capability
    # sets and no-new-privs.
    code, out = DockerSandbox().run_as_user(info, ["python3", "-c", PROCESS_SCRIPT])
    assert code == 0, out
    assert_unprivileged(out, RUN_UID, GATEWAY_UID)
    # The root filesystem is read-only; the Docker socket is nowhere.
    code, out = DockerSandbox().run_as_user(
        info, ["sh", "-c", "touch /usr/x 2>&1; touch /orch/x 2>&1; ls /var/run/docker.sock 2>&1; id -u"]
    )
    assert out.count("Read-only file system") == 2 and "No such file" in out and out.strip().endswith(str(RUN_UID))


def test_killed_from_outside_loses_nothing_and_resumes(
    image: str, names: list[str], workdir: Path, tmp_path: Path, engine: docker.DockerClient
) -> None:
    name = new_name(names)
    run = _up(name, workdir)
    brief = tmp_path / "brief.md"
    brief.write_text(script_brief(run, 1))
    assert orch("brief", name, "1", brief).exit_code == 0
    assert orch("wait", name, "--only", "1", "--timeout", "120").exit_code == 0
    task_before = run.task(1).read_text()
    session = next(e.session_id for e in run.hook_events(1) if e.hook_event_name == "SessionStart")
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    engine.containers.get(info.container.id).kill()  # from outside, mid-run: SIGKILL, no goodbye

    def down() -> RunStatusView | None:
        view = DockerSandbox().status(run)
        return None if view.alive else view

    view = wait_until(down, 30, "status to see the container gone")
    assert all(w.state is WorkerState.EXITED and "container exited (137)" in (w.detail or "") for w in view.workers)
    assert view.workers[0].done and view.workers[0].result  # the folder is intact
    assert "worker 1 checked in" in run.bus.read_text()
    result = orch("send", name, "2", "hello")
    assert result.exit_code == 1 and "--resume" in result.output
    assert re.search(r"exited \(137\)", orch("ls").output)

    result = orch("up", name, "--resume")
    assert result.exit_code == 0, result.output
    starts = [e for e in run.hook_events(1) if e.hook_event_name == "SessionStart"]
    assert len(starts) == 2 and starts[1].session_id == session  # the same Claude Code session, resumed
    assert run.task(1).read_text() == task_before and len(prompts(run, 1)) == 1  # no brief re-sent
    assert any(e["event"] == Event.RESUMED for e in events(run))
    # The run goes on: worker 2 takes a brief in the new container.
    brief2 = tmp_path / "brief2.md"
    brief2.write_text(script_brief(run, 2))
    assert orch("brief", name, "2", brief2).exit_code == 0
    assert orch("wait", name, "--timeout", "120").exit_code == 0
    assert run.bus.read_text().count("checked in") == 2
    assert orch("kill", name).exit_code == 0


def test_copy_leaves_the_original_untouched(image: str, names: list[str], workdir: Path, tmp_path: Path) -> None:
    name = new_name(names)
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--offline", "--egress", "none", "--copy")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.container.options.copy_workdir
    copy = Path(info.container.workspace_source)
    assert copy != workdir and (copy / "README.md").is_file()
    brief = tmp_path / "brief.md"
    brief.write_text(script_brief(run, 1, [{"bash": "echo changed > /workspace/README.md; touch /workspace/new"}]))
    assert orch("brief", name, "1", brief).exit_code == 0
    assert orch("wait", name, "--timeout", "120").exit_code == 0
    assert (copy / "README.md").read_text() == "changed\n" and (copy / "new").exists()
    assert (workdir / "README.md").read_text() == "a project\n" and not (workdir / "new").exists()
    assert orch("kill", name).exit_code == 0
    assert not copy.exists()  # the disposable copy goes with the run


def test_reap_removes_leftovers_of_dead_runs(
    image: str, names: list[str], workdir: Path, engine: docker.DockerClient
) -> None:
    name = new_name(names)
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--agent", "scripted", "--egress", "none")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    engine.containers.get(info.container.id).kill()
    result = orch("reap")
    assert result.exit_code == 0 and f"orch-{name}" in result.output, result.output
    assert not engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={name}"}, ignore_removed=True)
    assert run.info().status is RunStatus.STOPPED and run.exists()
    assert f"orch-{name}" not in orch("reap").output  # idempotent


def test_attach_execs_docker_exec_into_the_container(
    image: str, names: list[str], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = new_name(names)
    assert (
        orch(
            "up", name, "--isolation", "shared", "--workdir", workdir, "--agent", "scripted", "--egress", "none"
        ).exit_code
        == 0
    )
    calls: list[list[str]] = []

    def fake_exec(path: str, argv: list[str]) -> None:
        calls.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvp", fake_exec)
    orch("attach", name)
    (argv,) = calls
    assert argv[1:] == ["exec", "-it", "-u", f"{RUN_UID}:{RUN_UID}", f"orch-{name}", "orch", "attach", name]


def test_credentials_file_is_mounted_read_only_and_never_copied_out(
    image: str, names: list[str], workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no credential in the environment, the user's `/login` file reaches the container read-only and
    is copied only into the tmpfs home, readable by the run's uid alone; never into the run folder."""
    secret = "orch-test-oauth-secret-0123456789"
    config = tmp_path / "claude-config"
    config.mkdir()
    (config / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": secret}}))
    (config / ".credentials.json").chmod(0o600)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    name = new_name(names)
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--agent", "scripted", "--egress", "none")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo)
    code, out = DockerSandbox().run_as_user(
        info,
        ["sh", "-c", "stat -c '%u %a' $HOME/.claude/.credentials.json; cat $HOME/.claude/.credentials.json; echo;"
         " (echo x >> /run/orch/credentials.json) 2>/dev/null && echo WROTE || echo REFUSED; env"],
    )  # fmt: skip
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"{RUN_UID} 600" and secret in lines[1]
    assert lines[2] == "REFUSED"
    (mount,) = [
        m
        for m in docker.from_env().containers.get(info.container.id).attrs["Mounts"]
        if "credentials" in m["Destination"]
    ]
    assert mount["RW"] is False and mount["Source"] == str(config / ".credentials.json")
    assert secret not in "\n".join(lines[3:])  # not in the environment
    assert orch("kill", name).exit_code == 0
    for path in run.root.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


@pytest.mark.skipif(os.getuid() != 0, reason="as non-root, the container runs as the invoking user (tested above)")
def test_root_invoking_runs_as_the_workdirs_owner(image: str, names: list[str], tmp_path: Path) -> None:
    """Invoked as root on a workdir a user owns, the run is that user's (a uid the image has no name for)."""
    workdir = tmp_path / "alice"
    workdir.mkdir()
    os.chown(workdir, 1234, 1234)
    name = new_name(names)
    result = orch("up", name, "--isolation", "shared", "--workdir", workdir, "--offline", "--egress", "none")
    assert result.exit_code == 0, result.output
    run = RunFolder.for_name(name)
    info = run.info()
    assert isinstance(info, DockerRunInfo) and info.container.user == "1234:1234"
    brief = tmp_path / "brief.md"
    brief.write_text(script_brief(run, 1, [{"bash": "touch /workspace/made-by-worker"}]))
    assert orch("brief", name, "1", brief).exit_code == 0
    assert orch("wait", name, "--timeout", "120").exit_code == 0
    for path in (run.result(1), run.done(1), workdir / "made-by-worker", run.root):
        assert (path.stat().st_uid, path.stat().st_gid) == (1234, 1234), path
    assert orch("kill", name).exit_code == 0
