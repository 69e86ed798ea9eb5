"""The first process of a run's container: confine, start the model gateway under its own uid, then drop
privileges for good, then exec the run.

    python -m orch.container.init -- CMD [ARG...]
    python -m orch.container.init --lead SPEC | --resume      (compose.yaml's `lead`: orch.container.compose)

It starts as root holding only the capabilities it needs for this (see orch.backends.docker.boot.INIT_CAPS):
0. with ORCH_BOOT_STDIN=1 (`orch up`), reads the host's boot line (InitBoot: the run and its model
   upstream, the credential included) from stdin before anything else, says so on stdout (the host waits
   for that), and points stdin at /dev/null: the credentials never sit in the container's environment,
   command line, image, labels or run folder, where `docker inspect` or a worker could read it
   (orch.container.bootline);
1. applies the egress policy (orch.container.egress), the model API open to the gateway's uid only, DNS
   answered in the container for the allowlist's names only (orch.container.dns), and writes its
   report to /tmp for the controller to log;
2. hands the root-owned mount points listed in ORCH_CHOWN to the run's uid (fresh volumes);
3. copies a read-only mounted login file (the agent's `.credentials.json`, only when the gateway passes
   the workers' own login through) into the tmpfs home, readable by the run's uid only;
4. compose's `lead`: has the run made from the spec by the run's uid (orch.container.compose);
5. starts the run's model gateway (orch.gateway) as ORCH_GATEWAY_UID, never the run's uid, through
   setpriv with no groups, no capabilities and no-new-privs, under its keeper (orch.container.gatewaykeeper,
   the same uid), which starts it again as it was if it dies; gives it `model/` in the run folder (0755:
   the workers read it, only the gateway writes it) and saves its handle (url, the keeper's pid, control
   key) where the controller looks (orch.gateway.process.handle_path), readable by the run's uid only. The
   gateway's memory and its own files are another uid's: a worker can neither read nor trace them;
6. under strict isolation (run.json), gives each worker its own files (orch.container.owners);
7. execs `setpriv` to become ORCH_UID:ORCH_GID with no supplementary groups, empty capability sets
   (effective, permitted, inheritable, ambient and bounding) and no-new-privs, which then execs CMD.
   Under strict isolation SETUID, SETGID and SETPCAP stay (ambient, nothing else), so that the run's tmux
   server can start each pane as its worker; each pane drops them all before its agent starts.

Nothing in the container runs as root after step 7, and nothing can get root or a capability back.
Without ORCH_BOOT_STDIN (compose.yaml, started without orch on the host) step 0 reads compose's secret
file (SECRETS_FILE, refused if the run's uid could read it) and the environment instead (`env_boot`): the
run is ORCH_RUN, and the gateway gets one upstream per model API whose credential is set (the scripted
model with ORCH_OFFLINE=1). Every credential variable is then taken out of
the environment before the gateway starts and before the exec, so no process of the run holds one. With
no credential set and ORCH_OFFLINE=0 the controller starts the gateway itself, with nothing to hold.
A compose run that stops before step 7 (a bad spec, a gateway that did not start) leaves no run folder,
and a run that another container on the same runs volume serves or drives is refused before anything
(compose.in_use). A live compose fleet is checked against what the gateway holds (`tell_held`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from orch.agents.registry import get_adapter
from orch.container import compose
from orch.container.bootline import (
    ACK_LINE,
    SECRETS_FILE,
    InitBoot,
    InitError,
    clear_credentials,
    copy_credentials,
    credential_variables,
    detach_stdin,
    env_boot,
    read_boot,
    read_boot_file,
    read_secrets,
)
from orch.container.egress import (
    EgressError,
    GatewayEgress,
    HomeEgress,
    allowlist_for,
    apply,
    url_host_port,
    write_report,
)
from orch.container.layout import WORKDIR, run_mount
from orch.container.owners import isolate_workers, own_model_dir, remove_run, run_folder
from orch.errors import OrchError
from orch.gateway.credential import FleetUpstreams
from orch.gateway.modeldir import GatewayBoot
from orch.gateway.process import GatewayHandle, handle_path, load_handle, save_handle, start_gateway
from orch.run.folder import RunFolder, validate_name
from orch.run.records import EgressMode, Isolation, RunInfo
from orch.run.uids import READ_ALL, SWITCH_CAPS, drop_argv, no_new_privs
from orch.settings.compose import AGENT, ALLOW, CREDENTIALS, EGRESS, OFFLINE, RUN, UID
from orch.settings.internal import (
    BOOT_FILE,
    BOOT_STDIN,
    CHOWN,
    EGRESS_ALLOW,
    GATEWAY_CREDENTIAL,
    GATEWAY_HOLDS,
    GID,
    SWARM_COLLECTOR,
)
from orch.settings.user import GATEWAY_UID

KEEPER = "orch.container.gatewaykeeper"
GATEWAY_HOME = "/tmp/orch-gateway"
"""The gateway's own directory (0700, its uid): its handle file and HOME; no other uid can enter it."""


