"""A run's container: how it is created (hardened, its environment, mounts and credentials), waited
for until its workers run, and looked up and described on its engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import Mount
from docker.utils.socket import frames_iter

from orch.agents.registry import get_adapter
from orch.backends.docker.engine import engine_address, explain
from orch.backends.docker.mounts import mounts
from orch.container.bootline import ACK_LINE, CREDENTIALS_MOUNT, InitBoot
from orch.container.layout import (
    AGENTS_DIR,
    HOME,
    LABEL_MANAGED,
    PYTHON,
    ROLE_CONTAINER,
    TINI,
    WORKDIR,
    labels,
    run_mount,
    uid_gid,
)
from orch.container.serverun import READY_LINE
from orch.errors import OrchError, SandboxError, UsageError, WaitTimeoutError
from orch.fleet.caps import container_pids
from orch.gateway.credential import FleetUpstreams, fleet_upstreams
from orch.gateway.modeldir import Scheme
from orch.run.folder import RunFolder
from orch.run.records import ContainerOptions, DockerRunInfo, EgressMode, Isolation, RunStatus
from orch.run.uids import range_base
from orch.settings import compose, internal, user
from orch.waits import wait_until

log = logging.getLogger(__name__)

# What the init step needs before it drops them all: the firewall (NET_*), becoming the run's uid
# (SETUID/SETGID), emptying the bounding set (SETPCAP), handing mount points and the credentials copy
# to that uid (CHOWN, DAC_OVERRIDE: the tmpfs home is the uid's, mode 0700).
INIT_CAPS = ["SETUID", "SETGID", "SETPCAP", "CHOWN", "DAC_OVERRIDE"]
FIREWALL_CAPS = ["NET_ADMIN", "NET_RAW"]
TMPFS_OPTS = "rw,exec,nosuid,nodev"
TMPFS_SIZE = "2g"
START_MARGIN = 60.0  # seconds on top of the boot timeout: container start, firewall, model server
ACK_TIMEOUT = 60.0  # seconds for the init to take the boot line (python start-up on a slow engine)


def upstream(info: DockerRunInfo) -> FleetUpstreams:
    """The run's model upstreams and credentials (one per model API of the fleet), from this (the host's)
    environment; checked before anything is created. A login file passed through can only be mounted from
    this machine."""
    credentials = get_adapter(info.agent).facts.credentials
    offline = info.offline or info.replay is not None  # a replay's gateway calls no model API
    choice = fleet_upstreams({k: get_adapter(k).facts.credentials for k in info.agents()}, os.environ, offline)
    if choice.login_file is not None and info.container.on_remote_engine:
        raise UsageError(
            f"the only credential is the login file {choice.login_file}, which cannot reach a remote engine",
            hint=f"set one of {', '.join(credentials.env)} (the gateway in the container then holds it)",
        )
    gateway_uid = user.GATEWAY_UID.get()
    run_uid, _ = uid_gid(info.container)
    if gateway_uid <= 0 or gateway_uid == run_uid:
        raise UsageError(
            f"{user.GATEWAY_UID.name}={gateway_uid}: the gateway needs a uid of its own (not root, not the "
            f"run's {run_uid})",
            hint=f"set {user.GATEWAY_UID.name} to an unused uid",
        )
    if choice.warning:
        log.warning("run %s: %s", info.name, choice.warning)
    info.credential = choice.schemes
    return choice


def run_env(uid: int, gid: int, opts: ContainerOptions) -> dict[str, str]:
    """The environment a run's container starts with, here and as a swarm task (orch.backends.swarm.spec):
    never a credential (`docker inspect` shows it)."""
    return {
        user.HOME.name: "/orch",
        internal.IN_CONTAINER.name: "1",
        internal.AGENTS_DIR.name: AGENTS_DIR,
        "HOME": HOME,
        "USER": "worker",
        "LOGNAME": "worker",
        "SHELL": "/bin/bash",
        "TMUX_TMPDIR": "/tmp",
        compose.UID.name: str(uid),
        internal.GID.name: str(gid),
        compose.EGRESS.name: opts.egress.value,
        internal.EGRESS_ALLOW.name: ",".join(opts.allow),
        user.GATEWAY_UID.name: str(user.GATEWAY_UID.get()),
        user.WORKER_UID_BASE.name: str(opts.uid_base()),
    }


def worker_uid_base(client: docker.DockerClient, name: str, taken: set[int], run_uid: int | None = None) -> int:
    """A new run's ORCH_WORKER_UID_BASE: the user's if set, else a range of its own (orch.run.uids.range_base)
    that none of `taken` (the engine's other runs') overlaps. An engine in a user namespace (rootless, or
    userns-remap) maps only uids below 65536: there a smaller range below it, holding neither the run's uid
    (`run_uid`) nor the gateway's."""
    if os.environ.get(user.WORKER_UID_BASE.name):
        return user.WORKER_UID_BASE.get()
    try:
        security = client.info().get("SecurityOptions") or []
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot ask the Docker engine about itself: {explain(exc)}") from exc
    if any("name=rootless" in option or "name=userns" in option for option in security):
        reserved = {user.GATEWAY_UID.get(), *([] if run_uid is None else [run_uid])}
        return range_base(name, taken, mapped=True, reserved=reserved)
    return range_base(name, taken)


