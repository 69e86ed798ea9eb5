"""A toy third backend, the whole of what adding a backend takes in code: its settings, its variant of run.json,
its sandbox and its facts. Its runs live in tmux on this machine, as the local backend's do, their workers sharing
one uid, and carry a setting of their own (`motto`) from its settings to run.json. tests/backends/test_contract.py
registers it (one line, as orch/backends/registry.py names its own) and runs it through the shared suite."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from orch.backends.base import Backend, BackendSettings, UpOptions
from orch.backends.local.backend import LocalSettings
from orch.backends.local.sandbox import LocalSandbox
from orch.contracts import Check, UpRequest
from orch.errors import UsageError
from orch.fleet import launch
from orch.fleet.confinement import Confinement, Shared
from orch.run.records import Isolation, RunInfo, RunInfoBase


class ToySettings(BackendSettings):
    backend: Literal["toy"] = "toy"
    motto: str = "hello"


class ToyRunInfo(RunInfoBase):
    """A toy run's record: what every run has, and its motto."""

    backend: Literal["toy"] = "toy"
    motto: str


class ToySandbox(LocalSandbox):
    """The local sandbox, making toy runs."""

    def __init__(self, settings: ToySettings) -> None:
        super().__init__(LocalSettings(boot_timeout=settings.boot_timeout))
        self.motto = settings.motto

    def check(self, request: UpRequest) -> None:
        launch.check(request, self._toy(request), Shared())

    def up(self, request: UpRequest) -> RunInfo:
        return launch.up(request, self._toy(request), Shared(), self.boot_timeout)

    def _toy(self, request: UpRequest) -> ToyRunInfo:
        if request.isolation is not Isolation.SHARED:
            raise UsageError("the toy backend offers no strict isolation", hint="run it with --isolation shared")
        _, planned = launch.plan(request)
        return ToyRunInfo.of(planned, motto=self.motto)


class ToyBackend(Backend):
    name = "toy"
    title = "the toy backend"
    about = "a toy: tmux on this machine, its workers sharing one uid, a motto in run.json"
    record = ToyRunInfo

    def settings(self, options: UpOptions) -> ToySettings:
        return ToySettings(boot_timeout=options.boot_timeout)

    def sandbox(self, settings: BackendSettings | None = None) -> ToySandbox:
        return ToySandbox(settings if isinstance(settings, ToySettings) else ToySettings())

    def shared_note(self) -> str:
        return "isolation shared: a toy's workers share your uid"

    def doctor(self) -> list[Check]:
        return [Check("toy", True, "nothing to install")]

    def confinement(self, info: RunInfo) -> Confinement:
        return Shared()

    def strict_possible(self) -> bool:
        return False

    def default_isolation(self, agents: Iterable[str]) -> tuple[Isolation, str | None]:
        return Isolation.SHARED, f"{self.shared_note()}: it offers no strict isolation"
