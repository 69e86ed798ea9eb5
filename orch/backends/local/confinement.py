"""The confinements of strict isolation (orch.fleet.confinement): each worker in a bubblewrap sandbox of its own on
a host (`Bubblewrap`), or a uid of its own in a run's container (`OwnUid`); and `choose`, which one a run whose
tmux server is on this machine gets (its backend's answer: orch.backends.base.Backend.confinement).

Both run the relay of the workers' sockets beside the fleet when their workers need it (orch.backends.local.relay):
a sandboxed worker's bus, gateway and pane; a worker of its own uid's pane, when its agent types into it."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orch import prereqs, procs
from orch.agents.registry import get_adapter
from orch.backends.base import in_container
from orch.backends.local import bwrap, egressproxy, relay
from orch.backends.local import portal as portal_module
from orch.contracts import AgentAdapter, LaunchSpec, WorkerContext
from orch.errors import SandboxError, UsageError
from orch.fleet import caps
from orch.fleet.become import MODULE_ARGV, OPEN_BUNDLE, LaunchBundle
from orch.fleet.confinement import Attribution, Confinement, Owner, Shared, kill_pids
from orch.fleet.stopping import remove_contents
from orch.fleet.supervisor import supervised, supervisor_under
from orch.fleet.tmux import TmuxServer
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.run.paths import launch_dir
from orch.run.records import Isolation, RunInfo
from orch.run.uids import drop_argv, worker_of, worker_uid
from orch.settings.internal import SANDBOXED


def choose(info: RunInfo) -> Confinement:
    """How a run whose tmux server is on this machine confines its workers: shared isolation shares one uid;
    strict, a bubblewrap sandbox each on a host, a uid each in a run's container (bubblewrap cannot make its
    namespaces there, and its processes may switch uid). In a container even a shared worker is boxed in it."""
    inside = in_container()
    if info.isolation is not Isolation.STRICT:
        return Shared(boxed=inside)
    return OwnUid() if inside else Bubblewrap()


class Relayed:
    """What both kinds share: the relay of the workers' sockets, when they need it, beside the fleet."""

    through_relay = False
    """Whether the workers reach the gateway through the relay (a sandbox has no network)."""

    def needs_relay(self, info: RunInfo) -> bool:
        raise NotImplementedError

    def ensure_relay(self, run: RunFolder, info: RunInfo, gateway_url: str) -> bool:
        if not self.needs_relay(info):
            return False
        was = relay.running(run)
        relay.ensure(run, info.workers, gateway_url if self.through_relay else None)
        return not was

    def relay_running(self, run: RunFolder) -> bool:
        return relay.running(run)

    def stop(self, run: RunFolder) -> None:
        relay.stop(run)


def _no_login_file(ctx: WorkerContext, adapter: AgentAdapter, hint: str) -> None:
    if ctx.login_file is not None:
        raise UsageError("strict isolation cannot hand workers the agent's own login file", hint=hint)