CLAIM_ATTEMPTS = 8
"""How many ranges a new run's container tries before giving up (each lost to another run made at that instant)."""


def create_on_a_range(client: docker.DockerClient, info: DockerRunInfo, create: Callable[[], Container]) -> Container:
    """`create()` the run's container with a uid range of its own (`worker_uid_base` in its options), claimed through
    the engine, which every `orch up` asks: once created, the engine's orch containers are listed again, and one on
    the same range created before it (at the same instant: the one whose name sorts first) keeps the range; this
    one is removed and made again on another. So two `orch up`s at once whose names hash to one range, from any
    user or machine, end on two. A base the user set (ORCH_WORKER_UID_BASE) is taken as it is."""
    lost: set[int] = set()
    ci = info.container
    for _ in range(CLAIM_ATTEMPTS):
        base = worker_uid_base(client, info.name, taken_uid_bases(client) | lost, uid_gid(ci)[0])
        ci.options = ci.options.model_copy(update={"worker_uid_base": base})
        container = create()
        if os.environ.get(user.WORKER_UID_BASE.name) or not _claimed_first(client, container, base):
            return container
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
        lost.add(base)
    raise SandboxError(f"run {info.name!r}: no worker uid range could be claimed ({CLAIM_ATTEMPTS} tried)")


def _claimed_first(client: docker.DockerClient, container: Container, base: int) -> bool:
    """True when another orch container on the engine has `base` and was created before `container`."""
    try:
        container.reload()
        rivals = client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"}, ignore_removed=True)
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot list the Docker engine's containers: {explain(exc)}") from exc
    mine = _created(container)
    return any(
        other.id != container.id
        and env_uid_base(other.attrs.get("Config", {}).get("Env")) == base
        and _created(other) < mine
        for other in rivals
    )


def _created(container: Container) -> tuple[str, str, str]:
    """When the engine created a container, as a key that sorts (its RFC 3339 time, the fraction padded: Go trims
    its trailing zeros), then its name."""
    stamp = str(container.attrs.get("Created", ""))
    head, _, rest = stamp.partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())
    return head.rstrip("Z"), fraction.ljust(9, "0"), str(container.name)


def env_uid_base(env: list[str] | None) -> int | None:
    """The ORCH_WORKER_UID_BASE in a container's `KEY=value` environment, if any."""
    prefix = f"{user.WORKER_UID_BASE.name}="
    found = [item.removeprefix(prefix) for item in env or [] if item.startswith(prefix)]
    return int(found[-1]) if found and found[-1].isdigit() else None


def taken_uid_bases(client: docker.DockerClient) -> set[int]:
    """The uid bases of every orch container on the engine, of any run and in any state (a stopped one's run
    may be resumed); one without the variable (a run from before ranges) has the default's."""
    try:
        found = client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"}, ignore_removed=True)
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot list the Docker engine's containers: {explain(exc)}") from exc
    bases = {env_uid_base(c.attrs.get("Config", {}).get("Env")) for c in found}
    return {user.WORKER_UID_BASE.get() if base is None else base for base in bases}


