"""compose.yaml, driven the way its header says (`docker compose run`, or compose v1's `docker-compose run`):
`fleet`, real Claude Code workers (offline) in one hardened container, runs folder and workspace as
volumes; briefed through `docker exec`, its bus lines, results and done flags land in the runs volume;
nothing in it runs as root or with a capability; a second `run` of the same fleet resumes its sessions.
A credential given to `docker compose` reaches the init's gateway only (the canary): no process of the run
has it in its environment, and it is nowhere in the run folder.
`lead`, a fleet spec run to completion in the container, as CI would: the report on the host, the exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import docker
import docker.errors
import pytest
import yaml
from docker.models.containers import Container

from orch.agents.codex.adapter import OFFLINE_MODEL
from orch.cli.outputs import StatusOutput
from orch.container.egress import DNS_UID
from orch.container.serverun import READY_LINE
from orch.offline.modelserver import ScriptedModelServer, key_digest
from orch.run.uids import worker_uid
from orch.waits import wait_until
from tests.dockertest import BUILD_TIMEOUT, bridge_address, unique

pytestmark = [pytest.mark.docker, pytest.mark.claude, pytest.mark.timeout(BUILD_TIMEOUT)]
COMPOSE_FILE = Path(__file__).resolve().parents[2] / "compose.yaml"
RUN = "cmp"
UID = 1000
GATEWAY_UID = 61000  # ORCH_GATEWAY_UID's default
CANARY = "sk-ant-api03-CANARY-compose-0123456789abcdef"
SAMPLE = Path(str(resources.files("orch") / "data" / "demo" / "sample"))


def _compose_cli() -> list[str]:
    docker_cli = shutil.which("docker")
    if docker_cli and subprocess.run([docker_cli, "compose", "version"], capture_output=True).returncode == 0:
        return [docker_cli, "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if os.environ.get("CI") == "true":
        pytest.fail("CI needs docker compose (.ci/run installs Debian's docker-compose)")
    pytest.skip("neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)")


@dataclass
class Project:
    cli: list[str]
    name: str
    engine: docker.DockerClient

    def start(self, container_name: str, *options: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """`run` in the foreground: for a container that must refuse to start. `options`: `run`'s own."""
        env = {**os.environ, "ORCH_RUN": RUN, "ORCH_EGRESS": "none", "ORCH_UID": str(UID), **extra}
        cmd = [*self.cli, "-f", str(COMPOSE_FILE), "-p", self.name, "run", "--rm", "--name", container_name]
        cmd += [*options, "fleet"]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    def run(self, container_name: str, **extra: str) -> Container:
        env = {
            **os.environ,
            "ORCH_RUN": RUN,
            "ORCH_WORKERS": "2",
            "ORCH_OFFLINE": "1",
            "ORCH_EGRESS": "none",
            "ORCH_UID": str(UID),
            **extra,
        }
        cmd = [*self.cli, "-f", str(COMPOSE_FILE), "-p", self.name, "run", "-d", "--name", container_name, "fleet"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        container = self.engine.containers.get(container_name)

        def ready() -> bool:
            container.reload()
            assert container.status == "running", container.logs().decode(errors="replace")
            return READY_LINE in container.logs().decode(errors="replace")

        wait_until(ready, 120, "the compose fleet to start its workers", interval=0.5)
        return container


SWITCH = (1 << 6) | (1 << 7) | (1 << 8)  # SETGID, SETUID, SETPCAP: the run's uid keeps them, ambient, under strict


def assert_strict(container: Container, workers: int) -> dict[str, bytes]:
    """Every process of the container (read on the engine's machine: the run's uids cannot read each other's
    under strict isolation): never root; the gateway, the DNS responder and each worker (its own uid) with
    no capability at all; the run's uid (controller, tmux) with SETUID, SETGID and SETPCAP only, to start
    the panes; no-new-privs everywhere. Each process's environment, by pid."""
    top = container.top()
    pids = [row[top["Titles"].index("PID")] for row in top["Processes"]]
    seen: set[int] = set()
    environs = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            environs[pid] = Path(f"/proc/{pid}/environ").read_bytes()
        except FileNotFoundError:
            continue  # gone meanwhile
        f = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        uid = int(f["Uid"].split()[0])
        caps = [int(f[k], 16) for k in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd")]
        seen.add(uid)
        assert uid != 0 and f["NoNewPrivs"].strip() == "1", (pid, f["Name"], uid)
        assert uid in {UID, GATEWAY_UID, DNS_UID, *(worker_uid(n) for n in range(1, workers + 1))}, (pid, uid)
        allowed = SWITCH if uid == UID else 0
        assert all(c & ~allowed == 0 for c in caps), (pid, f["Name"], uid, [hex(c) for c in caps])
    assert {UID, GATEWAY_UID, *(worker_uid(n) for n in range(1, workers + 1))} <= seen, (seen, top)
    return environs


def sh_fails(container: Container, script: str) -> str:
    code, out = container.exec_run(["sh", "-c", script], user=str(UID))
    assert isinstance(out, bytes)
    assert code != 0, out
    return out.decode(errors="replace")


def sh(container: Container, script: str, **env: str) -> str:
    code, out = container.exec_run(["sh", "-c", script], user=str(UID), environment=env)
    assert isinstance(out, bytes)
    text = out.decode(errors="replace")
    assert code == 0, text
    return text


@pytest.fixture
def project(engine: docker.DockerClient, image: str) -> Iterator[Project]:
    cli = _compose_cli()
    proj = Project(cli, unique("orchcompose"), engine)
    yield proj
    for container in engine.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={proj.name}"}, ignore_removed=True
    ):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
    subprocess.run([*cli, "-f", str(COMPOSE_FILE), "-p", proj.name, "down", "-v"], capture_output=True, timeout=120)


def test_compose_runs_a_fleet_and_resumes_it(project: Project) -> None:
    fleet = project.run(f"{project.name}-1")
    (status,) = StatusOutput.model_validate_json(sh(fleet, f"orch status {RUN} --json")).runs
    assert [w.state for w in status.workers] == ["idle", "idle"]
    inside = f"/orch/runs/{RUN}"
    for n in (1, 2):
        steps = [
            {"bash": f"orch bus post {RUN} --as {n} 'worker {n} checked in'"},
            {"write": f"{inside}/outbox/agent-{n}/result.md", "content": f"# Result {n}\nall good\n"},
            {"bash": f"touch {inside}/outbox/agent-{n}/done"},
            {"reply": "Finished."},
        ]
        brief = "# Task\n\n```orch-script\n" + "\n".join(json.dumps(s) for s in steps) + "\n```\n"
        sh(fleet, f'printf "%s" "$BRIEF" | orch brief {RUN} {n} -', BRIEF=brief)
    sh(fleet, f"orch wait {RUN} --timeout 120")
    bus = sh(fleet, f"cat {inside}/bus.md")
    assert "[W1] worker 1 checked in" in bus and "[W2] worker 2 checked in" in bus
    owners = sh(fleet, f"stat -c %u {inside}/outbox/agent-1/result.md {inside}/outbox/agent-2/done /workspace").split()
    assert owners == [str(worker_uid(1)), str(worker_uid(2)), str(UID)]  # strict: each worker's own
    assert json.loads(sh(fleet, f"cat {inside}/run.json"))["isolation"] == "strict"  # orch run's default
    assert_strict(fleet, 2)
    attrs = fleet.attrs["HostConfig"]
    assert attrs["ReadonlyRootfs"] and attrs["CapDrop"] == ["ALL"] and attrs["PidsLimit"] == 4096
    mounts = {m["Destination"]: m for m in fleet.attrs["Mounts"]}
    assert set(mounts) == {"/orch/runs", "/workspace", "/run/secrets/orch-credentials"}
    assert mounts["/run/secrets/orch-credentials"]["Source"] == "/dev/null"  # no ORCH_CREDENTIALS: none
    assert not mounts["/run/secrets/orch-credentials"]["RW"]

    fleet.stop(timeout=20)  # SIGTERM: workers stop, the run folder stays, marked stopped
    fleet.reload()
    assert fleet.attrs["State"]["ExitCode"] == 0

    again = project.run(f"{project.name}-2")  # the same fleet again: resumed on its folder
    events = [json.loads(line) for line in sh(again, f"cat {inside}/state/agent-1.jsonl").splitlines()]
    starts = [e for e in events if e["hook_event_name"] == "SessionStart"]
    assert [s["source"] for s in starts] == ["startup", "resume"]
    assert starts[0]["session_id"] == starts[1]["session_id"]
    assert "all good" in sh(again, f"cat {inside}/outbox/agent-2/result.md")


# The finder's first step, as worker 1 under strict isolation: what it can reach, noted in its own outbox.
PROBE = (
    "p={{run_dir}}/outbox/agent-{{worker}}/probe.txt; id -u > $p; "
    "cat /run/secrets/orch-credentials >> $p 2>/dev/null || echo secret-denied >> $p; "
    "echo forged > {{run_dir}}/outbox/agent-2/result.md 2>/dev/null || echo other-outbox-denied >> $p; "
    "ls {{run_dir}}/sessions/agent-2 >/dev/null 2>&1 || echo other-sessions-denied >> $p; "
    "echo planted >> {{workdir}}/pages.py 2>/dev/null || echo tree-denied >> $p; "
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c CANARY >> $p; true"
)


def _lead_spec() -> dict[str, object]:
    finding = {
        "id": "F1",
        "claim": "paginate(items, 1, size) skips the first page",
        "severity": "high",
        "evidence": [{"file": "pages.py", "line": 15, "quote": "start = page * size"}],
        "reproduce": "python3 -c 'import sys; from pages import paginate; "
        "sys.exit(0 if paginate(list(range(10)), 1, 5) != [0, 1, 2, 3, 4] else 1)'",
    }
    findings = json.dumps({"job": "{{job}}", "findings": [finding]})
    spec = {
        "workdir": ".",
        "offline": True,
        "workers": 2,
        "tasks": [
            {
                "id": "pages",
                "goal": "Determine whether paginate returns the right page.",
                "worker": 1,
                "offline_script": [
                    {"bash": PROBE},
                    {"write": "{{findings_file}}", "content": findings},
                    {"write": "{{result_file}}", "content": "one finding\n"},
                    {"bash": "touch {{done_file}}"},
                    {"reply": "Finished."},
                ],
            }
        ],
    }
    return spec


def test_compose_lead_runs_a_spec_to_its_exit_code(project: Project, tmp_path: Path) -> None:
    """`docker compose run --rm lead`, as in CI: the spec in the workspace, run to the end inside the container
    under strict isolation (each worker its own uid: the finder, probing, cannot read the secret, another's
    files or any process's credential, nor write the tree), the report in the runs folder on the host, and
    orch run's exit code as the container's. A bad spec changes nothing and makes nothing, even with the
    init's gateway to start and an earlier run of that name; a re-run starts clean (a new `model/`)."""
    workspace, runs = _workspace(tmp_path, _lead_spec())
    secret = tmp_path / "credentials.env"  # the init's gateway takes it (here the scripted model: offline)
    secret.write_text(f"ANTHROPIC_API_KEY={CANARY}\n")
    secret.chmod(0o600)
    env = {**os.environ, "ORCH_RUN": "ci", "ORCH_WORKSPACE": str(workspace), "ORCH_RUNS": str(runs)}
    env |= {"ORCH_EGRESS": "none", "ORCH_UID": str(UID), "ORCH_OFFLINE": "1", "ORCH_CREDENTIALS": str(secret)}
    cmd = [*project.cli, "-f", str(COMPOSE_FILE), "-p", project.name, "run", "--rm", "lead"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"as uid {GATEWAY_UID}" in out and "isolation strict" in out  # the init's gateway; strict
    assert subprocess.run(["grep", "-rqF", CANARY, str(runs)]).returncode == 1  # nowhere in the run folder
    assert "pages-F1" in done.stdout and "CONFIRMED" in done.stdout
    ci = runs / "ci"
    report = json.loads((ci / "report.json").read_text())
    assert report["status"] == "passed" and [f["status"] for f in report["findings"]] == ["CONFIRMED"]
    assert (ci / "logs" / "agent-2.log").stat().st_size > 0  # the verifier's transcript, on the host
    info = json.loads((ci / "run.json").read_text())
    assert info["isolation"] == "strict" and info["credential"] == "none"  # the init's gateway: scripted
    assert [(ci / "outbox" / f"agent-{n}").stat().st_uid for n in (1, 2)] == [worker_uid(1), worker_uid(2)]
    probe = (ci / "outbox" / "agent-1" / "probe.txt").read_text().split()
    assert probe[0] == str(worker_uid(1)), probe
    assert {"secret-denied", "other-outbox-denied", "other-sessions-denied", "tree-denied"} <= set(probe), probe
    assert probe[-1] == "0", probe  # no process it can read holds the credential
    assert (ci / "model").stat().st_uid == GATEWAY_UID
    (ci / "model" / "earlier.txt").write_text("from the first run\n")

    # A broken spec: exit 2 and the problem with its location; nothing made (the gateway not started), the
    # earlier run of the name as it was.
    good = (workspace / "fleet.yaml").read_text()
    (workspace / "fleet.yaml").write_text("workdir: .\ntasks:\n  - rol: finder\n")
    for name in ("bad", "ci"):
        bad = subprocess.run(cmd, env={**env, "ORCH_RUN": name}, capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert "tasks[0].rol: unknown key" in bad.stdout + bad.stderr
        assert "model gateway" not in bad.stdout + bad.stderr
    assert not (runs / "bad").exists()
    assert (ci / "report.json").is_file() and (ci / "model" / "earlier.txt").is_file()

    # Nothing to resume under that name: one line, exit 2.
    none = subprocess.run([*cmd, "--resume"], env={**env, "ORCH_RUN": "none"}, capture_output=True, text=True)
    assert none.returncode == 2 and "no run 'none' to resume" in none.stdout + none.stderr
    assert not (runs / "none").exists()

    # The same spec again under the same name: a clean start, nothing of the earlier run's model/ kept.
    (workspace / "fleet.yaml").write_text(good)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (ci / "model" / "earlier.txt").exists()
    assert json.loads((ci / "report.json").read_text())["status"] == "passed"


def test_compose_credential_reaches_only_the_gateway(project: Project, tmp_path: Path) -> None:
    """A live fleet (not offline) with the credential canary in ORCH_CREDENTIALS (compose's secret file): the
    init starts the gateway as its own uid with it; the container's environment (`docker inspect`, every
    `docker exec`), the controller, tmux and the workers never hold it, the run's uid cannot read the secret,
    and it is nowhere in the run folder. A secret file the run's uid could read is refused, nothing started."""
    secret = tmp_path / "credentials.env"
    secret.write_text(f"# the gateway's\nANTHROPIC_API_KEY={CANARY}\n")
    secret.chmod(0o644)
    name = f"{project.name}-c"
    env = {"ORCH_OFFLINE": "0", "ORCH_WORKERS": "1", "ORCH_CREDENTIALS": str(secret), "ORCH_RUN": "canary"}
    refused = project.start(f"{name}-bad", **env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "ORCH_CREDENTIALS: the run's uid 1000 could read it" in refused.stdout + refused.stderr
    assert CANARY not in refused.stdout + refused.stderr

    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    fleet = project.run(name, **env)
    logs = fleet.logs().decode(errors="replace")
    assert f"as uid {GATEWAY_UID}" in logs and "warning" not in logs, logs
    assert json.loads(sh(fleet, "cat /orch/runs/canary/run.json"))["credential"] == "x-api-key"  # the init's
    assert CANARY not in json.dumps(fleet.attrs["Config"])  # docker inspect: Env, Cmd, Labels
    # Every process's environment, read on this (the engine's) machine: root in the container cannot
    # (no CAP_SYS_PTRACE), nor can the run's uids read each other's under strict isolation.
    environs = assert_strict(fleet, 1)
    assert len(environs) >= 5  # tini, the controller, tmux, the worker, the gateway
    assert not [pid for pid, env in environs.items() if CANARY.encode() in env]
    assert any(b"ORCH_IN_CONTAINER=1" in env for env in environs.values())  # these are the container's
    assert "Permission denied" in sh_fails(fleet, "cat /run/secrets/orch-credentials")
    everywhere = ["grep", "-rlF", CANARY, "/orch/runs", "/workspace", "/tmp", "/home/worker"]
    code, out = fleet.exec_run(everywhere, user="0")  # root in the container reads every file there
    assert isinstance(out, bytes)
    assert code == 1, out.decode(errors="replace")  # grep: nothing found
    fleet.stop(timeout=20)


def test_compose_lead_killed_mid_run_resumes(project: Project, tmp_path: Path) -> None:
    """A `lead` container killed while its finder works loses nothing: `lead --resume` relaunches the fleet
    on the run folder (strict again) and the controller finishes the run with its exit code."""
    workspace, runs = _workspace(tmp_path, _lead_spec())
    env = {**os.environ, "ORCH_RUN": "k", "ORCH_WORKSPACE": str(workspace), "ORCH_RUNS": str(runs)}
    env |= {"ORCH_EGRESS": "none", "ORCH_UID": str(UID), "ORCH_OFFLINE": "1"}
    base = [*project.cli, "-f", str(COMPOSE_FILE), "-p", project.name, "run"]
    name = f"{project.name}-k"
    started = subprocess.run([*base, "-d", "--name", name, "lead"], env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    probe = runs / "k" / "outbox" / "agent-1" / "probe.txt"
    wait_until(probe.exists, 300, "the finder to start its job")
    project.engine.containers.get(name).kill()
    done = subprocess.run([*base, "--rm", "lead", "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((runs / "k" / "report.json").read_text())
    assert report["status"] == "passed" and [f["status"] for f in report["findings"]] == ["CONFIRMED"]
    assert json.loads((runs / "k" / "run.json").read_text())["isolation"] == "strict"


def _workspace(tmp_path: Path, spec: Mapping[str, object], git: bool = False) -> tuple[Path, Path]:
    """The sample (a git repository of one commit with `git`) and `spec` as fleet.yaml, all the run's uid's;
    an empty runs folder."""
    workspace, runs = tmp_path / "ws", tmp_path / "runs"
    shutil.copytree(SAMPLE, workspace)
    runs.mkdir()
    (workspace / "fleet.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    if git:
        author = ["-c", "user.name=orch test", "-c", "user.email=test@orch.invalid"]
        for argv in (["init", "-q", "-b", "main"], ["add", "-A"], [*author, "commit", "-q", "-m", "sample"]):
            subprocess.run(["git", *argv], cwd=workspace, check=True, capture_output=True)
    for path in (runs, workspace, *workspace.rglob("*")):
        os.chown(path, UID, UID, follow_symlinks=False)
    return workspace, runs


def _secret(tmp_path: Path, lines: dict[str, str]) -> Path:
    secret = tmp_path / "credentials.env"
    secret.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    secret.chmod(0o600)  # the test's (root's): the run's uid cannot read it
    return secret


def test_compose_lead_runs_a_live_fleet_across_two_apis_and_refuses_a_run_in_use(
    project: Project, tmp_path: Path
) -> None:
    """A live spec of Claude Code and Codex workers in compose's `lead` (the scripted model on the bridge
    standing in for both model APIs): `orch run`'s environment holds no credential, so the check asks what
    the init's gateway holds. One key missing from the secret: refused in one line naming it, nothing made;
    both there: the fleet runs with both upstreams. While it runs, a second `lead` or a `fleet` of the same
    run on the same volume is refused, the running run untouched."""
    spec = {
        "workdir": ".",
        "agents": [{"agent": "claude", "workers": 1}, {"agent": "codex", "workers": 1, "model": OFFLINE_MODEL}],
        "tasks": [{"id": "pages", "goal": "Determine whether paginate returns the right page.", "worker": 1}],
    }
    workspace, runs = _workspace(tmp_path, spec)
    bridge = bridge_address(project.engine)
    keys = {"anthropic": f"sk-ant-test-{unique('k')}", "openai": f"sk-proj-test-{unique('k')}"}
    env = {**os.environ, "ORCH_RUN": "two", "ORCH_WORKSPACE": str(workspace), "ORCH_RUNS": str(runs)}
    env |= {"ORCH_EGRESS": "none", "ORCH_UID": str(UID), "ORCH_OFFLINE": "0"}
    base = [*project.cli, "-f", str(COMPOSE_FILE), "-p", project.name, "run"]
    with ScriptedModelServer(host=bridge) as anthropic, ScriptedModelServer(host=bridge) as openai:
        one = _secret(tmp_path, {"ANTHROPIC_API_KEY": keys["anthropic"], "ANTHROPIC_BASE_URL": anthropic.url})
        refused = subprocess.run(
            [*base, "--rm", "lead"], env={**env, "ORCH_CREDENTIALS": str(one)}, capture_output=True, text=True
        )
        out = refused.stdout + refused.stderr
        assert refused.returncode == 2, out
        (line,) = [x for x in out.splitlines() if "codex: OPENAI_API_KEY" in x]
        assert "claude:" not in line.split("(it holds")[0], line
        assert not (runs / "two").exists() and keys["anthropic"] not in out

        both = _secret(
            tmp_path,
            {
                "ANTHROPIC_API_KEY": keys["anthropic"],
                "ANTHROPIC_BASE_URL": anthropic.url,
                "OPENAI_API_KEY": keys["openai"],
                "OPENAI_BASE_URL": openai.url,
            },
        )
        env["ORCH_CREDENTIALS"] = str(both)
        name = f"{project.name}-two"
        started = subprocess.run([*base, "-d", "--name", name, "lead"], env=env, capture_output=True, text=True)
        assert started.returncode == 0, started.stderr
        lead = project.engine.containers.get(name)

        def ready() -> bool:
            lead.reload()
            logs = lead.logs().decode(errors="replace")
            assert lead.status == "running", logs
            return READY_LINE in logs

        wait_until(ready, 300, "the live fleet to start its workers", interval=0.5)
        info = json.loads((runs / "two" / "run.json").read_text())
        assert info["credential"] == "x-api-key,bearer" and info["isolation"] == "strict", info
        logs = lead.logs().decode(errors="replace")
        assert f"as uid {GATEWAY_UID}" in logs and "no credential" not in logs, logs
        assert {r.key_digest for r in anthropic.requests} <= {key_digest(keys["anthropic"])}
        assert {r.key_digest for r in openai.requests} <= {key_digest(keys["openai"])}

        # The same run again, from another container on the same volume, while this one runs it.
        for service in ("lead", "fleet"):
            again = subprocess.run([*base, "--rm", service], env=env, capture_output=True, text=True, timeout=120)
            assert again.returncode == 2, again.stdout + again.stderr
            assert "run 'two' is in use by another container" in again.stdout + again.stderr
        lead.reload()
        assert lead.status == "running" and (runs / "two" / "run.json").is_file()
        assert json.loads((runs / "two" / "run.json").read_text())["created"] == info["created"]
        lead.stop(timeout=20)

    # Stopped, the run is no longer in use; a re-run with a key missing is refused by the spec check, before
    # the earlier run of the name would be replaced: that run stays as it was.
    missing = subprocess.run(
        [*base, "--rm", "lead"],
        env={**env, "ORCH_CREDENTIALS": str(_secret(tmp_path, {"ANTHROPIC_API_KEY": keys["anthropic"]}))},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "codex: OPENAI_API_KEY" in missing.stdout + missing.stderr, missing.stderr
    assert "in use" not in missing.stdout + missing.stderr
    assert json.loads((runs / "two" / "run.json").read_text())["created"] == info["created"]


def test_compose_lead_lands_a_writers_change(project: Project, tmp_path: Path) -> None:
    """A writer task in compose's `lead` under strict isolation: the offline scripted writer edits its
    worktree (its worker's own uid's), the reviewer passes it, the checks pass, and the change lands. It cannot
    put anything beside its worktree (where its next job's goes: the folder is the controller's). A second
    writer's links, each looking inside, lead out of the tree: its change is refused."""
    fix = "cd {{workdir}} && sed -i 's|start = page \\* size|start = (page - 1) * size|' pages.py"
    probe = "p={{run_dir}}/outbox/agent-{{worker}}/probe.txt; stat -c %u {{workdir}}/pages.py > $p; id -u >> $p"
    beside = "touch {{run_dir}}/worktrees/agent-{{worker}}/next 2>/dev/null && echo PLANTED >> $p"
    chain = "cd {{workdir}} && mkdir sub && ln -s .. sub/up && ln -s sub/up/.. escape"
    spec = {
        "workdir": ".",
        "offline": True,
        "workers": 2,
        "checks": [
            "python3 -B -c 'from pages import paginate; assert paginate(list(range(10)), 1, 5) == [0, 1, 2, 3, 4]'"
        ],
        "tasks": [
            {
                "id": "fix",
                "role": "writer",
                "goal": "paginate(items, 1, size) skips the first page: make pages 1-based.",
                "files": ["pages.py"],
                "worker": 1,
                "offline_script": [
                    {"bash": f"{probe}; {beside}"},
                    {"bash": fix},
                    {"write": "{{result_file}}", "content": "pages are 1-based now\n"},
                    {"bash": "touch {{done_file}}"},
                    {"reply": "Finished: one change."},
                ],
            },
            {
                "id": "links",
                "role": "writer",
                "goal": "Add a shortcut to the project's parent folder.",
                "worker": 2,
                "offline_script": [
                    {"bash": chain},
                    {"write": "{{result_file}}", "content": "a shortcut\n"},
                    {"bash": "touch {{done_file}}"},
                    {"reply": "Finished."},
                ],
            },
        ],
        "changes": {"reviewers_per_change": 1},
    }
    workspace, runs = _workspace(tmp_path, spec, git=True)
    env = {**os.environ, "ORCH_RUN": "w", "ORCH_WORKSPACE": str(workspace), "ORCH_RUNS": str(runs)}
    env |= {"ORCH_EGRESS": "none", "ORCH_UID": str(UID), "ORCH_OFFLINE": "1"}
    cmd = [*project.cli, "-f", str(COMPOSE_FILE), "-p", project.name, "run", "--rm", "lead"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out  # the links' change REJECTED for scope: the gate's verdict (docs/lead.md)
    assert "isolation strict" in out, out
    report = json.loads((runs / "w" / "report.json").read_text())
    rows = {c["task"]: c for c in report["changes"]}
    assert rows["fix"]["status"] == "LANDED" and rows["links"]["status"] == "REJECTED", report["changes"]
    assert "escape: a link out of the tree" in rows["links"]["detail"], rows["links"]
    owner, writer = (runs / "w" / "outbox" / "agent-1" / "probe.txt").read_text().split()  # and no PLANTED
    assert owner == writer == str(worker_uid(1))  # its worktree's files its own, written as its own uid
    assert not (runs / "w" / "worktrees" / "agent-1" / "next").exists()
    assert "start = page * size" in (workspace / "pages.py").read_text()  # the workspace itself untouched


def test_compose_fleet_that_fails_its_first_start_leaves_nothing(project: Project, tmp_path: Path) -> None:
    """compose's `fleet` whose first start fails after the init made the run's folder and started its
    gateway (a fleet it cannot plan): exit 2 in one line, and no run folder left on the volume. Then one
    that fails after the init handed over to serve-run (its agent's binary is not there): exit 1, and no
    run folder left either, though `model/` was the gateway's and each worker's files its own."""
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, UID, UID)
    done = project.start(f"{project.name}-f", ORCH_RUNS=str(runs), ORCH_OFFLINE="1", ORCH_WORKERS="0")
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "model gateway at" in out, out  # it did get that far
    assert [x for x in out.splitlines() if x.startswith("orch-init: ") and "egress" not in x and "gateway" not in x]
    assert list(runs.iterdir()) == [], list(runs.rglob("*"))

    no_agent = ("-e", "ORCH_CLAUDE_BIN=/nonexistent")
    done = project.start(f"{project.name}-g", *no_agent, ORCH_RUNS=str(runs), ORCH_OFFLINE="1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "model gateway at" in out and "nothing of it is left" in out, out
    assert list(runs.iterdir()) == [], list(runs.rglob("*"))
