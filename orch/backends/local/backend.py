"""The local backend: a run's tmux server and controller on this machine (the host, or inside a run's container,
where every fleet is local to it). Strict workers each get a bubblewrap sandbox of their own on a host
(orch.backends.local.bwrap), a uid of their own in a container (orch.run.uids)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from orch import prereqs
from orch.allowlist import local_allowlist
from orch.backends.base import Backend, BackendSettings, UpOptions, in_container
from orch.errors import OrchError, UsageError
from orch.run.records import EgressMode, Isolation, LocalRunInfo, RunInfo
from orch.run.uids import can_switch_uids
from orch.versions import TMUX_MIN_VERSION

if TYPE_CHECKING:
    from orch.backends.local.sandbox import LocalSandbox
    from orch.contracts import Check
    from orch.fleet.confinement import Confinement

SHARED_NOTE = (
    "isolation shared: the workers share your uid and can read and write each other's files, the bus and "
    "the tree, and read your own files"
)
SHARED_NOTE_CONTAINER = (
    "isolation shared: the workers share the run's uid in its container and can read and write each other's "
    "files, the bus and the tree"
)


class LocalSettings(BackendSettings):
    """A local run's settings: its workers' egress."""

    backend: Literal["local"] = "local"
    egress_allow: list[str] | None = None
    """Strict isolation: the `host:port` names its workers may CONNECT to through the relay's proxy (`--egress
    allowlist`, orch.backends.local.egressproxy); None: no network but the gateway."""


class LocalBackend(Backend):
    name = "local"
    title = "the local backend"
    about = "tmux on this machine; each strict worker in a bubblewrap sandbox (in a container: a uid) of its own"
    record = LocalRunInfo

    def settings(self, options: UpOptions) -> LocalSettings:
        self.refuse_placement(options)
        allow = local_egress(options.egress, options.allow)
        return LocalSettings(boot_timeout=options.boot_timeout, egress_allow=allow)

    def sandbox(self, settings: BackendSettings | None = None) -> LocalSandbox:
        from orch.backends.local.sandbox import LocalSandbox

        if settings is not None and not isinstance(settings, LocalSettings):
            raise TypeError(f"the local backend takes LocalSettings, not {type(settings).__name__}")
        return LocalSandbox(settings)

    def shared_note(self) -> str:
        return SHARED_NOTE_CONTAINER if in_container() else SHARED_NOTE

    def doctor(self) -> list[Check]:
        from orch.contracts import Check
        from orch.fleet.tmux import check_tmux

        try:
            tmux = Check("tmux", True, check_tmux())
        except OrchError as exc:
            need = ".".join(map(str, TMUX_MIN_VERSION))
            tmux = Check("tmux", False, exc.message, exc.hint or f"install tmux >= {need}")
        try:  # local strict isolation (the default of a local run): bubblewrap, and the namespaces it needs
            sandbox = Check("bubblewrap", True, prereqs.bwrap_works())
        except OrchError as exc:
            sandbox = Check("bubblewrap", False, exc.message, exc.hint)
        return [tmux, sandbox]

    def confinement(self, info: RunInfo) -> Confinement:
        from orch.backends.local.confinement import choose

        return choose(info)

    def strict_possible(self) -> bool:
        """From a host always (bubblewrap); inside a container only with CAP_SETUID (an `orch run` in a container
        started without it runs shared; compose's `lead` has the init prepare its run instead)."""
        return not in_container() or can_switch_uids()

    def default_isolation(self, agents: Iterable[str]) -> tuple[Isolation, str | None]:
        isolation, note = super().default_isolation(agents)
        if isolation is Isolation.STRICT and not self.strict_possible():
            why = "this container gives its processes no way to start workers as uids of their own (no CAP_SETUID)"
            return Isolation.SHARED, f"{self.shared_note()}: {why}"
        return isolation, note


def local_egress(egress: EgressMode | None, allow: Iterable[str]) -> list[str] | None:
    """A local run's egress: None (no network but the gateway: `--egress none`, the default), or the
    allowlist its workers' proxies take (`--egress allowlist`, orch.allowlist). Bad input is one line."""
    allow = list(allow)
    if egress is EgressMode.OPEN:
        raise UsageError(  # a sandbox has no network of its own to open: only the host's, shared, would do
            "--egress open is not offered locally: a strict worker's sandbox reaches the network only through "
            "its allowlist proxy",
            hint="use --egress allowlist --allow HOST[:PORT], or --isolation shared (reaches what this machine does)",
        )
    if egress is not EgressMode.ALLOWLIST:
        if allow:
            raise UsageError("--allow needs --egress allowlist locally", hint="add --egress allowlist")
        return None
    try:
        return local_allowlist(os.environ, allow)
    except ValueError as exc:
        raise UsageError(f"--allow: {exc}", hint="give host names, each with :PORT when not 443") from None