def create(
    client: docker.DockerClient,
    info: DockerRunInfo,
    prompts: dict[int, str],
    resume: bool,
    boot_timeout: float,
    choice: FleetUpstreams,
) -> Container:
    """Create (not start) the run's container; its first process reads the boot line (`start`), applies
    the egress policy, starts the gateway, then runs `orch serve-run` as the run's uid.

    No credential is in what this creates (environment, command, labels): it goes in by `start`."""
    ci = info.container
    opts = ci.options
    uid, gid = uid_gid(ci)
    run_mounts = mounts(info)
    env = run_env(uid, gid, opts) | {internal.BOOT_STDIN.name: "1"}
    if ci.on_remote_engine:  # fresh volumes are root's: the init hands them over (a read-only tree stays root's)
        owned = [run_mount(info.name)] + ([] if info.isolation is Isolation.STRICT else [WORKDIR])
        env[internal.CHOWN.name] = ":".join(owned)
    if prompts:
        env[internal.PROMPTS.name] = json.dumps({str(n): text for n, text in prompts.items()})
    login = get_adapter(info.agent).facts.credentials.login
    if choice.scheme is Scheme.PASSTHROUGH and choice.login_file is not None and login is not None:
        # The one case a worker holds a credential: the agent's own login, which only it can refresh.
        run_mounts.append(Mount(target=CREDENTIALS_MOUNT, source=str(choice.login_file), type="bind", read_only=True))
        env[internal.CREDENTIALS_HOME_PATH.name] = login.in_home
    caps = INIT_CAPS + (FIREWALL_CAPS if opts.egress is not EgressMode.OPEN else [])
    command = [TINI, "--", "orch", "serve-run", info.name, "--boot-timeout", f"{boot_timeout:g}"]
    if resume:
        command.append("--resume")
    try:
        return client.containers.create(
            ci.image,
            command=command,
            entrypoint=[PYTHON, "-m", "orch.container.init", "--"],
            name=ci.name,
            hostname=ci.name[:63],
            user="0:0",  # only for the init step; it drops to ORCH_UID:ORCH_GID before the run starts
            labels=labels(info.name, ROLE_CONTAINER),
            environment=env,
            mounts=run_mounts,
            tmpfs={
                "/tmp": f"{TMPFS_OPTS},size={TMPFS_SIZE},mode=1777",
                HOME: f"{TMPFS_OPTS},size={TMPFS_SIZE},uid={uid},gid={gid},mode=0700",
            },
            read_only=True,
            cap_drop=["ALL"],
            cap_add=caps,
            security_opt=["no-new-privileges:true"],
            pids_limit=container_pids(info.caps, info.workers, opts.pids),
            mem_limit=opts.memory,
            memswap_limit=opts.memory,
            nano_cpus=int(opts.cpus * 1e9),
            network=opts.network,
            working_dir=WORKDIR,
            # stdin for the boot line only (`start`); detach=False is docker-py's way to set StdinOnce, so
            # the engine closes it when the host detaches (the init has put /dev/null there by then).
            stdin_open=True,
            detach=False,
        )
    except docker.errors.ImageNotFound:
        check_image(client, ci.image)
        raise
    except docker.errors.APIError as exc:
        raise UsageError(f"the Docker engine refused the run's container: {explain(exc)}") from exc


def start(client: docker.DockerClient, container: Container, info: DockerRunInfo, choice: FleetUpstreams) -> None:
    """Start the container and hand its init the boot line (the upstreams, secrets included) on stdin:
    attached before the start, written once, then detached when the init says it has it (stdin then closes)."""
    line = boot_line(init_boot(info, choice))
    params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    try:
        sock = client.api.attach_socket(str(container.id), params=params)
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot attach to the run's container: {explain(exc)}") from exc
    raw = getattr(sock, "_sock", sock)
    try:
        container.start()
        raw.sendall(line.encode() + b"\n")
        _wait_ack(sock, raw, container, info.name)
    finally:
        with contextlib.suppress(OSError):
            sock.close()
        proc = getattr(raw, "proc", None)  # docker's ssh transport: the dial-stdio ssh process
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()


