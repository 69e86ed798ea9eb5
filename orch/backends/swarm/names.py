"""What a swarm run is made of on its cluster: the names and labels of the objects orch creates through the
manager (a service per life of the run, its collector, its overlay network, the secrets of each life, the
collector's volume), and where things are inside their tasks. Every object carries the container backend's
labels (orch.container.layout: `orch.run`, `orch.managed`, `orch.role`), so one query finds a run's all.
"""

from __future__ import annotations

from orch.container.layout import LABEL_ROLE, labels

ROLE_RUN, ROLE_COLLECTOR, ROLE_NETWORK, ROLE_SECRET, ROLE_HOME = "run", "collector", "network", "secret", "home"
LABEL_LIFE = "orch.life"

COLLECTOR_PORT = 7450
HOME_MOUNT = "/collector"
"""The collector's volume, inside its task (orch.backends.swarm.collector.Home)."""
BOOT_SECRET = "orch-boot"
"""The run task's boot line (the gateway's upstreams, credentials included): /run/secrets/orch-boot."""
SYNC_SECRET = "orch-sync"
"""This life's token for the collector, in the run's task and in the collector: /run/secrets/orch-sync."""


def service_name(name: str) -> str:
    return f"orch-{name}"


def collector_name(name: str) -> str:
    """The collector's service, and its name on the run's network."""
    return f"orch-{name}-home"


def network_name(name: str) -> str:
    return f"orch-{name}"


def home_volume(name: str) -> str:
    return f"orch-home-{name}"


def secret_name(name: str, what: str, life: int) -> str:
    """A secret of one life (Swarm secrets cannot change: each life has its own)."""
    return f"orch-{name}-{what.removeprefix('orch-')}-{life}"


def swarm_labels(name: str, role: str, life: int | None = None) -> dict[str, str]:
    found = labels(name, role)
    if life is not None:
        found[LABEL_LIFE] = str(life)
    return found


def role_of(found: dict[str, str]) -> str:
    return found.get(LABEL_ROLE, "")
