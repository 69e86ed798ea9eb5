"""What the container's init is given: the host's boot line on stdin (`orch up`, `orch run` from the host),
or compose's secret file and environment (compose.yaml); and what it does so that nothing started later
holds a credential.

Errors never echo a credential: the boot line and the secret file hold one.
"""

from __future__ import annotations

import os
import select
import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from orch.agents.registry import ADAPTERS, get_adapter
from orch.errors import OrchError
from orch.gateway.credential import fleet_upstreams
from orch.gateway.modeldir import Upstream
from orch.run.folder import validate_name
from orch.run.records import Strict
from orch.settings.compose import CREDENTIALS, OFFLINE, RUN
from orch.settings.internal import CREDENTIALS_HOME_PATH

CREDENTIALS_MOUNT = "/run/orch/credentials.json"
SECRETS_FILE = "/run/secrets/orch-credentials"
"""compose.yaml's secret (ORCH_CREDENTIALS): `VAR=value` lines of model API credentials, for the gateway."""
ACK_LINE = "orch-init: boot line received"  # orch.backends.docker.boot.start waits for it
BOOT_LINE_TIMEOUT = 60.0
BOOT_LINE_MAX = 1 << 20


class InitBoot(Strict):
    """The host's one line on the container's stdin (orch.backends.docker.boot.start)."""

    run: str
    offline: bool = False
    upstreams: list[Upstream]
    """One per model API of the fleet, each with its credential (none for a replay)."""
    replay: str | None = None
    """A replay: the exported recording's copy in the run folder (RunFolder.replay_recording, in the
    gateway's `model/`), which the gateway answers from."""


class InitError(Exception):
    """A one-line reason the container must not start; `code` its exit code (2: bad input)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def read_boot(fd: int = 0, timeout: float = BOOT_LINE_TIMEOUT) -> InitBoot:
    """The first line on `fd`, within `timeout` seconds. Errors never echo the line: it holds a secret."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise InitError(f"no boot line on stdin within {timeout:g}s (the host writes it once the container starts)")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise InitError("stdin closed before the boot line arrived")
        data += chunk
        if len(data) > BOOT_LINE_MAX:
            raise InitError("the boot line is too long")
    return _parse_boot(data.split(b"\n", 1)[0])


def read_boot_file(path: Path, uid: int) -> InitBoot:
    """The boot line from a file (a swarm task's secret), refused when the run's uid could read it too (the
    gateway's uid must own it, mode 0400). Errors never echo its content: it holds a secret."""
    try:
        st = path.stat()
        if not path.is_file():
            raise InitError(f"the boot file {path} is not a regular file")
        if st.st_uid == uid or st.st_mode & 0o077:
            raise InitError(
                f"the boot file {path}: the run's uid {uid} could read it (owner {st.st_uid}, mode "
                f"{st.st_mode & 0o777:o}): it must be the gateway's, mode 400"
            )
        data = path.read_bytes()[:BOOT_LINE_MAX]
    except OSError as exc:
        raise InitError(f"cannot read the boot file {path}: {exc.strerror}") from None
    return _parse_boot(data.split(b"\n", 1)[0])


def _parse_boot(line: bytes) -> InitBoot:
    try:
        return InitBoot.model_validate_json(line)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InitError(f"bad boot line: {'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None


def credential_variables() -> set[str]:
    """Every variable of any agent's model API (its keys and base URL)."""
    return {var for kind in ADAPTERS for var in get_adapter(kind).facts.credentials.variables}


def env_boot(env: dict[str, str]) -> InitBoot | None:
    """compose.yaml's boot (no host, no boot line): the run ORCH_RUN, one upstream per model API whose
    credential is set in `env` (the scripted model with ORCH_OFFLINE=1); None when there is nothing for
    the gateway to hold (no credential, not offline) or no ORCH_RUN."""
    if not RUN.is_set():
        return None
    try:
        name = validate_name(RUN.get())
    except OrchError as exc:
        raise InitError(f"{RUN.name}: {exc.one_line()}") from None
    if OFFLINE.get():
        return InitBoot(run=name, offline=True, upstreams=[Upstream(kind="scripted")])
    kinds = {kind: creds for kind in ADAPTERS if (creds := get_adapter(kind).facts.credentials).in_env(env)}
    if not kinds:
        return None
    try:
        found = fleet_upstreams(kinds, env, offline=False, strict=False)
    except OrchError as exc:
        raise InitError(exc.one_line()) from None
    return InitBoot(run=name, upstreams=list(found.upstreams)) if found.upstreams else None


def read_secrets(path: Path, uid: int) -> dict[str, str]:
    """The credentials in compose's secret file (none when it is absent or not a regular file: /dev/null).
    Refused when the run's uid could read it too (its owner, or any group or other bit set): the run's
    processes would then reach the credential the gateway is there to keep from them. Errors never echo
    a value."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    if not path.is_file() or st.st_size == 0:
        return {}
    if st.st_uid == uid or st.st_mode & 0o077:
        raise InitError(
            f"{CREDENTIALS.name}: the run's uid {uid} could read it (owner {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): make it mode 600 and owned by another user (sudo chown root)"
        )
    allowed = credential_variables()
    found: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        name = name.strip()
        if not sep or name not in allowed:
            raise InitError(
                f"{CREDENTIALS.name}: line {number}: expected VAR=value with VAR one of {', '.join(sorted(allowed))}"
            )
        found[name] = value.strip().strip("'\"")
    return found


def clear_credentials() -> None:
    """No process started from here on (the gateway, the controller, the workers) inherits a credential."""
    for var in credential_variables():
        os.environ.pop(var, None)


def detach_stdin() -> None:
    """Nothing started later inherits the stdin the host attached to."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def copy_credentials(uid: int, gid: int) -> None:
    """A read-only mounted login file (the agent's own, when the gateway passes it through) copied into the
    tmpfs home, readable by the run's uid only."""
    source = Path(CREDENTIALS_MOUNT)
    home_path = CREDENTIALS_HOME_PATH.get()  # set by the host (orch.backends.docker.boot)
    if not source.is_file() or not home_path:
        return
    target = Path(os.environ.get("HOME", "/home/worker")) / home_path
    target_dir = target.parent
    target_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(target_dir, uid, gid)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, source.open("rb") as src:
        shutil.copyfileobj(src, out)
    os.chown(target, uid, gid)
