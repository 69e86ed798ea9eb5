"""The egress policy of a run's container: what it may reach, applied before privileges are dropped.

The host decides the policy (`allowlist_for`); the container's init step (orch.container.init), still
root with NET_ADMIN, applies it with iptables (and ipset when the kernel has it), then proves it with a
self-test, then drops to the run's uid with no capabilities left to undo it.

Modes:
- `open`: no filtering.
- `allowlist` (default): loopback, replies, and the allowlisted addresses; everything else is rejected
  at once (not dropped: a blocked call fails fast). Names are resolved once, at boot; a name that does
  not resolve is skipped with a note, never fatal. The model API's host is not on the workers' list: it
  is open to the model gateway's uid only (an iptables owner match), so only the process holding the
  credential reaches it; the self-test proves the run's uid is refused there, for every upstream.
- `none`: loopback only for the workers (offline runs talk to their gateway and model server on
  127.0.0.1). A live run's gateway still reaches the model API, by the same owner match: the run would
  have no model otherwise.

Under both, no DNS packet leaves the container (a lookup of `<data>.attacker.example` is a channel out):
every UDP query to port 53 goes to orch.container.dns on loopback, which answers only the names resolved
at boot, with the addresses the firewall allows, and TCP to port 53 is rejected.

This module runs inside the container as root: it imports only the standard library, orch.settings, orch.errors,
orch.allowlist (the `--allow` entries, shared with a local run's proxy), orch.container.dns,
orch.container.probes (the self-test), orch.run.records and orch.run.uids (the agent's Credentials,
which name its model API, come from the caller).
"""

from __future__ import annotations

import ipaddress
import json
import os
import select
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from orch.allowlist import default_hosts, normalize_entry
from orch.container.dns import table as dns_table
from orch.container.probes import PROBE_ADDRESS, probe_as, probe_blocked, probe_dns
from orch.container.probes import EgressError as EgressError
from orch.errors import UsageError
from orch.run.records import EgressMode, Isolation
from orch.run.uids import checks_uid, drop_argv

if TYPE_CHECKING:
    from orch.modelaccess import Credentials

IPSET = "orch-allow"
REPORT_PATH = Path("/tmp/orch-egress.json")
DNS_PORT = 53535
DNS_UID = 65534  # nobody: neither a worker nor the gateway
DNS_START_TIMEOUT = 30.0


@dataclass(frozen=True)
class HomeEgress:
    """A swarm run's collector (orch.backends.swarm.collector), where its folder comes home: open to the run's
    uid alone (its syncer), on that one port; every other uid is refused there, whatever `--allow` says."""

    uid: int
    address: str
    port: int


@dataclass(frozen=True)
class GatewayEgress:
    """The model APIs (host, port: one per upstream), open to the gateway's uid only; `probe_uid` (the
    run's) is proven refused at every one of them."""

    uid: int
    targets: Sequence[tuple[str, int]]
    probe_uid: int
    probe_gid: int

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(host for host, _ in self.targets))


def url_host_port(url: str) -> tuple[str, int] | None:
    """An upstream URL's host and port (443 for https, 80 for http), None when it names no host."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (80 if parts.scheme == "http" else 443)


def model_api_hosts(env: Mapping[str, str], credentials: Credentials) -> list[str]:
    """The agent's model API host: its base URL variable's host when set, else its API's own host."""
    base = env.get(credentials.base_url_env, "").strip() if credentials.base_url_env else ""
    if base:
        host = urlsplit(base if "//" in base else f"//{base}").hostname
        if host:
            return [host]
    return [credentials.api_host] if credentials.api_host else []


def allowlist_for(
    env: Mapping[str, str], offline: bool, extra: Iterable[str], credentials: Credentials, model_api: bool = True
) -> list[str]:
    """The allowlist a run's workers get: the agent's model API (not for offline runs, nor with
    `model_api=False`, when the gateway alone may reach it: `GatewayEgress`), registries and GitHub,
    then `extra`."""
    api = model_api_hosts(env, credentials) if model_api and not offline else []
    hosts = api + default_hosts(env) + [normalize_entry(e) for e in extra]
    return list(dict.fromkeys(hosts))


