"""`orch doctor` lines every adapter can give from its facts: its install and its credentials."""

from __future__ import annotations

import os

from orch.contracts import AgentAdapter, Check, Credentials
from orch.errors import OrchError


def install_check(adapter: AgentAdapter) -> Check:
    """Whether the agent's executable is there and tells its version."""
    try:
        path = adapter.binary()
    except OrchError as exc:
        return Check(adapter.name, False, exc.message, exc.hint)
    version = adapter.version()
    return Check(adapter.name, version is not None, f"{version or 'version unknown'} at {path}")


def credentials_check(credentials: Credentials, name: str = "credentials") -> Check:
    """Which credentials this machine has (variable names and file paths, never their values)."""
    found = [var for var in credentials.env if os.environ.get(var)]
    login = credentials.login_file(os.environ)
    if login:
        found.append(str(login))
    base_url = credentials.base_url_env
    if base_url and os.environ.get(base_url):
        found.append(f"{base_url}={os.environ[base_url]}")
    if found:
        return Check(name, True, ", ".join(found))
    return Check(name, False, "none found (the offline demo needs none)", credentials.hint, optional=True)
