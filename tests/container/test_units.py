"""The docker backend's decisions, without an engine: allowlists, firewall rules, users, remote engines."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orch import settings
from orch.agents.registry import get_adapter
from orch.container import egress
from orch.container.engine import engine_address, is_remote_client
from orch.container.layout import ROOT_HOST_UID, container_user, writable_by
from orch.contracts import Credentials
from orch.run import uids
from orch.run.paths import agents_dir
from orch.run.records import EgressMode


def test_allowlist_defaults_model_host_and_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    api = get_adapter("claude").credentials
    got = egress.allowlist_for({}, False, ["example.org", "10.1.2.3", "https://x.test:8443/p"], api)
    assert got[0] == "api.anthropic.com"
    assert {"registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "github.com"} <= set(got)
    assert got[-3:] == ["example.org", "10.1.2.3/32", "x.test"]
    env = {"ANTHROPIC_BASE_URL": "http://llm-proxy.internal:4000/v1", settings.DEFAULT_ALLOW.name: "mirror.local, "}
    assert egress.allowlist_for(env, False, [], api) == ["llm-proxy.internal", "mirror.local"]
    # Offline runs talk to their model server on loopback: no model API host.
    assert "api.anthropic.com" not in egress.allowlist_for({}, True, [], api)
    # An agent that calls no model API gets none either.
    assert egress.allowlist_for({}, False, [], Credentials(env=()))[0] == "registry.npmjs.org"


@pytest.mark.parametrize("bad", ["", "bad host", "a;b", "$(x)", "host`x`"])
def test_allow_entries_are_checked(bad: str) -> None:
    with pytest.raises(ValueError):
        egress.normalize_entry(bad)


def test_names_that_do_not_resolve_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(host: str, *args: Any) -> list[tuple[Any, ...]]:
        if host == "gone.example":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host == "v6only.example":
            return []
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.7", 0))] * 2

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    allowed, skipped = egress.resolve(["ok.example", "gone.example", "v6only.example", "10.0.0.0/8", "::1/128"])
    assert allowed == {"ok.example": ["203.0.113.7"], "10.0.0.0/8": ["10.0.0.0/8"]}
    assert skipped == ["gone.example", "v6only.example", "::1/128"]


def test_rules_default_deny_with_allowlist_and_no_dns_out() -> None:
    rules = egress.rules(EgressMode.ALLOWLIST, ["203.0.113.7"], use_ipset=False)
    flat = [" ".join(r) for r in rules]
    assert flat[-3:] == ["iptables -P INPUT DROP", "iptables -P FORWARD DROP", "iptables -P OUTPUT DROP"]
    assert "iptables -A OUTPUT -o lo -j ACCEPT" in flat
    assert "iptables -A OUTPUT -d 203.0.113.7 -j ACCEPT" in flat
    assert flat.index("iptables -A OUTPUT -d 203.0.113.7 -j ACCEPT") < flat.index(
        "iptables -A OUTPUT -j REJECT --reject-with icmp-admin-prohibited"
    )
    # DNS: every UDP query to the container's own responder, TCP refused, before loopback is accepted
    # (Docker's resolver, 127.0.0.11, is loopback); no resolver is accepted by address.
    redirect = f"iptables -t nat -I OUTPUT 1 -p udp --dport 53 -j REDIRECT --to-ports {egress.DNS_PORT}"
    dns = "-m conntrack --ctdir ORIGINAL --ctorigdstport 53"
    tcp = f"iptables -A OUTPUT -p tcp {dns} -j REJECT --reject-with icmp-admin-prohibited"
    assert redirect in flat and tcp in flat
    assert flat.index(tcp) < flat.index("iptables -A OUTPUT -o lo -j ACCEPT")
    assert not any("--dport 53 -j ACCEPT" in r or "--dport 53 -m owner" in r for r in flat)
    none = [" ".join(r) for r in egress.rules(EgressMode.NONE, [], use_ipset=False)]
    assert redirect in none and tcp in none
    outward = [r for r in none if "-d " in r and "ACCEPT" in r]
    assert outward == [f"iptables -A OUTPUT -p udp -d 127.0.0.1 --dport {egress.DNS_PORT} -j ACCEPT"]  # loopback only


def test_none_leaves_the_live_gateway_its_model_api_alone() -> None:
    none = egress.rules(EgressMode.NONE, [], use_ipset=False, gateway_uid=61000, gateway_networks=["198.51.100.9"])
    flat = [" ".join(r) for r in none]
    owner = "-m owner --uid-owner 61000 -j ACCEPT"
    assert f"iptables -A OUTPUT -d 198.51.100.9 {owner}" in flat
    outward = [r for r in flat if "-d " in r and "ACCEPT" in r and "127.0.0.1" not in r]
    assert outward == [f"iptables -A OUTPUT -d 198.51.100.9 {owner}"]  # the gateway's uid only, and no DNS
    assert flat.index(f"iptables -A OUTPUT -d 198.51.100.9 {owner}") < flat.index(
        "iptables -A OUTPUT -j REJECT --reject-with icmp-admin-prohibited"
    )
    # an offline run (no gateway networks) stays loopback only
    offline = egress.rules(EgressMode.NONE, [], use_ipset=False, gateway_uid=61000)
    assert not any("-d " in " ".join(r) and "ACCEPT" in r and "127.0.0.1" not in r for r in offline)


def test_the_self_test_probes_every_upstream() -> None:
    """A fleet of Claude Code and Codex: both model APIs are proven refused to the run's uid, not only the first."""
    resolved = {"api.anthropic.example": ["198.51.100.9", "198.51.100.10"], "api.openai.example": ["203.0.113.5"]}
    targets = [("api.anthropic.example", 443), ("api.openai.example", 8443), ("gone.example", 443)]
    assert egress.gateway_probes(resolved, targets) == [("198.51.100.9", 443), ("203.0.113.5", 8443)]
    gw = egress.GatewayEgress(61000, [*targets, ("api.anthropic.example", 443)], 1000, 1000)
    assert gw.hosts == ["api.anthropic.example", "api.openai.example", "gone.example"]


