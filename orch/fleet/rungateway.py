"""The run's model gateway as the fleet sees it: found (the container's init started it) or started here,
a run-scoped token per worker life (bound to the worker's agent, so it reaches only that agent's
upstream), the worker's environment pointing at it, and stopped at teardown.

No worker ever gets the user's credentials: they stay in the gateway (orch.gateway), one upstream per
model API of the fleet, given on its stdin. The one exception is a login file the gateway cannot refresh
(orch.gateway.credential; a fleet of one model API only): the run then says `credential: passthrough` and
each worker keeps a copy of the agent's own login.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import SecretStr

from orch.agents.registry import ADAPTERS, get_adapter
from orch.contracts import AgentAdapter
from orch.errors import OrchError, SandboxError, UsageError
from orch.gateway.credential import FleetUpstreams, fleet_upstreams
from orch.gateway.modeldir import GatewayBoot, Scheme
from orch.gateway.process import (
    GatewayClient,
    GatewayHandle,
    gateway_alive,
    handle_path,
    load_handle,
    save_handle,
    start_gateway,
    stop_gateway,
)
from orch.run.events import Event
from orch.run.folder import RunFolder
from orch.run.records import ControllerEvent, RunInfo
from orch.settings.compose import CREDENTIALS
from orch.settings.internal import GATEWAY_CREDENTIAL, GATEWAY_HOLDS
from orch.waits import wait_until

log = logging.getLogger(__name__)
RESTART_TIMEOUT = 60.0
"""How long a gateway whose process lives may take to answer again (a keeper's new supervisor rebinds its
old address: up to 15 s while the dying server child lets go, then starts its scripted model and server)."""


def _saved(info: RunInfo) -> GatewayHandle | None:
    try:
        return load_handle(handle_path(info.name))
    except OrchError:  # none yet, or a half-written handle of one that died starting
        return None


def running(info: RunInfo) -> GatewayHandle | None:
    """The run's gateway on this machine, if one answers."""
    handle = _saved(info)
    return handle if handle is not None and GatewayClient(handle).health() else None


def lost(info: RunInfo) -> GatewayHandle | None:
    """The handle of the run's gateway whose supervisor died (SIGKILL, OOM) without a clean stop: `ensure`
    starts another that resumes its address and worker tokens. None while it runs, or with none at all."""
    handle = _saved(info)
    return handle if handle is not None and not gateway_alive(handle) else None


def gone_for_good(info: RunInfo) -> str | None:
    """In a container: why the run's gateway can never answer again (its keeper, whose pid the handle holds,
    is gone and nothing of the gateway answers: the OOM killer took both), else None. Nothing else may start
    it again as the gateway's uid with its credentials (orch.container.gatewaykeeper). A keeper alone gone
    leaves a gateway that still answers: the run carries on (unkept) until it stops answering too."""
    handle = lost(info)
    if handle is None or GatewayClient(handle).health():
        return None
    return (
        f"the model gateway and its keeper (pid {handle.pid}) died (the OOM killer?): nothing in the run's "
        "container may start the gateway again as its uid"
    )


def _coming_back(run: RunFolder, info: RunInfo) -> GatewayHandle | None:
    """The run's gateway that does not answer while its handle's process lives: its supervisor is starting
    a server child again, or (in a container) the gateway's keeper is starting the gateway again as the
    gateway's uid (orch.container.gatewaykeeper). Waited for, never replaced by a second one; None when
    nothing of it lives. A gateway of another uid that is gone for good cannot be started here: this uid
    may not write its `model/` (SandboxError, saying so)."""
    handle = _saved(info)
    if handle is None:
        return None
    if gateway_alive(handle):
        what = f"the run's model gateway (pid {handle.pid}) to answer again"
        wait_until(lambda: GatewayClient(handle).health(), RESTART_TIMEOUT, what, interval=0.2)
        return handle
    model = run.model_dir
    if not _ours(run):
        raise SandboxError(
            f"run {info.name}: its model gateway (uid {model.stat().st_uid}, kept by the container's init) is "
            "gone, and this uid may not start it as that uid",
            hint="the run cannot reach its model any more: stop it (`orch kill`) and resume it",
        )
    return None


def _ours(run: RunFolder) -> bool:
    """Whether this uid may start the run's gateway: its `model/` is this uid's (or not made yet), not the
    gateway's uid of a container (orch.container.gatewaykeeper)."""
    model = run.model_dir
    return not model.is_dir() or model.stat().st_uid == os.geteuid()


def upstreams(info: RunInfo) -> FleetUpstreams:
    """The run's upstreams, one per model API of its fleet, from this process's environment. A fleet across
    model APIs with a credential missing raises UsageError naming it: call it before creating anything."""
    return fleet_credentials(info.agents(), info.offline or info.replay is not None)


def fleet_credentials(agents: Sequence[str], offline: bool) -> FleetUpstreams:
    """The upstreams a fleet of these agent kinds would get from this process's environment (UsageError
    when a live fleet across model APIs lacks a credential of one). In a container whose init started the
    gateway with the credentials (compose: this environment holds none), the init's word on which agent
    kinds they serve is checked instead: a live fleet with an agent it holds nothing for is refused."""
    kinds = {agent: get_adapter(agent).facts.credentials for agent in agents}
    held = GATEWAY_HOLDS.get()
    if held and not offline:
        missing = [kind for kind, credentials in kinds.items() if credentials.env and kind not in held]
        if missing:
            names = "; ".join(f"{kind}: {' or '.join(kinds[kind].env)}" for kind in dict.fromkeys(missing))
            raise UsageError(
                f"no credential for {names} in the container's gateway (it holds one for {', '.join(held)})",
                hint=f"add it to the file {CREDENTIALS.name} names",
            )
        return fleet_upstreams(kinds, os.environ, offline, strict=False)
    return fleet_upstreams(kinds, os.environ, offline)


