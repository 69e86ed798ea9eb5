"""The first process of a run's container: confine, then drop privileges for good, then exec the run.

    python -m orch.container.init -- CMD [ARG...]

It starts as root holding only the capabilities it needs for this (see docker_container.INIT_CAPS):
1. applies the egress policy (orch.container.egress) and writes its report to /tmp for the controller to log;
2. hands the root-owned mount points listed in ORCH_CHOWN to the run's uid (fresh volumes);
3. copies a read-only mounted login file (the agent's `.credentials.json`) into the tmpfs home, where
   the agent looks for it ($ORCH_CREDENTIALS_HOME_PATH), readable by the run's uid only;
4. execs `setpriv` to become ORCH_UID:ORCH_GID with no supplementary groups, empty capability sets
   (effective, permitted, inheritable, ambient and bounding) and no-new-privs, which then execs CMD.

Nothing in the container runs as root after step 4, and nothing can get root or a capability back.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from orch import settings
from orch.agents.registry import get_adapter
from orch.container.egress import EgressError, allowlist_for, apply, write_report
from orch.errors import OrchError
from orch.run.records import EgressMode

CREDENTIALS_MOUNT = "/run/orch/credentials.json"


def _id(value: int | None, name: str) -> int:
    if value is None:
        raise SystemExit(f"orch-init: {name} must be set to a number")
    if value <= 0:
        raise SystemExit(f"orch-init: refusing to run the fleet as root ({name}={value})")
    return value


def _copy_credentials(uid: int, gid: int) -> None:
    source = Path(CREDENTIALS_MOUNT)
    home_path = settings.CREDENTIALS_HOME_PATH.get()  # set by the host (orch.container.boot)
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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m orch.container.init -- CMD [ARG...]", file=sys.stderr)
        return 2
    try:
        uid, gid, egress = settings.UID.get(), settings.GID.get(), settings.EGRESS.get()
        offline, extra, chown = settings.OFFLINE.get(), settings.ALLOW.get(), settings.CHOWN.get()
        decided = settings.EGRESS_ALLOW.get() if settings.EGRESS_ALLOW.is_set() else None
    except OrchError as exc:
        print(f"orch-init: {exc.one_line()}", file=sys.stderr)
        return 2
    uid, gid = _id(uid, settings.UID.name), _id(gid, settings.GID.name)
    try:
        mode = EgressMode(egress)
    except ValueError:
        print(f"orch-init: unknown {settings.EGRESS.name} {egress!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        if mode is not EgressMode.OPEN:
            print("orch-init: must start as root to apply the egress policy", file=sys.stderr)
            return 2
        os.execvp(argv[0], argv)
    if decided is not None:  # by `orch up` on the host
        allow = decided
    else:  # started without orch on the host (compose): the defaults plus ORCH_ALLOW
        try:
            credentials = get_adapter(settings.AGENT.get()).credentials
        except OrchError as exc:
            print(f"orch-init: {settings.AGENT.name}: {exc.one_line()}", file=sys.stderr)
            return 2
        try:
            allow = allowlist_for(os.environ, offline, extra, credentials)
        except ValueError as exc:
            print(f"orch-init: ORCH_ALLOW: {exc}", file=sys.stderr)
            return 2
    try:
        report = apply(mode, allow)
    except EgressError as exc:
        print(f"orch-init: egress policy failed: {exc}", file=sys.stderr)
        return 1
    write_report(report)
    print(
        f"orch-init: egress {report.mode}: allowed {sorted(report.allowed)}; skipped {report.skipped}; "
        f"self-test {report.selftest}",
        flush=True,
    )
    for path in chown:
        if os.stat(path).st_uid == 0:  # a fresh volume; a user's own folder keeps its owner
            os.chown(path, uid, gid)
    _copy_credentials(uid, gid)
    setpriv = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *argv,
    ]
    os.execvp(setpriv[0], setpriv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
