"""The one way orch talks to the Docker engine: a client that is known to answer, or a UsageError."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path

import docker.errors
import requests.exceptions

from orch.settings.user import DOCKER_REMOTE
from orch.text import shorten

ENGINE_HINT = (
    "start the engine (e.g. `systemctl start docker`, or scripts/start-dockerd.sh as root) "
    "or point DOCKER_HOST at one that runs"
)


DEFAULT_ENGINE = "unix:///var/run/docker.sock"
LOCAL_BASE_URLS = ("http+docker://localhost", "http+docker://localnpipe")


def _docker_config_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def context_host() -> str | None:
    """The endpoint of the current docker context (DOCKER_CONTEXT, else the CLI's config), if not default.

    Read from the docker CLI's own files (contexts/meta/<sha256 of the name>/meta.json).
    """
    config_dir = _docker_config_dir()
    name = os.environ.get("DOCKER_CONTEXT")
    if not name:
        try:
            name = json.loads((config_dir / "config.json").read_text()).get("currentContext")
        except (OSError, ValueError, AttributeError):
            name = None
    if not name or name == "default":
        return None
    meta = config_dir / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest() / "meta.json"
    try:
        host = json.loads(meta.read_text())["Endpoints"]["docker"]["Host"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(host) if host else None


def engine_address() -> str:
    """Where the client will look for the engine: DOCKER_HOST, else the docker context, else the socket."""
    return os.environ.get("DOCKER_HOST") or context_host() or DEFAULT_ENGINE


def docker_client(timeout: int = 60, base_url: str | None = None) -> docker.DockerClient:
    """A client for the engine named by the environment (DOCKER_HOST etc.), checked with a ping.

    `base_url` names another engine (a run remembers the engine it was started on). `ssh://` engines
    are reached with the system's ssh client (its config, keys and known_hosts), as the docker CLI does.
    Raises UsageError when no engine answers there: a missing engine is a missing prerequisite.
    """
    from orch.errors import UsageError

    address = base_url or engine_address()
    ssh = address.startswith("ssh://")
    if ssh:
        _quiet_ssh_close()
    try:
        if os.environ.get("DOCKER_HOST") and base_url in (None, os.environ["DOCKER_HOST"]):
            client = docker.from_env(timeout=timeout, use_ssh_client=ssh)  # keeps DOCKER_TLS_VERIFY etc.
        else:
            client = docker.DockerClient(base_url=address, timeout=timeout, use_ssh_client=ssh)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        if ssh:  # the ssh client said why on stderr; what reaches us is a broken pipe
            raise UsageError(
                f"Docker engine not reachable at {address}: the ssh connection or `docker system dial-stdio` "
                "on the far side failed (see ssh's message above)",
                hint=f"check that `ssh {_ssh_target(address)} docker version` works",
            ) from exc
        raise UsageError(f"Docker engine not reachable at {address}: {_reason(exc)}", hint=ENGINE_HINT) from exc
    return client


def is_remote_client(client: docker.DockerClient) -> bool:
    """An engine on another machine (tcp://, ssh://): it cannot see this machine's paths."""
    forced = DOCKER_REMOTE.get()  # e.g. a tcp:// engine sharing this disk is local
    if forced is not None:
        return forced
    return str(client.api.base_url) not in LOCAL_BASE_URLS


def explain(exc: docker.errors.APIError) -> str:
    """What the engine said when it refused a request, on one line."""
    return shorten(exc.explanation or exc, 300)


def _quiet_ssh_close() -> None:
    """docker-py 7.1's ssh transport writes to an ssh process on close even when it already ended, and the
    BrokenPipeError surfaces as a traceback at interpreter exit: make that close quiet (once)."""
    from docker.transport import sshconn

    if getattr(sshconn.SSHSocket.close, "_orch_quiet", False):
        return
    original = sshconn.SSHSocket.close

    def close(self: sshconn.SSHSocket) -> None:
        try:
            original(self)
        except (BrokenPipeError, ValueError):  # the ssh process is gone (ValueError: its pipe is closed)
            if self.proc is not None:
                with contextlib.suppress(OSError):
                    self.proc.terminate()

    close._orch_quiet = True  # type: ignore[attr-defined]
    sshconn.SSHSocket.close = close  # type: ignore[method-assign]


def _ssh_target(address: str) -> str:
    """`ssh://user@host:port` -> `-p port user@host` (what to try by hand)."""
    rest = address.removeprefix("ssh://")
    target, _, port = rest.rpartition(":") if rest.rsplit(":", 1)[-1].isdigit() else (rest, "", "")
    return f"-p {port} {target}" if port else target


_ERRNO_TEXT = {
    errno.ENOENT: "no engine socket there",
    errno.ECONNREFUSED: "connection refused",
    errno.EACCES: "permission denied on the engine socket (join the docker group or run as root)",
    errno.ETIMEDOUT: "connection timed out",
}


def _reason(exc: BaseException) -> str:
    """A short cause: the OS error at the bottom of the requests/urllib3 wrapping, when there is one."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno in _ERRNO_TEXT:
            return _ERRNO_TEXT[item.errno]
        todo.extend([*item.args, item.__cause__, item.__context__])
        todo.extend(getattr(item, name, None) for name in ("reason", "original_error"))
    return shorten(exc, 160) or type(exc).__name__
