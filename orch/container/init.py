"""The first process of a run's container: confine, start the model gateway under its own uid, then drop
privileges for good, then exec the run.

    python -m orch.container.init -- CMD [ARG...]

It starts as root holding only the capabilities it needs for this (see orch.container.boot.INIT_CAPS):
0. with ORCH_BOOT_STDIN=1 (`orch up`), reads the host's boot line (InitBoot: the run and its model
   upstream, the credential included) from stdin before anything else, says so on stdout (the host waits
   for that), and points stdin at /dev/null: the credentials never sit in the container's environment,
   command line, image, labels or run folder, where `docker inspect` or a worker could read it;
1. applies the egress policy (orch.container.egress), the model API open to the gateway's uid only, DNS
   answered in the container for the allowlist's names only (orch.container.dns), and writes its
   report to /tmp for the controller to log;
2. hands the root-owned mount points listed in ORCH_CHOWN to the run's uid (fresh volumes);
3. copies a read-only mounted login file (the agent's `.credentials.json`, only when the gateway passes
   the workers' own login through) into the tmpfs home, readable by the run's uid only;
4. starts the run's model gateway (orch.gateway) as ORCH_GATEWAY_UID, never the run's uid, through
   setpriv with no groups, no capabilities and no-new-privs; gives it `model/` in the run folder (0755:
   the workers read it, only the gateway writes it) and saves its handle (url, pid, control key) where
   the controller looks (orch.gateway.process.handle_path), readable by the run's uid only. The
   gateway's memory and its own files are another uid's: a worker can neither read nor trace them;
5. under strict isolation (run.json), gives each worker its own files (isolate_workers);
6. execs `setpriv` to become ORCH_UID:ORCH_GID with no supplementary groups, empty capability sets
   (effective, permitted, inheritable, ambient and bounding) and no-new-privs, which then execs CMD.
   Under strict isolation SETUID, SETGID and SETPCAP stay (ambient, nothing else), so that the run's tmux
   server can start each pane as its worker; each pane drops them all before its agent starts.

Nothing in the container runs as root after step 6, and nothing can get root or a capability back.
Without ORCH_BOOT_STDIN (compose.yaml, started without orch on the host) step 0 reads compose's secret
file (SECRETS_FILE, refused if the run's uid could read it) and the environment instead (`env_boot`): the
run is ORCH_RUN, and the gateway gets one upstream per model API whose credential is set (the scripted
model with ORCH_OFFLINE=1). Every credential variable is then taken out of
the environment before the gateway starts and before the exec, so no process of the run holds one. With
no credential set and ORCH_OFFLINE=0 the controller starts the gateway itself, with nothing to hold.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import sys
import time
from pathlib import Path

from pydantic import SecretStr, ValidationError

from orch import settings
from orch.agents.registry import ADAPTERS, get_adapter
from orch.container.egress import EgressError, GatewayEgress, allowlist_for, apply, url_host_port, write_report
from orch.container.layout import WORKDIR, run_mount
from orch.container.serverun import compose_request
from orch.errors import OrchError
from orch.fleet import launch
from orch.gateway.credential import fleet_upstreams
from orch.gateway.process import handle_path, save_handle, start_gateway
from orch.gateway.records import GatewayBoot, Upstream
from orch.run.folder import RunFolder, validate_name
from orch.run.records import EgressMode, Isolation, RunInfo, Strict
from orch.run.uids import SWITCH_CAPS, drop_argv, worker_uid

CREDENTIALS_MOUNT = "/run/orch/credentials.json"
SECRETS_FILE = "/run/secrets/orch-credentials"
"""compose.yaml's secret (ORCH_CREDENTIALS): `VAR=value` lines of model API credentials, for the gateway."""
ACK_LINE = "orch-init: boot line received"  # orch.container.boot.start waits for it
BOOT_LINE_TIMEOUT = 60.0
BOOT_LINE_MAX = 1 << 20
GATEWAY_HOME = "/tmp/orch-gateway"
"""The gateway's own directory (0700, its uid): its handle file and HOME; no other uid can enter it."""


class InitBoot(Strict):
    """The host's one line on the container's stdin (orch.container.boot.start)."""

    run: str
    offline: bool = False
    upstreams: list[Upstream]
    """One per model API of the fleet, each with its credential."""


class InitError(Exception):
    """A one-line reason the container must not start."""


def _id(value: int | None, name: str) -> int:
    if value is None:
        raise SystemExit(f"orch-init: {name} must be set to a number")
    if value <= 0:
        raise SystemExit(f"orch-init: refusing to run the fleet as root ({name}={value})")
    return value


