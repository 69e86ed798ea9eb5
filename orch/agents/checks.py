"""`orch doctor` lines every adapter can give from its facts: its install and its credentials."""

from __future__ import annotations

import os

from orch.contracts import AgentAdapter, Check
from orch.errors import OrchError, UsageError
from orch.modelaccess import Credentials


def check_permission_mode(adapter: AgentAdapter, mode: str) -> None:
    """UsageError unless `mode` is one of the agent's permission modes (its own names, passed to it)."""
    if mode not in adapter.facts.permission_modes:
        raise UsageError(
            f"unknown permission mode {mode!r} for agent {adapter.facts.name}",
            hint=f"use one of: {', '.join(adapter.facts.permission_modes)}",
        )


def limits_check(adapter: AgentAdapter) -> Check:
    """The agent's limits as one doctor line (informational: not a failure)."""
    return Check(f"{adapter.facts.name}-limits", True, "; ".join(adapter.facts.limits) or "none known", optional=True)


def install_check(adapter: AgentAdapter) -> Check:
    """Whether the agent's executable is there and tells its version."""
    try:
        path = adapter.binary()
    except OrchError as exc:
        return Check(adapter.facts.name, False, exc.message, exc.hint)
    version = adapter.version()
    return Check(adapter.facts.name, version is not None, f"{version or 'version unknown'} at {path}")


# How the run's gateway will present each kind of credential: the doctor says it before a run does.
SCHEME_NOTES = {
    "x-api-key": "held by the gateway (API key)",
    "bearer": "held by the gateway (bearer token)",
    "oauth": "held by the gateway (OAuth token, sent with the API's OAuth beta header; "
    "not checked against the live API from here)",
}
LOGIN_NOTE = (
    "its OAuth login rotates and only the agent can refresh it, so workers would each get a copy "
    "(passthrough: the gateway still meters, caps and records)"
)


def credentials_check(credentials: Credentials, name: str = "credentials") -> Check:
    """Which credentials this machine has (variable names and file paths, never their values), and which
    one the gateway would use and how: the first variable set, else the login file (passed through)."""
    found = [var for var in credentials.env if os.environ.get(var)]
    login = credentials.login_file(os.environ)
    base_url = credentials.base_url_env
    upstream = os.environ.get(base_url, "") if base_url else ""
    where = f" -> {upstream}" if upstream else ""
    if found:
        note = SCHEME_NOTES.get(dict(credentials.schemes).get(found[0], ""), "held by the gateway")
        others = f" (also set: {', '.join(found[1:])})" if found[1:] else ""
        return Check(name, True, f"{found[0]}: {note}{where}{others}")
    if login:
        hint = f"so that no worker holds a credential, set one of {', '.join(credentials.env)} instead"
        return Check(name, True, f"{login}: {LOGIN_NOTE}{where}", hint)
    return Check(name, False, "none found (the offline demo needs none)", credentials.hint, optional=True)
