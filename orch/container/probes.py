"""The egress policy's self-test (orch.container.egress applies the policy, then calls these, as root in the
container): an address off the list is refused at once, for the run's uid too at every model API, and a
name off the list does not resolve. A failed one is an EgressError: the container must not start.

Standard library only, as orch.container.egress.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

# TEST-NET-1 (RFC 5737): never routed, so the blocked-probe of the self-test cannot reach anyone even
# if the firewall were missing; with it, the connect must fail at once with our reject.
PROBE_ADDRESS = ("192.0.2.1", 9)
PROBE_TIMEOUT = 3.0
DNS_PROBE = "orch-egress-selftest.invalid"


class EgressError(Exception):
    """The firewall could not be applied or failed its self-test: the container must not start."""


def probe_blocked(address: tuple[str, int] = PROBE_ADDRESS, timeout: float = PROBE_TIMEOUT) -> str:
    """Self-test: a connection to an address outside the allowlist must fail, and fail at once."""
    started = time.monotonic()
    try:
        with socket.create_connection(address, timeout=timeout):
            pass
    except TimeoutError:
        raise EgressError(
            f"self-test: {address[0]} was not rejected (timed out): the firewall is not in force"
        ) from None
    except OSError as exc:
        return f"blocked {address[0]}:{address[1]} ({exc.strerror or exc}) in {time.monotonic() - started:.2f}s"
    raise EgressError(f"self-test: {address[0]}:{address[1]} is reachable although it is not allowlisted")


def probe_as(uid: int, gid: int, address: tuple[str, int], timeout: float = PROBE_TIMEOUT) -> str:
    """`probe_blocked(address)` in a child process running as `uid` (the owner match sees that uid)."""
    code = (
        "import sys\n"
        "from orch.container.probes import EgressError, probe_blocked\n"
        "try:\n"
        f"    print(probe_blocked(({address[0]!r}, {address[1]}), {timeout}))\n"
        "except EgressError as exc:\n"
        "    print(exc); sys.exit(1)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], user=uid, group=gid, extra_groups=[], capture_output=True, text=True,
            timeout=timeout + 30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise EgressError(f"self-test as uid {uid} could not run: {exc}") from exc
    text = (done.stdout or done.stderr).strip().splitlines()
    line = text[-1] if text else f"exit {done.returncode}"
    if done.returncode != 0:
        raise EgressError(f"self-test as uid {uid}: {line}")
    return line


def probe_dns(pinned: Mapping[str, Sequence[str]]) -> str:
    """Self-test: a name off the list does not resolve, and a pinned one resolves to its pinned address."""
    try:
        socket.getaddrinfo(DNS_PROBE, None, socket.AF_INET)
    except socket.gaierror:
        pass
    else:
        raise EgressError(f"self-test: {DNS_PROBE} resolved: DNS is not confined")
    for name, ips in pinned.items():
        got = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET)})
        if not set(got) <= set(ips):
            raise EgressError(f"self-test: {name} resolved to {got}, not its pinned {ips}")
        return f"refused {DNS_PROBE}; {name} -> {got[0]}"
    return f"refused {DNS_PROBE}"