def read_boot(fd: int = 0, timeout: float = BOOT_LINE_TIMEOUT) -> InitBoot:
    """The first line on `fd`, within `timeout` seconds. Errors never echo the line: it holds a secret."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise InitError(f"no boot line on stdin within {timeout:g}s (the host writes it once the container starts)")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise InitError("stdin closed before the boot line arrived")
        data += chunk
        if len(data) > BOOT_LINE_MAX:
            raise InitError("the boot line is too long")
    try:
        return InitBoot.model_validate_json(data.split(b"\n", 1)[0])
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InitError(f"bad boot line: {'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None


def _credential_variables() -> set[str]:
    """Every variable of any agent's model API (its keys and base URL)."""
    return {var for kind in ADAPTERS for var in get_adapter(kind).credentials.variables}


def env_boot(env: dict[str, str]) -> InitBoot | None:
    """compose.yaml's boot (no host, no boot line): the run ORCH_RUN, one upstream per model API whose
    credential is set in `env` (the scripted model with ORCH_OFFLINE=1); None when there is nothing for
    the gateway to hold (no credential, not offline) or no ORCH_RUN."""
    if not settings.RUN.is_set():
        return None
    try:
        name = validate_name(settings.RUN.get())
    except OrchError as exc:
        raise InitError(f"{settings.RUN.name}: {exc.one_line()}") from None
    if settings.OFFLINE.get():
        return InitBoot(run=name, offline=True, upstreams=[Upstream(kind="scripted")])
    kinds = {kind: creds for kind in ADAPTERS if (creds := get_adapter(kind).credentials).in_env(env)}
    if not kinds:
        return None
    try:
        found = fleet_upstreams(kinds, env, offline=False, strict=False)
    except OrchError as exc:
        raise InitError(exc.one_line()) from None
    return InitBoot(run=name, upstreams=list(found.upstreams)) if found.upstreams else None


def read_secrets(path: Path, uid: int) -> dict[str, str]:
    """The credentials in compose's secret file (none when it is absent or not a regular file: /dev/null).
    Refused when the run's uid could read it too (its owner, or any group or other bit set): the run's
    processes would then reach the credential the gateway is there to keep from them. Errors never echo
    a value."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    if not path.is_file() or st.st_size == 0:
        return {}
    if st.st_uid == uid or st.st_mode & 0o077:
        raise InitError(
            f"{settings.CREDENTIALS.name}: the run's uid {uid} could read it (owner {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): make it mode 600 and owned by another user (sudo chown root)"
        )
    allowed = _credential_variables()
    found: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        name = name.strip()
        if not sep or name not in allowed:
            raise InitError(
                f"{settings.CREDENTIALS.name}: line {number}: expected VAR=value with VAR one of "
                f"{', '.join(sorted(allowed))}"
            )
        found[name] = value.strip().strip("'\"")
    return found


def _clear_credentials() -> None:
    """No process started from here on (the gateway, the controller, the workers) inherits a credential."""
    for var in _credential_variables():
        os.environ.pop(var, None)


def _detach_stdin() -> None:
    """Nothing started later inherits the stdin the host attached to."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _copy_credentials(uid: int, gid: int) -> None:
    source = Path(CREDENTIALS_MOUNT)
    home_path = settings.CREDENTIALS_HOME_PATH.get()  # set by the host (orch.container.boot)
    if not source.is_file() or not home_path:
        return
    target = Path(os.environ.get("HOME", "/home/worker")) / home_path
    target_dir = target.parent
    target_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(target_dir, uid, gid)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, source.open("rb") as src:
        shutil.copyfileobj(src, out)
    os.chown(target, uid, gid)


def gateway_uid(run_uid: int) -> int:
    value = settings.GATEWAY_UID.get()
    if value <= 0 or value == run_uid:
        raise InitError(
            f"{settings.GATEWAY_UID.name}={value}: the gateway needs a uid of its own "
            f"(not root, not the run's {run_uid})"
        )
    return value


def own_model_dir(run: RunFolder, gw_uid: int) -> None:
    """`model/` and everything in it belong to the gateway's uid: dirs 0755, files 0644 (the workers read
    usage, ledger and recordings; only the gateway writes). A resumed run's earlier files included."""
    model = run.model_dir
    model.mkdir(exist_ok=True)
    for path in [model, *model.rglob("*")]:
        if path.is_symlink():  # never follow a link someone planted: drop it
            path.unlink()
            continue
        os.chown(path, 0, 0)  # root's for a moment: changing another uid's mode would need FOWNER
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chown(path, gw_uid, gw_uid)


def run_folder(name: str, uid: int, gid: int) -> RunFolder:
    """The run's folder with its logs/, made for the run's uid if missing (compose's first start: the
    controller makes the rest, RunFolder.create)."""
    run = RunFolder(Path(run_mount(name)))
    for folder in (run.root, run.logs_dir):
        if not folder.exists():
            folder.mkdir(mode=0o755)
            os.chown(folder, uid, gid)
    return run


