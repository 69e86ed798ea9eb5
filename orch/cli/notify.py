"""`orch notify`: mute or unmute a run's notifications, send a test one; and the notifiers the CLI hosts:
`orch run`'s (a thread beside its controller), `orch up`'s (`orch notify follow`, a detached process that
lives as long as the run). The notifier itself is orch.notify.follow; docs/notify.md says what it sends.

The notifier's modules (orch.notify.follow and .send: asyncio, tenacity; 15-20 ms of CPU) are imported where a
notice is sent: `orch up` without a notice asked, the common case, reads the config and never needs them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from orch import procs
from orch.backends import registry as backends
from orch.cli.common import NameArg, run_folder
from orch.errors import OrchError, SandboxError, UsageError
from orch.fleet import launch
from orch.notify import config
from orch.notify.config import NotifyConfig
from orch.run.folder import RunFolder
from orch.waits import wait_until

if TYPE_CHECKING:
    from orch.spec.model import FleetSpec

app = typer.Typer(no_args_is_help=True)  # `orch notify`, joined into the `orch` app by orch.cli.commands

NotifyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--notify",
        metavar="TARGET",
        help="Where to say the run needs you (repeatable), over your config file (docs/notify.md): terminal, "
        "desktop, a webhook URL (json:, slack:, discord:, ntfy: picks the body), command:PROGRAM, or off.",
    ),
]
START_TIMEOUT = 30.0  # seconds for a detached notifier to hold its run's lock


def effective(spec: NotifyConfig | None, flags: list[str] | None) -> NotifyConfig:
    """The user's file, the spec's `notify:` over it, then the flags; a webhook whose variable is unset is a
    one-line error here, before anything starts."""
    cfg = config.merge(config.load_user(), spec, flags or [])
    if not cfg.off:  # what orch.notify.send.channels would refuse, without importing it
        for hook in cfg.webhooks:
            hook.resolve(os.environ)
    return cfg


def read_spec(run: RunFolder) -> FleetSpec:
    """The run's spec (orch.lead.controller's reader, imported here only when a spec is read: the controller
    pulls in the report and its templates, which `orch brief` and `orch send`, importing this module, never use)."""
    from orch.lead.controller import read_spec as read

    return read(run)


@contextlib.contextmanager
def hosted(run: RunFolder, flags: list[str] | None, write: Callable[[str], None] | None) -> Iterator[None]:
    """`orch run`'s notifier while its controller drives the run; its close sends the run's end. None in a run's
    container (the controller the host's `orch run` forwards there: the host's notifier follows the folder; its
    egress reaches no webhook), nor for a run folder on a remote engine (not here to follow)."""
    if backends.here().container or not backends.folder_is_here(run.info()):
        yield
        return
    try:
        spec = read_spec(run).notify
    except OrchError:
        spec = None
    cfg = effective(spec, flags)
    from orch.notify import send
    from orch.notify.follow import Notifier

    with Notifier(run, cfg, send.channels(cfg, os.environ, write=write)):
        yield


def start_detached(run: RunFolder, cfg: NotifyConfig, since: float) -> int | None:
    """`orch up`'s notifier, a process of its own (it outlives `orch up`; it ends with the run): its pid, or
    None when nothing a detached process delivers was asked for."""
    if not cfg.detached() or not backends.folder_is_here(run.info()):
        return None
    stop_detached(run)  # an earlier one (`orch up --resume`): this config replaces its
    log = run.logs_dir / "notify.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", "from orch.cli.main import main; main()", "notify", "follow", run.name]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*argv, "--since", f"{since:.3f}"], stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True
        )
    assert proc.stdin is not None
    proc.stdin.write(cfg.model_dump_json().encode())
    proc.stdin.close()
    wait_until(lambda: holder(run) == proc.pid or proc.poll() is not None, START_TIMEOUT, "the run's notifier")
    if proc.poll() is not None:
        raise SandboxError(f"the run's notifier exited at start (exit {proc.returncode}): see {log}")
    return proc.pid


def holder(run: RunFolder) -> int | None:
    """The pid of the detached notifier serving the run (written in its lock file), if any."""
    try:
        text = run.notify_lock.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def stop_detached(run: RunFolder) -> None:
    """End the run's detached notifier, if one runs (it ends by itself with its run)."""
    pid = holder(run)
    if pid is None or procs.cmdline(pid)[-4:-2] != ["follow", run.name]:  # gone, or the pid is another's now
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: holder(run) != pid or not procs.alive(pid), START_TIMEOUT, "the run's earlier notifier to end")


@app.command("follow", hidden=True)
def follow_(
    name: NameArg,
    since: Annotated[float, typer.Option("--since", help="Moments before this time are not sent.")] = 0.0,
) -> None:
    """`orch up`'s notifier: its config as JSON on stdin; ends with the run (its end, its kill, its folder gone)."""
    from orch.notify import send
    from orch.notify.follow import Notifier

    run = run_folder(name)
    cfg = NotifyConfig.model_validate_json(sys.stdin.read())
    fd = os.open(run.notify_lock, os.O_RDWR | os.O_CREAT, 0o600)
    wait_until(lambda: _locked(fd), START_TIMEOUT, "the earlier notifier of the run to end")
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    info = run.info()
    # A container's tmux clients are the container's terminals: this process cannot reach them.
    ttys = None if backends.backend_of(info).container else launch.server_for(info).client_ttys
    notifier = Notifier(run, cfg, send.channels(cfg, os.environ, ttys=ttys), since=since)
    signal.signal(signal.SIGTERM, lambda *_: notifier.stop())
    try:
        notifier.follow(until_ended=True)
    finally:
        notifier.close()
        os.ftruncate(fd, 0)
        os.close(fd)


def _locked(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@app.command()
def mute(name: NameArg) -> None:
    """Send nothing more for a run until `orch notify unmute` (`orch watch` still lists what needs you)."""
    from orch.notify import follow

    follow.mute(run_folder(name), on=True)
    typer.echo(f"run {name}: notifications muted; `orch notify unmute {name}` turns them back on")


@app.command()
def unmute(name: NameArg) -> None:
    """Send a run's notifications again."""
    from orch.notify import follow

    follow.mute(run_folder(name), on=False)
    typer.echo(f"run {name}: notifications on")


@app.command("test")
def test_(
    name: Annotated[str | None, typer.Argument(help="A run whose spec's `notify:` counts too.")] = None,
    notify: NotifyOpt = None,
) -> None:
    """Send one notice through every channel your config file (and the flags, and a run's spec) names."""
    from orch.notify import send
    from orch.notify.notice import Notice, Reason

    run = run_folder(name) if name else None
    spec = read_spec(run).notify if run is not None and run.fleet_spec.exists() else None
    cfg = effective(spec, notify)
    write = _stderr if sys.stderr.isatty() else None
    channels = send.channels(cfg, os.environ, write=write)
    if not channels:
        raise UsageError("no channel to send to", hint="give --notify TARGET, or a [notify] table in your config file")
    results: list[send.Delivery] = []
    sender = send.Sender(channels, results.append)
    text = "a test: nothing needs you (orch notify test)"
    sender.send(Notice(run=name or "test", reason=Reason.RUN_ENDED, text=text, action="none", ts=time.time()))
    sender.close()
    for done in results:
        for label in done.delivered:
            typer.echo(f"{label}: delivered")
        for label, error in done.failed:
            typer.echo(f"{label}: failed: {error}", err=True)
    if not results or any(done.failed for done in results):
        raise typer.Exit(1)


def _stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