# --- inside the container, as root ---------------------------------------------------------------
@dataclass
class EgressReport:
    """What the init step did; logged by the controller into events.jsonl."""

    mode: str
    allowed: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Entries that did not resolve (or only to IPv6, which is blocked): left out, not fatal."""
    ipset: bool = False
    selftest: str = ""
    gateway: dict[str, list[str]] = field(default_factory=dict)
    """The model API's addresses, open to the gateway's uid only."""
    gateway_uid: int | None = None
    gateway_selftest: str = ""
    """One `blocked ...` per model API (`; ` between): the run's uid refused at each."""
    dns: list[str] = field(default_factory=list)
    """The names the container's DNS answers (orch.container.dns); every other lookup fails there."""
    dns_selftest: str = ""
    checks_uid: int | None = None
    """The uid whose every packet is rejected (the controller runs changes' checks as it), when the rules hold."""


Runner = Callable[[Sequence[str]], None]


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise EgressError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[:300]}")


def resolve(entries: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """IPv4 networks for each entry; entries that do not resolve come back in the second list."""
    allowed: dict[str, list[str]] = {}
    skipped: list[str] = []
    for entry in entries:
        try:
            net = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            net = None
        if net is not None:
            (allowed.setdefault(entry, []).append(str(net)) if net.version == 4 else skipped.append(entry))
            continue
        try:
            infos = socket.getaddrinfo(entry, None, socket.AF_INET, socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            skipped.append(entry)
            continue
        ips = sorted({str(info[4][0]) for info in infos})
        if ips:
            allowed[entry] = ips
        else:
            skipped.append(entry)
    return allowed, skipped


def dns_rules(port: int) -> list[list[str]]:
    """No DNS packet out, whoever sends it and to whom: UDP queries to port 53 are redirected to the
    container's own responder on loopback (nat, before Docker's own rule for 127.0.0.11), TCP ones and
    anything still bound for port 53 after that are rejected (before loopback is accepted: 127.0.0.11 is
    loopback). conntrack's original port sees through Docker's DNAT of 127.0.0.11:53."""
    dns = ["-m", "conntrack", "--ctdir", "ORIGINAL", "--ctorigdstport", "53"]  # not the responder's answers
    return [
        ["iptables", "-t", "nat", "-I", "OUTPUT", "1", "-p", "udp", "--dport", "53", "-j", "REDIRECT",
         "--to-ports", str(port)],
        ["iptables", "-A", "OUTPUT", "-p", "tcp", *dns, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"],
        ["iptables", "-A", "OUTPUT", "-p", "udp", *dns, "!", "-d", "127.0.0.1", "-j", "REJECT",
         "--reject-with", "icmp-admin-prohibited"],
        # A query redirected from another address still counts as leaving by its first route (eth0) in
        # this hook: accept it by where it now goes, the responder.
        ["iptables", "-A", "OUTPUT", "-p", "udp", "-d", "127.0.0.1", "--dport", str(port), "-j", "ACCEPT"],
    ]  # fmt: skip


def rules(
    mode: EgressMode,
    networks: Sequence[str],
    use_ipset: bool,
    gateway_uid: int | None = None,
    gateway_networks: Sequence[str] = (),
    dns_port: int = DNS_PORT,
    home: HomeEgress | None = None,
) -> list[list[str]]:
    """The iptables commands (IPv4) for a mode; the last ones set the default-deny policies.

    `gateway_networks` (the model API) are accepted for `gateway_uid` only and rejected for every other
    uid before the allowlist is consulted, so a worker cannot reach them even through an --allow entry
    that resolves to the same address. Under `none` the gateway's uid keeps them, nobody else anything
    but loopback. DNS: `dns_rules`, for every uid."""
    cmds = [
        ["iptables", "-F", "OUTPUT"],
        ["iptables", "-F", "INPUT"],
        # The checks' uid (orch.lead.changes.gate) gets no network, loopback and DNS included: first, before any accept.
        ["iptables", "-A", "OUTPUT", "-m", "owner", "--uid-owner", str(checks_uid()), "-j", "REJECT"],
        *dns_rules(dns_port),
        ["iptables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
        ["iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
        ["iptables", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
        ["iptables", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
    ]
    if home is not None:
        cmds += [
            ["iptables", "-A", "OUTPUT", "-p", "tcp", "-d", home.address, "--dport", str(home.port),
             "-m", "owner", "--uid-owner", str(home.uid), "-j", "ACCEPT"],
            ["iptables", "-A", "OUTPUT", "-d", home.address, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"],
        ]  # fmt: skip
    if mode is EgressMode.NONE and gateway_uid is not None and gateway_networks:
        owner = ["-m", "owner", "--uid-owner", str(gateway_uid)]
        cmds += [["iptables", "-A", "OUTPUT", "-d", net, *owner, "-j", "ACCEPT"] for net in gateway_networks]
    if mode is EgressMode.ALLOWLIST:
        if gateway_uid is not None:
            owner = ["-m", "owner", "--uid-owner", str(gateway_uid)]
            cmds += [["iptables", "-A", "OUTPUT", "-d", net, *owner, "-j", "ACCEPT"] for net in gateway_networks]
            cmds += [
                ["iptables", "-A", "OUTPUT", "-d", net, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]
                for net in gateway_networks
            ]
        if use_ipset:
            cmds.append(["iptables", "-A", "OUTPUT", "-m", "set", "--match-set", IPSET, "dst", "-j", "ACCEPT"])
        else:
            cmds += [["iptables", "-A", "OUTPUT", "-d", net, "-j", "ACCEPT"] for net in networks]
    cmds += [
        ["iptables", "-A", "OUTPUT", "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"],
        ["iptables", "-P", "INPUT", "DROP"],
        ["iptables", "-P", "FORWARD", "DROP"],
        ["iptables", "-P", "OUTPUT", "DROP"],
    ]
    return cmds


def _ipv6_rules(run: Runner) -> None:
    """IPv6: loopback only. Where the container has no IPv6 at all, ip6tables may be unusable: fine."""
    cmds = [
        ["ip6tables", "-F", "OUTPUT"],
        ["ip6tables", "-A", "OUTPUT", "-m", "owner", "--uid-owner", str(checks_uid()), "-j", "REJECT"],
        ["ip6tables", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
        ["ip6tables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
        ["ip6tables", "-P", "INPUT", "DROP"],
        ["ip6tables", "-P", "FORWARD", "DROP"],
        ["ip6tables", "-P", "OUTPUT", "DROP"],
    ]
    try:
        for cmd in cmds:
            run(cmd)
    except (EgressError, OSError) as exc:
        if _has_global_ipv6():
            raise EgressError(f"cannot restrict IPv6 egress: {exc}") from exc


def _has_global_ipv6(path: Path = Path("/proc/net/if_inet6")) -> bool:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[5] != "lo" and not parts[0].startswith("fe80"):
            return True
    return False


def _setup_ipset(networks: Sequence[str], run: Runner) -> bool:
    """Load the allowlist into an ipset; False when the kernel lacks ip_set (then: one rule per address)."""
    if shutil.which("ipset") is None:
        return False
    try:
        run(["ipset", "create", IPSET, "hash:net", "family", "inet", "-exist"])
    except EgressError:
        return False
    run(["ipset", "flush", IPSET])
    for net in networks:
        run(["ipset", "add", IPSET, net, "-exist"])  # -exist: duplicates across names are fine
    return True


def gateway_probes(resolved: Mapping[str, Sequence[str]], targets: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Where the self-test proves the run's uid refused: every model API (the first address of each
    host, at that upstream's port), not only the first."""
    probes = [(resolved[host][0].split("/")[0], port) for host, port in targets if resolved.get(host)]
    return list(dict.fromkeys(probes))


def start_dns(pinned: Mapping[str, Sequence[str]], log: Path, run: Runner = _run) -> str:
    """Start the container's DNS responder (orch.container.dns) as nobody, answering `pinned` only, its
    refusals appended to `log`; wait until it listens. Its pid, for the report."""
    log.touch(mode=0o644)
    os.chown(log, DNS_UID, DNS_UID)
    argv = [*drop_argv(DNS_UID, DNS_UID), sys.executable, "-m", "orch.container.dns", "--port", str(DNS_PORT)]
    with log.open("ab") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(pinned).encode() + b"\n")
    proc.stdin.close()
    ready, _, _ = select.select([proc.stdout], [], [], DNS_START_TIMEOUT)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()  # nothing more comes; the run must not inherit it
    if line.split()[:1] != ["ready"]:
        proc.kill()
        raise EgressError(f"the DNS responder did not start (see {log}): {line or 'no answer'}")
    return str(proc.pid)


def apply(
    mode: EgressMode,
    entries: Sequence[str],
    run: Runner = _run,
    gateway: GatewayEgress | None = None,
    dns_log: Path = Path("/tmp/orch-dns.log"),
    home: HomeEgress | None = None,
) -> EgressReport:
    """Apply the policy in this network namespace (needs root with NET_ADMIN) and self-test it.

    `gateway` (allowlist and none): the model API hosts open to the gateway's uid alone. `dns_log`: where
    the DNS responder notes each name it refused. `home`: a swarm run's collector, the run's uid's alone."""
    report = EgressReport(mode=mode.value)
    if mode is EgressMode.OPEN:
        report.selftest = "skipped (egress open)"
        return report
    networks: list[str] = []
    gateway_networks: list[str] = []
    if mode is EgressMode.ALLOWLIST:
        report.allowed, report.skipped = resolve(entries)
        networks = list(dict.fromkeys(ip for ips in report.allowed.values() for ip in ips))
        report.ipset = _setup_ipset(networks, run)
    if gateway is not None:
        report.gateway, skipped = resolve(gateway.hosts)
        report.skipped += skipped
        report.gateway_uid = gateway.uid
        gateway_networks = list(dict.fromkeys(ip for ips in report.gateway.values() for ip in ips))
    pinned = dns_table({**report.allowed, **report.gateway})
    report.dns = sorted(pinned)
    uid = report.gateway_uid
    for cmd in rules(mode, networks, report.ipset, uid, gateway_networks, home=home):
        run(cmd)
    _ipv6_rules(run)
    report.checks_uid = checks_uid()
    if run is _run:  # for real (not a dry run of the commands): the responder and its self-test
        start_dns(pinned, dns_log)
        report.dns_selftest = probe_dns(pinned)
    if PROBE_ADDRESS[0] in networks:
        report.selftest = "skipped (the probe address is allowlisted)"
    else:
        report.selftest = probe_blocked()
    if gateway is not None:
        # The deny side for the workers: every model API refuses the run's uid at once. The gateway's
        # allow side is not probed (a run never depends on reaching the outside to start).
        results = [
            probe_as(gateway.probe_uid, gateway.probe_gid, t) for t in gateway_probes(report.gateway, gateway.targets)
        ]
        report.gateway_selftest = "; ".join(results)
    return report


def not_cut_off(uid: int | None = None) -> str:
    """Why a strict run's checks cannot run in its container, in one line: they run as a uid of their own that the
    firewall cuts off the network (`apply`, under every mode but open). `uid`: the checks' uid, once known (inside
    the container: the host picks the run's uid range when it starts it)."""
    who = f"uid {uid}" if uid is not None else "the checks' uid"
    return f"the container's firewall does not cut {who} off the network (egress open?)"


def refuse_open_checks(mode: EgressMode, isolation: Isolation, checks: bool) -> None:
    """A strict run whose writers' changes are checked (`checks`), in a container with egress open: refused in one
    line before anything of it is made. The controller's probe in the container stays behind it (it also sees
    a firewall that was not applied: orch.lead.changes.uidchecks), but refuses only once the run exists."""
    if checks and isolation is Isolation.STRICT and mode is EgressMode.OPEN:
        raise UsageError(
            not_cut_off(),
            hint="the checks need a uid the firewall cuts off: use egress allowlist (the default) or none, "
            "or drop the spec's checks",
        )


def write_report(report: EgressReport, path: Path = REPORT_PATH) -> None:
    path.write_text(json.dumps(asdict(report)) + "\n")
    os.chmod(path, 0o644)


def read_report(path: Path = REPORT_PATH) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