def start_run_gateway(boot: InitBoot, uid: int, gid: int, gw_uid: int) -> str:
    """Start the run's gateway as `gw_uid`, save its handle for the run's uid; its url."""
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
        control_key=SecretStr(secrets.token_hex(24)),
        offline=boot.offline,
    )
    prefix = [*drop_argv(gw_uid, gw_uid), "env", f"HOME={home}"]
    try:
        handle = start_gateway(gateway_boot, home / "handle.json", log, argv_prefix=prefix)
    except OrchError as exc:
        raise InitError(exc.one_line()) from None
    target = handle_path(boot.run)
    save_handle(target, handle)
    os.chown(target, uid, gid)
    return handle.url


def _own(path: Path, uid: int, gid: int, mode: int) -> None:
    """Give one path (never followed if it is a link: a planted link is removed) to uid:gid with `mode`."""
    if path.is_symlink():
        path.unlink()
        return
    os.chown(path, 0, 0)  # root's for a moment: changing another uid's mode would need FOWNER
    os.chmod(path, mode)
    os.chown(path, uid, gid)


def _own_tree(root: Path, uid: int, gid: int, mode: int) -> None:
    """`root` (a folder) and everything under it to uid:gid; files keep their own mode."""
    root.mkdir(parents=True, exist_ok=True)
    for path in [*root.rglob("*")]:
        if path.is_symlink():
            os.chown(path, uid, gid, follow_symlinks=False)
        else:
            os.chown(path, uid, gid)
    _own(root, uid, gid, mode)


def isolate_workers(run: RunFolder, info: RunInfo, uid: int, gid: int) -> None:
    """Strict isolation, while the init still may: each worker's own files become its uid's, and nothing
    else of the run is writable by any worker.

    - `outbox/agent-N/`: worker N's, group the run's gid and group-writable, so the controller can clear a
      finished job's files; other workers only read it. Its hook log `state/agent-N.jsonl` and its agent
      session store `sessions/agent-N` (resume) are its own too.
    - its config dir (on the tmpfs home: it holds the worker's gateway token): created empty, 0710 with the
      run's gid, so no other worker may enter it and the controller may only look up a name in it (an
      adapter's ready marker: Codex, opencode and aider touch one there once their TUI takes input); the
      worker seeds it itself when its pane starts (orch.fleet.become).
    - `worktrees/agent-N/`: worker N's, group the run's gid, 2770: each writer job's worktree goes there as
      worker N's own files, and no other worker may enter it.
    - the home and the folders above the config dirs: the run's uid's, 0711 (passable, not listable).
    """
    home = Path(os.environ.get("HOME", "/home/worker"))
    for folder in (home, *reversed(run.config_root.parents), run.config_root):
        if folder == home or home in folder.parents:
            folder.mkdir(exist_ok=True)
            _own(folder, uid, gid, 0o711)
    for n in range(1, info.workers + 1):
        w = worker_uid(n)
        _own_tree(run.outbox(n), w, gid, 0o2775)
        if run.state(n).is_symlink():
            run.state(n).unlink()
        run.state(n).touch()
        _own(run.state(n), w, w, 0o644)
        _own_tree(run.sessions(n), w, w, 0o700)
        _own_tree(run.config_dir(n), w, gid, 0o710)
        # Its writer jobs' worktrees, each checked out as worker N's own (RunRepo.checkout owner=).
        _own_tree(run.worktrees_dir(n), w, gid, 0o2770)


def create_compose_run(name: str, uid: int, gid: int) -> None:
    """compose's `serve-run NAME --create` on its first start: the run folder made here, from the same
    settings serve-run reads, as `orch up` makes it on the host, strict where the agent can be (orch run's
    default in a container), so that each worker gets its own files before the run's uid takes over.
    Everything made is the run's uid's; the gateway's `model/` stays its own."""
    run = RunFolder(Path(run_mount(name)))
    if run.exists():
        return
    _, info = launch.plan(compose_request(name, strict=True))
    before = set(run.root.rglob("*")) if run.root.is_dir() else set()
    run.create(info)
    for path in (run.root, *run.root.rglob("*")):
        if path not in before and path != run.model_dir and run.model_dir not in path.parents:
            os.chown(path, uid, gid, follow_symlinks=False)


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
        credentials = get_adapter(settings.AGENT.get()).credentials
    except OrchError as exc:
        raise InitError(f"{settings.AGENT.name}: {exc.one_line()}") from None
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