@dataclass(frozen=True)
class Bubblewrap(Relayed):
    """Each worker's pane in a bubblewrap sandbox of its own (orch.backends.local.bwrap), all of the user's uid:
    its own pid namespace, no network but its sockets to the relay, the run folder read-only but its own files."""

    name: str = "bubblewrap"
    own_uids: bool = False
    boxed: bool = True
    through_relay = True

    def check(self, info: RunInfo) -> None:
        prereqs.bwrap_works()  # no bubblewrap or no user namespaces: refused in one line, before anything is made

    def prepare(self, run: RunFolder, info: RunInfo) -> None:
        for n in range(1, info.workers + 1):  # the workers' bus and gateway sockets, before any worker starts
            bwrap.prepare(run, n)

    def needs_relay(self, info: RunInfo) -> bool:
        return True

    def pane_socket(self, run: RunFolder, adapter: AgentAdapter, n: int) -> Path | None:
        return bwrap.PANE_SOCKET if adapter.facts.own_pane else None

    def pane(
        self, run: RunFolder, info: RunInfo, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]
    ) -> LaunchSpec:
        """Seeded here as under shared isolation, then run in its sandbox, its portal to the gateway first when it
        uses one (and to its egress proxy when the run allows any)."""
        hint = f"give the gateway a credential it can hold ({', '.join(adapter.facts.credentials.env)}), "
        _no_login_file(ctx, adapter, hint + "or run with --isolation shared")
        if adapter.facts.http_hooks:  # its hooks posted to its relay through its portal (orch.backends.local.httphooks)
            ctx = dataclasses.replace(ctx, hook_url=bwrap.HOOK_URL)
        spec = adapter.prepare(ctx)
        own = {**own, SANDBOXED.name: "1"}
        limits = caps.limit_argv(info.caps, False, info.workers)  # its uid is the user's: the watchdog's caps too
        inner = supervised(LaunchSpec([*limits, *spec.argv], {**spec.env, **own}, spec.cwd), run, ctx.worker)
        n = ctx.worker
        binaries = [get_adapter(agent).binary() for agent in info.agents()]
        home = None if "HOME" in inner.env else ctx.config_dir / "home"
        if home is not None:
            home.mkdir(mode=0o700, exist_ok=True)
        gateway = adapter.facts.gateway
        url = next((v for k, v in own.items() if gateway is not None and k == gateway.base_url_env), None)
        address = urlsplit(url) if url is not None else None
        env = inner.env
        ports = [f"{address.hostname}:{address.port}", bwrap.GATEWAY_SOCKET] if address is not None else []
        if egressproxy.allowlist_of(info) is not None:  # its way out: the relay's proxy, on a port of its loopback
            port = egressproxy.proxy_port(address.port if address is not None else None)
            ports += [f"127.0.0.1:{port}", bwrap.EGRESS_SOCKET]
            env = {**env, **egressproxy.proxy_env(port)}
        if ctx.hook_url is not None:
            ports += [f"127.0.0.1:{bwrap.HOOK_PORT}", bwrap.HOOKS_SOCKET]
        # As a bare script without site (standard library only): it starts before every agent.
        portal = [sys.executable, "-S", portal_module.__file__, *ports, "--"] if ports else []
        cwd, sockets = Path(spec.cwd or ctx.workdir), relay.worker_sockets(run, n)
        sandbox = bwrap.argv(run, n, Path(info.workdir), cwd, binaries, sockets, home, info.caps.disk)
        return LaunchSpec(argv=[*sandbox, *portal, *inner.argv], env=env, cwd=inner.cwd)

    def attribution(self, run: RunFolder, workers: Iterable[int]) -> Attribution:
        return bwrap.ByNamespace({str(run.outbox(n)): n for n in workers})

    def agent_tree(self, pane_pid: int) -> tuple[int | None, set[int]]:
        """In its sandbox an orphan is adopted by the sandbox's init, itself under the pane: the agent's tree is
        the supervisor's, below bwrap and its init (which are the sandbox, not strays)."""
        root = supervisor_under(pane_pid)
        return root, set((procs.ancestry(root) or []) if root is not None else [pane_pid]) - {root}

    def signal(self, info: RunInfo, n: int, signals: str, pids: Iterable[int]) -> None:
        kill_pids(signals, pids)

    def stop_worker(self, info: RunInfo, n: int, pids: set[int], clear: Path | None) -> None:
        kill_pids("STOP,KILL", pids)  # its sandbox's own tmpfs go with its last process
        if clear is not None:
            remove_contents(clear)

    def scratch(self) -> list[Path]:
        return []  # its tmpfs are memory, read through a process of its sandbox (orch.fleet.diskuse)


# Run as the worker by the run's tmux server: signal the pids given, or with none every process of the worker's uid
# but this one (kill(-1)); with `--clear DIR`, empty DIR (its outbox) too.
HELPER = (
    "import os,shutil,signal,sys\n"
    "a=sys.argv[1:]\n"
    "d=a.pop(a.index('--clear')+1) if '--clear' in a else None\n"
    "a=[x for x in a if x!='--clear']\n"
    "for s in a[0].split(','):\n"
    "    for p in a[1:] or ['-1']:\n"
    "        try: os.kill(int(p),signal.Signals['SIG'+s])\n"
    "        except OSError: pass\n"
    "for e in os.scandir(d) if d else []:\n"
    "    try: shutil.rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)\n"
    "    except OSError: pass\n"
)