@dataclass(frozen=True)
class Given:
    """What the init reads before it does anything: the settings, the boot, the command."""

    uid: int
    gid: int
    mode: EgressMode
    boot: InitBoot | None
    compose_run: str | None
    """ORCH_RUN, for a container compose started (no boot line)."""
    lead: compose.Lead | None
    argv: list[str]


def _id(value: int | None, name: str) -> int:
    if value is None:
        raise InitError(f"{name} must be set to a number")
    if value <= 0:
        raise InitError(f"refusing to run the fleet as root ({name}={value})")
    return value


def gateway_uid(run_uid: int) -> int:
    value = GATEWAY_UID.get()
    if value <= 0 or value == run_uid:
        raise InitError(
            f"{GATEWAY_UID.name}={value}: the gateway needs a uid of its own (not root, not the run's {run_uid})"
        )
    return value


def start_run_gateway(boot: InitBoot, uid: int, gid: int, gw_uid: int) -> GatewayHandle:
    """Start the run's gateway as `gw_uid`, save its handle for the run's uid; the handle."""
    run = run_folder(boot.run, uid, gid)
    own_model_dir(run, gw_uid)
    home = Path(GATEWAY_HOME)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, gw_uid, gw_uid)
    log = run.logs_dir / "gateway.log"  # the gateway's stderr: its uid's, so workers cannot forge it
    log.touch(mode=0o644)
    os.chown(log, gw_uid, gw_uid)
    gateway_boot = GatewayBoot(
        run=boot.run,
        run_dir=str(run.root),
        workdir=WORKDIR,
        upstreams=boot.upstreams,
        replay=boot.replay,
        control_key=SecretStr(secrets.token_hex(24)),
        offline=boot.offline,
    )
    # Its keeper runs it and starts it again, as this uid with the same boot line, if it dies: the controller
    # (the run's uid) could not (orch.container.gatewaykeeper).
    prefix = [*drop_argv(gw_uid, gw_uid), "env", f"HOME={home}", sys.executable, "-m", KEEPER, "--"]
    try:
        handle = start_gateway(gateway_boot, home / "handle.json", log, argv_prefix=prefix)
    except OrchError as exc:
        raise InitError(f"the model gateway did not start: {exc.one_line()}", code=1) from None
    # The keeper's pid, not its supervisor's: it leads the gateway's session (start_gateway) and outlives a
    # supervisor that dies; `_stop_gateway` stops its whole group.
    handle = handle.model_copy(update={"pid": os.getpgid(handle.pid)})
    target = handle_path(boot.run)
    save_handle(target, handle)
    os.chown(target, uid, gid)
    # run.json's `credential` (orch.fleet.rungateway.ensure, which finds this gateway): names, never a secret.
    os.environ[GATEWAY_CREDENTIAL.name] = FleetUpstreams(tuple(boot.upstreams)).schemes
    return handle


def _strict_run(name: str | None) -> tuple[RunFolder, RunInfo] | None:
    """The run, when it exists and its run.json asks for strict isolation."""
    if name is None:
        return None
    run = RunFolder(Path(run_mount(name)))
    if not run.exists():  # compose's first start: the controller creates the run after the exec
        return None
    info = run.info()
    return (run, info) if info.isolation is Isolation.STRICT else None


def _allowlist(offline: bool, extra: list[str], model_api: bool) -> list[str]:
    """The workers' allowlist when the host did not decide it (compose): the defaults plus ORCH_ALLOW."""
    try:
        credentials = get_adapter(AGENT.get()).facts.credentials
    except OrchError as exc:
        raise InitError(f"{AGENT.name}: {exc.one_line()}") from None
    try:
        return allowlist_for(os.environ, offline, extra, credentials, model_api=model_api)
    except ValueError as exc:
        raise InitError(f"ORCH_ALLOW: {exc}") from None


