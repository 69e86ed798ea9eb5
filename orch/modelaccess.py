"""How an agent reaches its real model API: the credential it needs and how that travels (by environment, or its
own login file), and how a worker is pointed at the run's gateway instead (orch.contracts.AgentFacts holds them;
orch.agents.credentials has each model API's shape)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


@dataclass(frozen=True)
class LoginFile:
    """The agent CLI's own saved login (its `/login`), used when no credential comes by environment."""

    dir_env: str
    """The variable that moves the agent's config dir (each worker gets its own)."""
    home_dir: str
    """That config dir relative to $HOME when the variable is unset."""
    name: str
    """The file in the config dir."""

    @property
    def in_home(self) -> str:
        """Where the agent looks for it under $HOME (a container copies the user's file there)."""
        return f"{self.home_dir}/{self.name}"

    def find(self, env: Mapping[str, str], home: Path) -> Path | None:
        """The invoking user's login file, if there is one."""
        base = env.get(self.dir_env)
        path = Path(base) / self.name if base else home / self.in_home
        return path if path.is_file() else None


@dataclass(frozen=True)
class Credentials:
    """What an agent needs to reach its real model API, and how it travels: by process environment
    only (the run's tmux server, the container's environment), or the user's login file mounted
    read-only; never a file orch writes."""

    env: tuple[str, ...]
    """Variables holding a credential; any one is enough."""
    base_url_env: str | None = None
    """The variable pointing the agent at another endpoint: set by the user, the gateway's upstream."""
    api_url: str | None = None
    """The model API when `base_url_env` is unset: the gateway's upstream, opened by the egress allowlist."""
    schemes: tuple[tuple[str, str], ...] = ()
    """For each variable of `env`, how the gateway presents it upstream (orch.gateway.modeldir.Scheme)."""
    login: LoginFile | None = None
    protocols: tuple[str, ...] = ()
    """The gateway protocols (orch.gateway.apis.registry: `anthropic`, `openai-responses`, `openai-chat`,
    `gemini`) the agent speaks with this credential: its upstream serves these and refuses the others.
    Empty: any."""
    hint: str = ""
    """How a user gets a credential (the fix `orch doctor` and `orch demo --live` print)."""

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable of the user's environment that concerns the agent's model API: the gateway takes
        them, and every worker's environment drops them."""
        return (*self.env, self.base_url_env) if self.base_url_env else self.env

    @property
    def api_host(self) -> str | None:
        return urlsplit(self.api_url).hostname if self.api_url else None

    def in_env(self, env: Mapping[str, str]) -> bool:
        return any(env.get(var) for var in self.env)

    def login_file(self, env: Mapping[str, str], home: Path | None = None) -> Path | None:
        return self.login.find(env, home or Path.home()) if self.login else None


@dataclass(frozen=True)
class GatewayEnv:
    """How a worker is pointed at the run's model gateway (orch.gateway) instead of a real API: every
    variable of `Credentials.variables` is dropped from its environment, these two are set."""

    base_url_env: str
    """Set to the gateway's URL for this worker (it carries the worker's run-scoped token)."""
    key_env: str
    """Set to the worker's token: the agent needs a key, and the real one stays in the gateway."""


NO_CREDENTIALS = Credentials(env=())