def _dns_log(boot: InitBoot | None, uid: int, gid: int) -> Path:
    """Where the DNS responder notes the names it refused: the run folder's logs when the run is known."""
    if boot is None:
        return Path("/tmp/orch-dns.log")
    return run_folder(boot.run, uid, gid).logs_dir / "dns.log"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m orch.container.init -- CMD [ARG...]", file=sys.stderr)
        return 2
    try:
        uid, gid, egress = settings.UID.get(), settings.GID.get(), settings.EGRESS.get()
        offline, extra, chown = settings.OFFLINE.get(), settings.ALLOW.get(), settings.CHOWN.get()
        decided = settings.EGRESS_ALLOW.get() if settings.EGRESS_ALLOW.is_set() else None
        boot_stdin = settings.BOOT_STDIN.get()
    except OrchError as exc:
        print(f"orch-init: {exc.one_line()}", file=sys.stderr)
        return 2
    uid, gid = _id(uid, settings.UID.name), _id(gid, settings.GID.name)
    boot: InitBoot | None
    try:
        if boot_stdin:
            boot = read_boot()
        else:
            given = [var for var in sorted(_credential_variables()) if os.environ.get(var)]
            if given:  # `docker exec` gives the container's environment to its processes too
                print(
                    f"orch-init: warning: {', '.join(given)} came by the container's environment, which every "
                    f"`docker exec` process gets too; put it in {settings.CREDENTIALS.name} (a file) instead",
                    file=sys.stderr,
                    flush=True,
                )
            boot = env_boot({**os.environ, **read_secrets(Path(SECRETS_FILE), uid)})
    except InitError as exc:
        print(f"orch-init: {exc}", file=sys.stderr, flush=True)
        return 2
    _clear_credentials()
    try:
        compose_run = validate_name(settings.RUN.get()) if not boot_stdin and settings.RUN.is_set() else None
    except OrchError as exc:
        print(f"orch-init: {settings.RUN.name}: {exc.one_line()}", file=sys.stderr)
        return 2
    if boot_stdin:
        print(ACK_LINE, flush=True)
        _detach_stdin()
    try:
        mode = EgressMode(egress)
    except ValueError:
        print(f"orch-init: unknown {settings.EGRESS.name} {egress!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        if mode is not EgressMode.OPEN or boot is not None:
            print("orch-init: must start as root to apply the egress policy and start the gateway", file=sys.stderr)
            return 2
        os.execvp(argv[0], argv)
    try:
        gw_uid = gateway_uid(uid) if boot is not None else None
        # `orch up` decided the workers' list; the model API is the gateway's alone when it is ours.
        allow = decided if decided is not None else _allowlist(offline, extra, model_api=boot is None)
    except InitError as exc:
        print(f"orch-init: {exc}", file=sys.stderr)
        return 2
    gateway = _gateway_egress(boot, gw_uid, uid, gid) if gw_uid is not None else None
    try:
        dns_log = _dns_log(boot, uid, gid)
        report = apply(mode, allow, gateway=gateway if mode is not EgressMode.OPEN else None, dns_log=dns_log)
    except EgressError as exc:
        print(f"orch-init: egress policy failed: {exc}", file=sys.stderr)
        return 1
    write_report(report)
    only = f"; gateway only {sorted(report.gateway)}" if report.gateway else ""
    print(
        f"orch-init: egress {report.mode}: allowed {sorted(report.allowed)}{only}; skipped {report.skipped}; "
        f"self-test {report.selftest}; dns {report.dns_selftest or 'open'}",
        flush=True,
    )
    for path in chown:
        if os.stat(path).st_uid == 0:  # a fresh volume; a user's own folder keeps its owner
            os.chown(path, uid, gid)
    _copy_credentials(uid, gid)
    if boot is not None and gw_uid is not None:
        try:
            url = start_run_gateway(boot, uid, gid, gw_uid)
        except (InitError, OSError) as exc:
            print(f"orch-init: the model gateway did not start: {exc}", file=sys.stderr)
            return 1
        print(f"orch-init: model gateway at {url} as uid {gw_uid}", flush=True)
    name = boot.run if boot is not None else compose_run
    if compose_run is not None and "serve-run" in argv and "--create" in argv:
        try:
            create_compose_run(compose_run, uid, gid)
        except OrchError as exc:
            print(f"orch-init: {exc.one_line()}", file=sys.stderr)
            return 2
    try:
        strict = _strict_run(name)
        if strict is not None:
            isolate_workers(*strict, uid, gid)
    except (OrchError, OSError) as exc:
        print(f"orch-init: cannot isolate the workers: {exc}", file=sys.stderr)
        return 1
    # Under strict isolation the run's processes keep SETUID and SETGID (ambient, nothing else), so that
    # its tmux server can start each pane as its worker's uid; every pane then drops them for good.
    setpriv = [*drop_argv(uid, gid, SWITCH_CAPS if strict else ()), *argv]
    os.execvp(setpriv[0], setpriv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