def _gateway_egress(boot: InitBoot | None, gw_uid: int, uid: int, gid: int) -> GatewayEgress | None:
    """Every upstream API's host and port, the gateway's alone (the self-test probes each of them)."""
    if boot is None:
        return None
    found = [hp for u in boot.upstreams if u.kind == "api" and (hp := url_host_port(u.url)) is not None]
    if not found:
        return None
    return GatewayEgress(gw_uid, list(dict.fromkeys(found)), uid, gid)


def _home_egress(uid: int) -> HomeEgress | None:
    """A swarm task's collector (ORCH_SWARM_COLLECTOR, `address:port`): the run's uid alone may reach it."""
    target = SWARM_COLLECTOR.get()
    if target is None:
        return None
    address, _, port = target.rpartition(":")
    if not address or not port.isdigit():
        raise InitError(f"{SWARM_COLLECTOR.name}={target!r}: expected address:port")
    return HomeEgress(uid, address, int(port))


def _dns_log(boot: InitBoot | None, uid: int, gid: int) -> Path:
    """Where the DNS responder notes the names it refused: the run folder's logs when the run is known."""
    if boot is None:
        return Path("/tmp/orch-dns.log")
    return run_folder(boot.run, uid, gid).logs_dir / "dns.log"


def tell_held(boot: InitBoot | None) -> None:
    """compose: which agent kinds the gateway's credentials serve (names, never a secret), for `orch run`'s
    check of a live fleet; this process's environment, and so the run's, holds no credential after this."""
    held = [] if boot is None or boot.offline else [a for u in boot.upstreams if u.kind == "api" for a in u.agents]
    if held:
        os.environ[GATEWAY_HOLDS.name] = ",".join(dict.fromkeys(held))
    else:
        os.environ.pop(GATEWAY_HOLDS.name, None)


def read_given(argv: list[str]) -> Given:
    """The settings, the boot (the host's line, or compose's secret and environment) and the command; every
    credential variable out of the environment from here on."""
    lead_args = None
    if argv[:1] == [compose.LEAD]:
        lead_args, argv = argv[1:], []
    elif argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv and lead_args is None:
        raise InitError("usage: python -m orch.container.init -- CMD [ARG...] | --lead SPEC|--resume")
    try:
        uid, gid = _id(UID.get(), UID.name), _id(GID.get(), GID.name)
        egress, boot_stdin, boot_file = EGRESS.get(), BOOT_STDIN.get(), BOOT_FILE.get()
        hosted = boot_stdin or boot_file is not None  # a boot from orch on the host (or for a swarm task)
        compose_run = validate_name(RUN.get()) if not hosted and RUN.is_set() else None
    except OrchError as exc:
        raise InitError(exc.one_line()) from None
    boot: InitBoot | None
    if boot_stdin:
        boot = read_boot()
        print(ACK_LINE, flush=True)
        detach_stdin()
    elif boot_file is not None:
        boot = read_boot_file(boot_file, uid)
    else:
        given = [var for var in sorted(credential_variables()) if os.environ.get(var)]
        if given:  # `docker exec` gives the container's environment to its processes too
            print(
                f"orch-init: warning: {', '.join(given)} came by the container's environment, which every "
                f"`docker exec` process gets too; put it in {CREDENTIALS.name} (a file) instead",
                file=sys.stderr,
                flush=True,
            )
        boot = env_boot({**os.environ, **read_secrets(Path(SECRETS_FILE), uid)})
        tell_held(boot)
    clear_credentials()
    try:
        mode = EgressMode(egress)
    except ValueError:
        raise InitError(f"unknown {EGRESS.name} {egress!r}") from None
    lead = compose.parse_lead(lead_args, compose_run) if lead_args is not None else None
    return Given(uid, gid, mode, boot, compose_run, lead, argv)


