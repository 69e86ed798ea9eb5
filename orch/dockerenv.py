"""The one way orch talks to the Docker engine: a client that is known to answer, or a UsageError."""

from __future__ import annotations

import errno
import os

import docker.errors
import requests.exceptions

ENGINE_HINT = (
    "start the engine (e.g. `systemctl start docker`, or scripts/start-dockerd.sh as root) "
    "or point DOCKER_HOST at one that runs"
)


def engine_address() -> str:
    """Where the client will look for the engine, for messages."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client(timeout: int = 60) -> docker.DockerClient:
    """A client for the engine named by the environment (DOCKER_HOST etc.), checked with a ping.

    Raises UsageError when no engine answers there: a missing engine is a missing prerequisite.
    """
    from orch.errors import UsageError

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise UsageError(
            f"Docker engine not reachable at {engine_address()}: {_reason(exc)}", hint=ENGINE_HINT
        ) from exc
    return client


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
    return _short(exc)


def _short(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's text, without the wrapping noise requests/urllib3 add."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