def test_apply_runs_rules_then_self_test(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(egress, "probe_blocked", lambda: "blocked 192.0.2.1:9 (test)")
    monkeypatch.setattr(egress, "resolve", lambda entries: ({"a.example": ["203.0.113.7"]}, ["b.example"]))
    monkeypatch.setattr("orch.container.egress.shutil.which", lambda name: None)  # no ipset: one rule per address
    report = egress.apply(EgressMode.ALLOWLIST, ["a.example", "b.example"], run=lambda argv: ran.append(list(argv)))
    assert report.skipped == ["b.example"] and report.selftest.startswith("blocked") and not report.ipset
    assert report.dns == ["a.example"]
    assert ["iptables", "-A", "OUTPUT", "-d", "203.0.113.7", "-j", "ACCEPT"] in ran
    assert ["ip6tables", "-P", "OUTPUT", "DROP"] in ran
    assert egress.apply(EgressMode.OPEN, [], run=lambda argv: ran.append(["never"])).selftest.startswith("skipped")
    assert ["never"] not in ran


def test_container_user(tmp_path: Path) -> None:
    # A non-root user runs the container as themself.
    assert container_user(tmp_path, copy=False, uid=1234, gid=99) == (1234, 99)
    # Root: the workdir's owner when that is not root, else 1000:1000; never 0.
    if os.getuid() == 0:
        os.chown(tmp_path, 0, 0)
        assert container_user(tmp_path, copy=False, uid=0, gid=0) == (ROOT_HOST_UID, ROOT_HOST_UID)
        os.chown(tmp_path, 2001, 2002)
        assert container_user(tmp_path, copy=False, uid=0, gid=0) == (2001, 2002)
        assert container_user(tmp_path, copy=True, uid=0, gid=0) == (ROOT_HOST_UID, ROOT_HOST_UID)
        assert writable_by(tmp_path, 2001, 2002) and not writable_by(tmp_path, 3000, 3000)


@pytest.mark.parametrize(
    ("base_url", "remote"),
    [
        ("http+docker://localhost", False),
        ("http+docker://localnpipe", False),
        ("http://127.0.0.1:2375", True),
        ("https://vps.example:2376", True),
        ("http+docker://ssh", True),
    ],
)
def test_remote_is_read_from_the_clients_base_url(base_url: str, remote: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_DOCKER_REMOTE", raising=False)
    client: Any = SimpleNamespace(api=SimpleNamespace(base_url=base_url))
    assert is_remote_client(client) is remote
    monkeypatch.setenv("ORCH_DOCKER_REMOTE", "0")
    assert is_remote_client(client) is False


def test_agents_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_AGENTS_DIR", str(tmp_path / "agents"))
    assert agents_dir() == tmp_path / "agents"
    monkeypatch.delenv("ORCH_AGENTS_DIR")
    assert agents_dir() == Path(os.environ["ORCH_HOME"]) / "agents"


def test_docker_context_names_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no DOCKER_HOST, the current docker context's endpoint is the engine (as for the docker CLI)."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        pytest.skip("the docker CLI is needed to make a context")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    assert engine_address() == "unix:///var/run/docker.sock"
    made = subprocess.run(
        [docker_cli, "context", "create", "vps", "--docker", "host=tcp://127.0.0.1:1"], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("DOCKER_CONTEXT", "vps")
    assert engine_address() == "tcp://127.0.0.1:1"
    monkeypatch.delenv("DOCKER_CONTEXT")
    subprocess.run([docker_cli, "context", "use", "vps"], capture_output=True, check=True)
    assert engine_address() == "tcp://127.0.0.1:1"


def test_the_checks_uid_has_no_network_not_even_loopback() -> None:
    uid = uids.checks_uid()
    for mode in (EgressMode.ALLOWLIST, EgressMode.NONE):
        flat = [" ".join(r) for r in egress.rules(mode, ["203.0.113.7"], use_ipset=False)]
        block = f"iptables -A OUTPUT -m owner --uid-owner {uid} -j REJECT"
        assert flat.index(block) < flat.index("iptables -A OUTPUT -o lo -j ACCEPT")
        # before the redirected DNS queries are accepted too: the checks ask no name server, not even ours
        assert flat.index(block) < min(i for i, r in enumerate(flat) if r.startswith("iptables -A") and "53" in r)
    assert uids.worker_of(uid) is None and uid != settings.GATEWAY_UID.get()


CANARY = "sk-ant-api03-CANARY-compose-0123456789abcdef"


def test_compose_boot_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """compose.yaml (no boot line): the init's gateway gets an upstream for each credential set, the scripted
    model when offline, nothing to hold without either; a bad run name is refused."""
    from orch.container.initboot import InitError, env_boot

    monkeypatch.delenv(settings.RUN.name, raising=False)
    assert env_boot({"ANTHROPIC_API_KEY": CANARY}) is None  # not compose: no ORCH_RUN
    monkeypatch.setenv(settings.RUN.name, "demo")
    monkeypatch.setenv(settings.OFFLINE.name, "0")
    boot = env_boot({"ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": "sk-openai-x"})
    assert boot is not None and boot.run == "demo" and not boot.offline
    secrets = {u.secret.get_secret_value() for u in boot.upstreams}
    assert CANARY in secrets and "sk-openai-x" in secrets
    assert env_boot({"ANTHROPIC_API_KEY": ""}) is None
    monkeypatch.setenv(settings.OFFLINE.name, "1")
    offline = env_boot({"ANTHROPIC_API_KEY": CANARY})
    assert offline is not None and [u.kind for u in offline.upstreams] == ["scripted"]
    monkeypatch.setenv(settings.RUN.name, "../etc")
    with pytest.raises(InitError, match=settings.RUN.name):
        env_boot({})


def test_compose_live_fleet_checked_against_the_inits_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compose: the init tells (names, no secret) which agent kinds its gateway's credentials serve, and
    `orch run`, whose own environment holds none, checks a live fleet against that: two APIs both held run;
    one missing is refused in one line naming its variable; nothing told (offline): not set at all."""
    from orch.container.init import tell_held
    from orch.container.initboot import env_boot
    from orch.errors import UsageError
    from orch.fleet.rungateway import fleet_credentials
    from tests.helpers import orch

    monkeypatch.setenv(settings.RUN.name, "demo")
    monkeypatch.setenv(settings.OFFLINE.name, "0")
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", settings.GATEWAY_HOLDS.name):
        monkeypatch.delenv(name, raising=False)  # the run's environment: no credential
    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": "sk-openai-x"}))
    held = os.environ[settings.GATEWAY_HOLDS.name]
    assert {"claude", "codex"} <= set(held.split(",")) and CANARY not in held
    assert fleet_credentials(["claude", "codex"], offline=False) is not None  # both held: runs

    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY}))
    with pytest.raises(UsageError) as refused:
        fleet_credentials(["claude", "codex"], offline=False)
    line = refused.value.one_line()
    assert "codex: OPENAI_API_KEY" in line and "claude:" not in line.split("(it holds")[0] and "\n" not in line
    assert fleet_credentials(["claude", "codex"], offline=True).upstreams[0].kind == "scripted"
    # `orch spec check` (run by the init before it replaces an earlier run of the name) refuses it too.
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "workdir: .\nagents:\n  - {agent: claude, workers: 1}\n  - {agent: codex, workers: 1}\ntasks:\n  - {goal: g}\n"
    )
    checked = orch("spec", "check", spec)
    assert checked.exit_code == 2 and "codex: OPENAI_API_KEY" in checked.output, checked.output

    monkeypatch.setenv(settings.OFFLINE.name, "1")
    tell_held(env_boot({"ANTHROPIC_API_KEY": CANARY}))
    assert settings.GATEWAY_HOLDS.name not in os.environ


def test_compose_run_in_use_is_seen_through_its_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another container on the same runs volume serving the run (serve-run's lock) or driving it (the
    controller's lock) is seen as in use; its locks released (its processes gone), the run is free; a link
    planted in a lock's place is not a lock."""
    import fcntl

    from orch.container import compose
    from orch.container.serverun import hold_serve_lock
    from orch.run.folder import RunFolder

    monkeypatch.setattr(compose, "run_mount", lambda name: str(tmp_path / name))
    run = RunFolder(tmp_path / "demo")
    assert not compose.in_use("demo")  # no run at all
    run.root.mkdir()
    held = hold_serve_lock(run)
    assert compose.in_use("demo")
    os.close(held)
    assert not compose.in_use("demo")
    fd = os.open(run.controller_lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as orch.lead.controller.controller_lock takes it
    assert compose.in_use("demo")
    os.close(fd)
    run.serve_lock.unlink()
    run.serve_lock.symlink_to(run.controller_lock)
    assert not compose.in_use("demo")


def test_compose_init_clears_every_credential_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from orch.container.initboot import clear_credentials

    names = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY")
    for name in names:
        monkeypatch.setenv(name, CANARY)
    clear_credentials()
    assert not [name for name in names if name in os.environ]


def test_a_run_folder_is_created_over_the_gateways_files_only(tmp_path: Path) -> None:
    """The init's gateway made model/ and logs/ first (compose): the run is created there; anything else
    (a run, a stray file) still refuses."""
    from orch.run.folder import RunFolder
    from tests.helpers import run_info

    run = RunFolder(tmp_path / "demo")
    info = run_info("demo", workdir=str(tmp_path))
    run.model_dir.mkdir(parents=True)
    (run.model_dir / "usage.json").write_text("{}")
    run.logs_dir.mkdir()
    assert run.only_gateway()
    run.create(info)
    assert run.exists() and (run.model_dir / "usage.json").exists() and not run.only_gateway()
    with pytest.raises(FileExistsError):
        run.create(info)
    other = RunFolder(tmp_path / "other")
    (other.root / "stray").mkdir(parents=True)
    assert not other.only_gateway()
    with pytest.raises(FileExistsError):
        other.create(info)


def test_compose_secret_file_is_read_only_when_the_run_cannot_read_it(tmp_path: Path) -> None:
    """ORCH_CREDENTIALS: `VAR=value` lines of credential variables; refused when the run's uid could read
    it or a line is not one, the error never echoing a value; /dev/null (compose's default) or none: nothing."""
    from orch.container.initboot import InitError, read_secrets

    secret = tmp_path / "orch.env"
    secret.write_text(f"# mine\n\nexport ANTHROPIC_API_KEY='{CANARY}'\nANTHROPIC_BASE_URL=https://x.example\n")
    secret.chmod(0o600)
    owner = secret.stat().st_uid
    other = owner + 1
    assert read_secrets(secret, other) == {"ANTHROPIC_API_KEY": CANARY, "ANTHROPIC_BASE_URL": "https://x.example"}
    with pytest.raises(InitError, match="could read it") as owned:
        read_secrets(secret, owner)
    secret.chmod(0o640)
    with pytest.raises(InitError, match="mode 640"):
        read_secrets(secret, other)
    secret.chmod(0o600)
    secret.write_text(f"PATH={CANARY}\n")
    with pytest.raises(InitError, match="line 1: expected VAR=value") as bad:
        read_secrets(secret, other)
    assert CANARY not in str(bad.value) + str(owned.value)
    assert read_secrets(Path("/dev/null"), other) == {} and read_secrets(tmp_path / "none", other) == {}


def test_compose_lead_takes_the_spec_or_resume(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """compose's `lead`: `init --lead SPEC` starts the spec afresh, `--lead --resume` continues the run;
    anything else is one line and exit 2, before anything is done."""
    from orch.container import compose, init
    from orch.container.initboot import InitError

    assert compose.parse_lead(["/workspace/fleet.yaml"], "ci") == compose.Lead("ci", "/workspace/fleet.yaml")
    resume = compose.parse_lead(["--resume"], "ci")
    assert resume.spec is None
    assert compose.lead_command(resume)[-4:] == ["serve-run", "ci", "--drive", "--resume"]
    with pytest.raises(InitError, match="needs ORCH_RUN"):
        compose.parse_lead(["x.yaml"], None)
    for var, value in (("ORCH_RUN", "ci"), ("ORCH_UID", "1000"), ("ORCH_GID", "1000")):
        monkeypatch.setenv(var, value)
    for argv in (["--lead"], ["--lead", "a.yaml", "b.yaml"], ["--lead", ""]):
        assert init.main(argv) == 2
        assert "--lead takes one argument" in capsys.readouterr().err