def confine(given: Given) -> None:
    """Steps 1 to 3: the egress policy, the mount points, a login file."""
    uid, gid, boot = given.uid, given.gid, given.boot
    offline, extra = OFFLINE.get(), ALLOW.get()
    decided = EGRESS_ALLOW.get() if EGRESS_ALLOW.is_set() else None
    gw_uid = gateway_uid(uid) if boot is not None else None
    # `orch up` decided the workers' list; the model API is the gateway's alone when it is ours.
    allow = decided if decided is not None else _allowlist(offline, extra, model_api=boot is None)
    gateway = _gateway_egress(boot, gw_uid, uid, gid) if gw_uid is not None else None
    try:
        dns_log = _dns_log(boot, uid, gid)
        open_ = given.mode is EgressMode.OPEN
        home = None if open_ else _home_egress(uid)
        report = apply(given.mode, allow, gateway=None if open_ else gateway, dns_log=dns_log, home=home)
    except EgressError as exc:
        raise InitError(f"egress policy failed: {exc}", code=1) from None
    write_report(report)
    only = f"; gateway only {sorted(report.gateway)}" if report.gateway else ""
    print(
        f"orch-init: egress {report.mode}: allowed {sorted(report.allowed)}{only}; skipped {report.skipped}; "
        f"self-test {report.selftest}; dns {report.dns_selftest or 'open'}",
        flush=True,
    )
    for path in CHOWN.get():
        if os.stat(path).st_uid == 0:  # a fresh volume; a user's own folder keeps its owner
            os.chown(path, uid, gid)
    copy_credentials(uid, gid)


def prepare(given: Given) -> tuple[int, bool]:
    """Steps 4 to 6; (exit code, strict). Any failure is an InitError, or a child's exit code."""
    uid, gid, boot = given.uid, given.gid, given.boot
    if given.lead is not None:
        code = compose.prepare_lead(given.lead, uid, gid)
        if code != 0:
            return code, False
    if boot is not None:
        try:
            handle = start_run_gateway(boot, uid, gid, gateway_uid(uid))
        except OSError as exc:
            raise InitError(f"the model gateway did not start: {exc}", code=1) from None
        print(f"orch-init: model gateway at {handle.url} as uid {gateway_uid(uid)}", flush=True)
    name = boot.run if boot is not None else given.compose_run
    if given.compose_run is not None and "serve-run" in given.argv and "--create" in given.argv:
        try:
            compose.create_fleet_run(given.compose_run, uid, gid)
        except OrchError as exc:
            raise InitError(exc.one_line()) from None
    try:
        strict = _strict_run(name)
        if strict is not None:
            isolate_workers(*strict, uid, gid)
    except (OrchError, OSError) as exc:
        raise InitError(f"cannot isolate the workers: {exc}", code=1) from None
    return 0, strict is not None


def _stop_gateway(name: str) -> None:
    """The gateway this init started (its own session), stopped before its run folder goes."""
    with contextlib.suppress(OrchError, OSError):
        os.killpg(load_handle(handle_path(name)).pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    try:
        given = read_given(argv)
    except InitError as exc:
        print(f"orch-init: {exc}", file=sys.stderr, flush=True)
        return 2
    if os.geteuid() != 0:
        if given.mode is not EgressMode.OPEN or given.boot is not None or given.lead is not None:
            print("orch-init: must start as root to apply the egress policy and start the gateway", file=sys.stderr)
            return 2
        os.execvp(given.argv[0], given.argv)
    lead, name = given.lead, given.compose_run
    if name is not None and compose.in_use(name):
        print(
            f"orch-init: run {name!r} is in use by another container on this runs volume (its fleet or "
            "controller is alive): stop it first, or choose another ORCH_RUN",
            file=sys.stderr,
            flush=True,
        )
        return 2
    if lead is not None and (code := compose.start_lead(lead, given.uid, given.gid)) != 0:
        return code  # a bad spec, or no run to resume: nothing made, nothing removed
    # compose's new run (a first `fleet`, a `lead` spec): if it does not start, nothing of it stays.
    fresh = name is not None and not os.path.lexists(run_mount(name))
    try:
        confine(given)
        code, strict = prepare(given)
    except InitError as exc:
        print(f"orch-init: {exc}", file=sys.stderr, flush=True)
        code, strict = exc.code, False
    if code != 0:
        if fresh and name is not None:
            _stop_gateway(name)
            remove_run(name)
        return code
    command = compose.lead_command(lead) if lead is not None else given.argv
    # Under strict isolation the run's processes keep SETUID and SETGID (ambient, nothing else), so that
    # its tmux server can start each pane as its worker's uid; every pane then drops them for good. A swarm
    # task's command is its syncer, which keeps CAP_DAC_READ_SEARCH for itself (orch.backends.swarm.syncer).
    keep = (*(SWITCH_CAPS if strict else ()), *((READ_ALL,) if SWARM_COLLECTOR.get() else ()))
    setpriv = [*drop_argv(given.uid, given.gid, keep), *command]
    os.execvp(setpriv[0], setpriv)


if __name__ == "__main__":
    no_new_privs()  # first, as `--security-opt no-new-privileges` would where the engine cannot (Swarm 20.10)
    sys.exit(main(sys.argv[1:]))
