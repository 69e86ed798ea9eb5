"""What passes between the gateway's own processes: the boot line with its secrets, the server child's start
(handed over in memory: the child is a fork of its supervisor) and its reports. Secrets travel only through
pipes or a fork's memory, never argv, env or files."""

from __future__ import annotations

import json

from pydantic import Field

from orch.gateway.modeldir import GatewayBoot
from orch.run.records import Strict


def boot_line(boot: GatewayBoot) -> str:
    """The boot as one JSON line with the secret values in clear (pydantic masks SecretStr on dump)."""
    data = boot.model_dump(mode="json")
    data["control_key"] = boot.control_key.get_secret_value()
    for dumped, upstream in zip(data["upstreams"], boot.upstreams, strict=True):
        dumped["secret"] = upstream.secret.get_secret_value()
    return json.dumps(data)


class ChildStart(Strict):
    """What the supervisor hands a (re)started server child: the boot, where each upstream is, and the live
    tokens, their workers' kinds and jobs (they exist only in memory, so a restart must hand them down)."""

    boot: GatewayBoot
    upstream_urls: list[str] = Field(default_factory=list)
    """Each boot upstream's URL, in order (a scripted one's is the model server the supervisor started)."""
    tokens: dict[int, str] = Field(default_factory=dict)
    agents: dict[int, str] = Field(default_factory=dict)
    """Each worker's agent kind, as its token was minted: it picks the worker's upstream."""
    jobs: dict[int, str] = Field(default_factory=dict)
    life: int = 1


class Report(Strict):
    """A server child's line to the supervisor: ready, a token minted, a job set."""

    ready: bool = False
    worker: int | None = None
    token: str | None = None
    agent: str | None = None
    """The kind the token was minted for (with `token`)."""
    job: str | None = None
    job_set: bool = False