def ensure(run: RunFolder, info: RunInfo) -> GatewayHandle:
    """The run's running gateway, else a new one (its upstreams chosen from this process's environment).
    A new one after a supervisor that died takes back its address and the workers' live tokens (kept in
    the gateway's private state beside its handle), so running workers carry on; one whose supervisor is gone
    is replaced so even while its server child still answers. Sets `info.credential` (saved with run.json by
    the caller)."""
    dead = lost(info)
    # A supervisor gone is a gateway gone, even while its server child still answers: that orphan got SIGTERM
    # with its supervisor (PR_SET_PDEATHSIG) and is closing; a new supervisor takes its address over as soon as
    # it lets go. Trusting its last answers would hand the caller a gateway about to vanish (the controller's
    # budget and jobs told to nobody, and no gateway started until a later look). Only a gateway this uid may
    # start again (not a container's, kept by its init) is replaced so.
    replace = dead is not None and _ours(run)
    handle = None if replace else running(info) or _coming_back(run, info)
    if handle is not None:
        _check_offline(handle, info)
        # One the container's init started: its upstreams' schemes, as the init told (none told: as it was).
        info.credential = GATEWAY_CREDENTIAL.get() or info.credential
        return handle
    choice = upstreams(info)
    if choice.warning:
        log.warning("run %s: %s", info.name, choice.warning)
        run.log_event(ControllerEvent(event=Event.CREDENTIAL_FALLBACK, data={"warning": choice.warning}))
    boot = GatewayBoot(
        run=info.name,
        run_dir=str(run.root),
        workdir=info.workdir,
        upstreams=[] if info.replay else list(choice.upstreams),
        replay=info.replay,
        control_key=SecretStr(secrets.token_hex(24)),
        offline=info.offline or info.replay is not None,
    )
    info.credential = Scheme.NONE.value if info.replay else choice.schemes
    run.logs_dir.mkdir(parents=True, exist_ok=True)
    # Its own environment holds no credential (its upstreams come in its boot line): a process of the same
    # uid reading /proc/PID/environ finds none there.
    log_file = run.logs_dir / "gateway.log"
    handle = start_gateway(boot, handle_path(info.name), log_file, env=without_credentials(os.environ))
    save_handle(handle_path(info.name), handle)
    data: dict[str, object] = {"url": handle.url, "pid": handle.pid, "credential": info.credential}
    if len(boot.upstreams) > 1:
        data["upstreams"] = {u.name: u.scheme.value for u in boot.upstreams}  # names and schemes, no secret
    if dead is not None:
        data["replaces"] = dead.pid  # the supervisor that died; same url: its workers' tokens live on
    run.log_event(ControllerEvent(event=Event.GATEWAY_STARTED, data=data))
    return handle


def without_credentials(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without any agent's credential variables (every registered agent's, not only the run's kinds:
    a worker may run any CLI it finds)."""
    drop = {var for agent in ADAPTERS for var in get_adapter(agent).facts.credentials.variables}
    return {key: value for key, value in env.items() if key not in drop}


def _check_offline(handle: GatewayHandle, info: RunInfo) -> None:
    """A gateway someone else started (the container's init, from compose's settings) must serve what the
    run expects: the scripted model for an offline run, a model API for a live one. One that stops answering
    between `running`'s health check and this one (a supervisor SIGKILLed, its server child going with it)
    is not refused here: the controller's next look finds it lost and starts another (recovery.keep_gateway)."""
    try:
        served = GatewayClient(handle).info().get("offline")
    except OrchError:
        return
    wanted = info.offline or info.replay is not None
    if served is not None and bool(served) != wanted:
        have, want = ("the scripted model", "a live") if served else ("a model API", "an offline")
        raise UsageError(
            f"run {info.name}: the container's gateway serves {have}, but this is {want} run",
            hint="set ORCH_OFFLINE to match the spec's `offline:` (compose.yaml)",
        )


def worker_env(handle: GatewayHandle, adapter: AgentAdapter, n: int) -> dict[str, str]:
    """Worker n's own variables: its base URL carries a fresh token (revoking the one of its last life)."""
    if adapter.facts.gateway is None:
        return {}
    token = GatewayClient(handle).mint_token(n, adapter.facts.name)
    return {adapter.facts.gateway.base_url_env: f"{handle.url}/t/{token}", adapter.facts.gateway.key_env: token}


def login_file(info: RunInfo, adapter: AgentAdapter) -> Path | None:
    """The login file workers get when the gateway passes their own login through (else None)."""
    if info.credential != Scheme.PASSTHROUGH.value:
        return None
    found = adapter.facts.credentials.login_file(os.environ)
    if found is None:
        raise SandboxError("the run passes the agent's login through, but its login file is gone")
    return found


def stop(name: str) -> None:
    try:
        stop_gateway(handle_path(name))
    except PermissionError:  # in a container the gateway is another uid's: it goes with the container
        log.info("run %s: the gateway belongs to another user; it stops with the container", name)
