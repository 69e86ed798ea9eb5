"""The local backend's answers: its settings (a strict run's egress), the isolation `orch up` picks, and what
it needs, seen from a host and from inside a run's container (no tmux or bubblewrap started)."""

from __future__ import annotations

import pytest

from orch.backends.base import UpOptions
from orch.backends.local import backend as local
from orch.backends.local.backend import LocalBackend, LocalSettings
from orch.errors import UsageError
from orch.run.records import EgressMode, Isolation
from tests.helpers import run_info

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

BACKEND = LocalBackend()


def test_its_settings_take_the_egress_and_nothing_of_a_container() -> None:
    assert BACKEND.settings(UpOptions(image="ignored", cpus=0, copy=True)) == LocalSettings()
    allowed = BACKEND.settings(UpOptions(egress=EgressMode.ALLOWLIST, allow=("pypi.org",)))
    assert allowed.egress_allow is not None and "pypi.org:443" in allowed.egress_allow
    with pytest.raises(UsageError, match="--egress open is not offered locally"):
        BACKEND.settings(UpOptions(egress=EgressMode.OPEN))
    with pytest.raises(UsageError, match="--allow needs --egress allowlist locally"):
        BACKEND.settings(UpOptions(allow=("pypi.org",)))


def test_up_defaults_to_strict_here_and_in_a_container(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BACKEND.default_isolation(["claude", "codex"]) == (Isolation.STRICT, None)
    assert BACKEND.default_isolation(["claude", "aider"]) == (Isolation.STRICT, None)  # its pane through the relay
    assert BACKEND.strict_possible() and BACKEND.shared_note() == local.SHARED_NOTE
    # `orch up` run inside a container that cannot start processes as other uids: shared, and it says why.
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    monkeypatch.setattr(local, "can_switch_uids", lambda: False)
    isolation, note = BACKEND.default_isolation(["claude"])
    assert isolation is Isolation.SHARED and note and "no CAP_SETUID" in note
    assert note.startswith(local.SHARED_NOTE_CONTAINER) and not BACKEND.strict_possible()
    monkeypatch.setattr(local, "can_switch_uids", lambda: True)
    assert BACKEND.default_isolation(["claude"]) == (Isolation.STRICT, None) and BACKEND.strict_possible()


def test_its_facts() -> None:
    assert not BACKEND.pinned_agents and BACKEND.checks_at_start and not BACKEND.container
    assert BACKEND.folder_is_here(run_info("r"))
