"""What a swarm run is made of on its cluster: the names and labels of the objects orch creates through the
manager (a service per life of the run, its collector, its overlay network, the secrets of each life, the
collector's volume), and where things are inside their tasks. Every object carries the container backend's
labels (orch.container.layout: `orch.run`, `orch.managed`, `orch.role`), so one query finds a run's all.
"""

from __future__ import annotations

import re

from orch.container.layout import LABEL_ROLE, labels
from orch.errors import UsageError

ROLE_RUN, ROLE_COLLECTOR, ROLE_NETWORK, ROLE_SECRET, ROLE_HOME = "run", "collector", "network", "secret", "home"
LABEL_LIFE = "orch.life"

COLLECTOR_PORT = 7450
HOME_MOUNT = "/collector"
"""The collector's volume, inside its task (orch.backends.swarm.collector.Home)."""
BOOT_SECRET = "orch-boot"
"""The run task's boot line (the gateway's upstreams, credentials included): /run/secrets/orch-boot."""
SYNC_SECRET = "orch-sync"
"""This life's token for the collector, in the run's task and in the collector: /run/secrets/orch-sync."""


SWARM_NAME_MAX = 50
"""The longest run name whose objects Swarm accepts: a service's name is at most 63 characters (the collector's
`orch-NAME-home` adds 10) and a secret's at most 64 (`orch-NAME-boot-LIFE` adds 12 and the life's digits)."""
SWARM_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[-_]*[A-Za-z0-9]+)*$")
"""What Swarm takes as a service's name (a DNS name component: no dot, no trailing `-` or `_`)."""


def check_name(name: str) -> None:
    """Refuse, before anything is made, a run name a valid run folder takes but Swarm's objects cannot carry:
    the manager would refuse its service only once its network and secrets existed."""
    if len(name) > SWARM_NAME_MAX or not SWARM_NAME_RE.fullmatch(name):
        raise UsageError(
            f"run name {name!r} cannot name a swarm service: at most {SWARM_NAME_MAX} letters, digits, '-' or '_',"
            " no '.', starting and ending with a letter or digit",
            hint="give --name a shorter name of those characters",
        )


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