def init_boot(info: DockerRunInfo, choice: FleetUpstreams) -> InitBoot:
    """What the init is told: the run's upstreams, or for a replay none at all (every answer comes from the
    run folder's copy of the recording, so no credential goes in)."""
    if info.replay is not None:
        return InitBoot(run=info.name, offline=True, upstreams=[], replay=info.replay)
    return InitBoot(run=info.name, offline=info.offline, upstreams=list(choice.upstreams))


def boot_line(boot: InitBoot) -> str:
    """The boot line with the secrets' real values (pydantic dumps a SecretStr masked)."""
    data = boot.model_dump(mode="json")
    for dumped, upstream in zip(data["upstreams"], boot.upstreams, strict=True):
        dumped["secret"] = upstream.secret.get_secret_value()
    return json.dumps(data)


def _wait_ack(sock: object, raw: socket.socket, container: Container, name: str) -> None:
    """Read the container's output until the init's ACK_LINE, within ACK_TIMEOUT."""
    deadline = time.monotonic() + ACK_TIMEOUT
    seen = b""
    with contextlib.suppress(OSError, AttributeError):
        raw.settimeout(ACK_TIMEOUT)
    try:
        for _stream, chunk in frames_iter(sock, tty=False):  # type: ignore[no-untyped-call]
            seen += chunk
            if ACK_LINE.encode() in seen:
                return
            if time.monotonic() > deadline:
                break
    except (OSError, requests.exceptions.RequestException):
        pass
    container.reload()
    if container.status in ("exited", "dead"):
        raise SandboxError(_died_message(container, name))
    raise SandboxError(f"run {name}: the container's init did not take its boot line within {ACK_TIMEOUT:g}s")


def wait_running(container: Container, run: RunFolder, info: DockerRunInfo, boot_timeout: float) -> None:
    """Until run.json says running (local: inotify on the mounted folder) or the container dies."""
    remote = info.container.on_remote_engine

    def started() -> bool:
        container.reload()
        if container.status in ("exited", "dead"):
            raise SandboxError(_died_message(container, info.name))
        if remote:
            return READY_LINE in container.logs(stdout=True, stderr=False).decode(errors="replace")
        try:
            return run.info().status is RunStatus.RUNNING
        except OrchError:
            return False

    timeout = boot_timeout + START_MARGIN
    try:
        wait_until(
            started,
            timeout,
            "the run's container to start its workers",
            interval=0.5,
            watch=None if remote else run.root,
        )
    except WaitTimeoutError:
        raise WaitTimeoutError(
            f"run {info.name}: workers not running within {timeout:g}s; container log: {_log_tail(container)}",
            hint=f"raise --boot-timeout, or look at the transcripts in {run.logs_dir}",
        ) from None


def check_image(client: docker.DockerClient, image: str, address: str | None = None) -> None:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(
            f"image {image} is not on the Docker engine at {address or engine_address()}",
            hint="build it with `orch image build` (add --base-image IMAGE where no registry is reachable)",
        ) from None
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot inspect image {image}: {explain(exc)}") from exc


def run_container(client: docker.DockerClient, info: DockerRunInfo) -> Container | None:
    """The container run.json names (by id, else by name), None when it is gone."""
    try:
        return client.containers.get(info.container.id or info.container.name)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot inspect container {info.container.name}: {explain(exc)}") from exc


def find(client: docker.DockerClient, name: str) -> Container | None:
    """The container of that name, whoever made it."""
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None


def describe(container: Container | None) -> str:
    """A container's state in a few words (the container as just fetched: no reload)."""
    if container is None:
        return "removed"
    if container.status == "running":
        return "running"
    code = container.attrs.get("State", {}).get("ExitCode")
    return f"{container.status} ({code})" if code is not None else str(container.status)


def _log_tail(container: Container, lines: int = 5) -> str:
    try:
        text = container.logs(stdout=True, stderr=True, tail=lines).decode(errors="replace")
    except docker.errors.DockerException:
        return "(no log)"
    return " | ".join(line.strip() for line in text.splitlines() if line.strip()) or "(empty)"


def _died_message(container: Container, name: str) -> str:
    code = container.attrs.get("State", {}).get("ExitCode")
    return f"run {name}: the container exited (code {code}) while starting: {_log_tail(container)}"