@dataclass(frozen=True)
class ByUid:
    """A process is the worker's whose uid it runs as (orch.run.uids)."""

    workers: frozenset[int]

    def owner(self, pid: int) -> Owner:
        uid = procs.uid(pid)
        n = worker_of(uid) if uid is not None else None
        return n if n in self.workers else None

    def forget(self, alive: set[int], span: range | tuple[range, range] | None) -> None:
        return None


@dataclass(frozen=True)
class OwnUid(Relayed):
    """Each worker a uid of its own in a run's container: its pane opens its launch bundle, drops to the worker's
    uid for good and seeds its own config dir there (orch.fleet.become). The controller may not signal another
    uid: the run's tmux server, which keeps SETUID, starts a helper as the worker to do it."""

    name: str = "own-uid"
    own_uids: bool = True
    boxed: bool = True

    def check(self, info: RunInfo) -> None:
        return None

    def prepare(self, run: RunFolder, info: RunInfo) -> None:
        return None  # the container's init gave each worker its files (orch.container.owners)

    def needs_relay(self, info: RunInfo) -> bool:
        return any(get_adapter(info.agent_of(n)).facts.own_pane for n in range(1, info.workers + 1))

    def pane_socket(self, run: RunFolder, adapter: AgentAdapter, n: int) -> Path | None:
        return relay.own_pane_socket(run, n) if adapter.facts.own_pane else None

    def pane(
        self, run: RunFolder, info: RunInfo, adapter: AgentAdapter, ctx: WorkerContext, own: dict[str, str]
    ) -> LaunchSpec:
        hint = f"give the gateway a credential it can hold ({', '.join(adapter.facts.credentials.env)})"
        _no_login_file(ctx, adapter, hint)
        folder = launch_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.stat().st_uid != os.geteuid():
            raise SandboxError(f"{folder} is not this user's: refusing to leave a worker's token there")
        bundle = folder / f"{run.name}-agent-{ctx.worker}-{uuid.uuid4().hex}.json"
        atomic_write(bundle, LaunchBundle.of(adapter.facts.name, ctx, own).model_dump_json(), mode=0o600)
        uid = worker_uid(ctx.worker)
        become = LaunchSpec(argv=[*MODULE_ARGV, "3"], cwd=ctx.workdir)
        inner = supervised(become, run, ctx.worker)
        limits = caps.limit_argv(info.caps, True, ctx.workers)  # as the worker: it can never raise them
        argv = ["sh", "-c", OPEN_BUNDLE, "orch-launch", str(bundle), *drop_argv(uid, uid), *limits, *inner.argv]
        return LaunchSpec(argv=argv, env=inner.env, cwd=ctx.workdir)

    def attribution(self, run: RunFolder, workers: Iterable[int]) -> Attribution:
        return ByUid(frozenset(workers))

    def agent_tree(self, pane_pid: int) -> tuple[int | None, set[int]]:
        return pane_pid, set()

    def signal(self, info: RunInfo, n: int, signals: str, pids: Iterable[int]) -> None:
        self._as_worker(info, n, signals, sorted(pids))

    def stop_worker(self, info: RunInfo, n: int, pids: set[int], clear: Path | None) -> None:
        self._as_worker(info, n, "STOP,KILL", None, clear)  # kill(-1) as the worker: every process
        if clear is not None:  # its own files in /tmp too (sticky: only its own)
            self._as_worker(info, n, "CONT", [], Path("/tmp"))

    def scratch(self) -> list[Path]:
        """The container's tmpfs and its home, where a file's owner says which worker wrote it."""
        return [Path("/tmp"), Path("/dev/shm"), Path(os.environ.get("HOME", "/"))]

    @staticmethod
    def _as_worker(info: RunInfo, n: int, signals: str, pids: list[int] | None, clear: Path | None = None) -> None:
        """Send `signals` to worker n's `pids` (None or none: every process of its uid) as the worker, through the
        run's tmux server (the controller may have no capability at all); with `clear`, empty that folder too."""
        uid = worker_uid(n)
        argv = [*drop_argv(uid, uid), sys.executable, "-c", HELPER, signals, *(str(p) for p in pids or [])]
        if clear is not None:
            argv += ["--clear", str(clear)]
        TmuxServer(info.tmux_socket).run_shell(shlex.join(argv) + " >/dev/null 2>&1")
