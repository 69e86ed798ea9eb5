"""The egress policy without an engine: the allowlist, its entries, the iptables rules and the self-test."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from orch.agents.registry import get_adapter
from orch.container import egress
from orch.errors import UsageError
from orch.modelaccess import Credentials
from orch.run import uids
from orch.run.records import EgressMode, Isolation
from orch.settings.user import DEFAULT_ALLOW, GATEWAY_UID

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection


def test_allowlist_defaults_model_host_and_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    api = get_adapter("claude").facts.credentials
    got = egress.allowlist_for({}, False, ["example.org", "10.1.2.3", "https://x.test:8443/p"], api)
    assert got[0] == "api.anthropic.com"
    assert {"registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "github.com"} <= set(got)
    assert got[-3:] == ["example.org", "10.1.2.3/32", "x.test"]
    env = {"ANTHROPIC_BASE_URL": "http://llm-proxy.internal:4000/v1", DEFAULT_ALLOW.name: "mirror.local, "}
    assert egress.allowlist_for(env, False, [], api) == ["llm-proxy.internal", "mirror.local"]
    # Offline runs talk to their model server on loopback: no model API host.
    assert "api.anthropic.com" not in egress.allowlist_for({}, True, [], api)
    # An agent that calls no model API gets none either.
    assert egress.allowlist_for({}, False, [], Credentials(env=()))[0] == "registry.npmjs.org"


def test_names_that_do_not_resolve_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(host: str, *args: Any) -> list[tuple[Any, ...]]:
        if host == "gone.example":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host == "v6only.example":
            return []
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.7", 0))] * 2

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    allowed, skipped = egress.resolve(["ok.example", "gone.example", "v6only.example", "10.0.0.0/8", "::1/128"])
    assert allowed == {"ok.example": ["203.0.113.7"], "10.0.0.0/8": ["10.0.0.0/8"]}
    assert skipped == ["gone.example", "v6only.example", "::1/128"]


def test_rules_default_deny_with_allowlist_and_no_dns_out() -> None:
    rules = egress.rules(EgressMode.ALLOWLIST, ["203.0.113.7"], use_ipset=False)
    flat = [" ".join(r) for r in rules]
    assert flat[-3:] == ["iptables -P INPUT DROP", "iptables -P FORWARD DROP", "iptables -P OUTPUT DROP"]
    assert "iptables -A OUTPUT -o lo -j ACCEPT" in flat
    assert "iptables -A OUTPUT -d 203.0.113.7 -j ACCEPT" in flat
    assert flat.index("iptables -A OUTPUT -d 203.0.113.7 -j ACCEPT") < flat.index(
        "iptables -A OUTPUT -j REJECT --reject-with icmp-admin-prohibited"
    )
    # DNS: every UDP query to the container's own responder, TCP refused, before loopback is accepted
    # (Docker's resolver, 127.0.0.11, is loopback); no resolver is accepted by address.
    redirect = f"iptables -t nat -I OUTPUT 1 -p udp --dport 53 -j REDIRECT --to-ports {egress.DNS_PORT}"
    dns = "-m conntrack --ctdir ORIGINAL --ctorigdstport 53"
    tcp = f"iptables -A OUTPUT -p tcp {dns} -j REJECT --reject-with icmp-admin-prohibited"
    assert redirect in flat and tcp in flat
    assert flat.index(tcp) < flat.index("iptables -A OUTPUT -o lo -j ACCEPT")
    assert not any("--dport 53 -j ACCEPT" in r or "--dport 53 -m owner" in r for r in flat)
    none = [" ".join(r) for r in egress.rules(EgressMode.NONE, [], use_ipset=False)]
    assert redirect in none and tcp in none
    outward = [r for r in none if "-d " in r and "ACCEPT" in r]
    assert outward == [f"iptables -A OUTPUT -p udp -d 127.0.0.1 --dport {egress.DNS_PORT} -j ACCEPT"]  # loopback only


def test_none_leaves_the_live_gateway_its_model_api_alone() -> None:
    none = egress.rules(EgressMode.NONE, [], use_ipset=False, gateway_uid=61000, gateway_networks=["198.51.100.9"])
    flat = [" ".join(r) for r in none]
    owner = "-m owner --uid-owner 61000 -j ACCEPT"
    assert f"iptables -A OUTPUT -d 198.51.100.9 {owner}" in flat
    outward = [r for r in flat if "-d " in r and "ACCEPT" in r and "127.0.0.1" not in r]
    assert outward == [f"iptables -A OUTPUT -d 198.51.100.9 {owner}"]  # the gateway's uid only, and no DNS
    assert flat.index(f"iptables -A OUTPUT -d 198.51.100.9 {owner}") < flat.index(
        "iptables -A OUTPUT -j REJECT --reject-with icmp-admin-prohibited"
    )
    # an offline run (no gateway networks) stays loopback only
    offline = egress.rules(EgressMode.NONE, [], use_ipset=False, gateway_uid=61000)
    assert not any("-d " in " ".join(r) and "ACCEPT" in r and "127.0.0.1" not in r for r in offline)


def test_the_self_test_probes_every_upstream() -> None:
    """A fleet of Claude Code and Codex: both model APIs are proven refused to the run's uid, not only the first."""
    resolved = {"api.anthropic.example": ["198.51.100.9", "198.51.100.10"], "api.openai.example": ["203.0.113.5"]}
    targets = [("api.anthropic.example", 443), ("api.openai.example", 8443), ("gone.example", 443)]
    assert egress.gateway_probes(resolved, targets) == [("198.51.100.9", 443), ("203.0.113.5", 8443)]
    gw = egress.GatewayEgress(61000, [*targets, ("api.anthropic.example", 443)], 1000, 1000)
    assert gw.hosts == ["api.anthropic.example", "api.openai.example", "gone.example"]


def test_apply_runs_rules_then_self_test(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(egress, "probe_blocked", lambda: "blocked 192.0.2.1:9 (test)")
    monkeypatch.setattr(egress, "resolve", lambda entries: ({"a.example": ["203.0.113.7"]}, ["b.example"]))
    monkeypatch.setattr("orch.container.egress.shutil.which", lambda name: None)  # no ipset: one rule per address
    report = egress.apply(EgressMode.ALLOWLIST, ["a.example", "b.example"], run=lambda argv: ran.append(list(argv)))
    assert report.skipped == ["b.example"] and report.selftest.startswith("blocked") and not report.ipset
    assert report.dns == ["a.example"]
    assert ["iptables", "-A", "OUTPUT", "-d", "203.0.113.7", "-j", "ACCEPT"] in ran
    assert ["ip6tables", "-P", "OUTPUT", "DROP"] in ran
    assert egress.apply(EgressMode.OPEN, [], run=lambda argv: ran.append(["never"])).selftest.startswith("skipped")
    assert ["never"] not in ran


def test_the_checks_uid_has_no_network_not_even_loopback() -> None:
    uid = uids.checks_uid()
    for mode in (EgressMode.ALLOWLIST, EgressMode.NONE):
        flat = [" ".join(r) for r in egress.rules(mode, ["203.0.113.7"], use_ipset=False)]
        block = f"iptables -A OUTPUT -m owner --uid-owner {uid} -j REJECT"
        assert flat.index(block) < flat.index("iptables -A OUTPUT -o lo -j ACCEPT")
        # before the redirected DNS queries are accepted too: the checks ask no name server, not even ours
        assert flat.index(block) < min(i for i, r in enumerate(flat) if r.startswith("iptables -A") and "53" in r)
    assert uids.worker_of(uid) is None and uid != GATEWAY_UID.get()


def test_a_swarm_runs_collector_is_the_run_uids_alone() -> None:
    """Under allowlist and none alike: the collector's port to the run's uid, everything else to it refused,
    before the allowlist (an `--allow` of its network gives a worker nothing there)."""
    home = egress.HomeEgress(1000, "10.231.3.7", 7450)
    accept = "iptables -A OUTPUT -p tcp -d 10.231.3.7 --dport 7450 -m owner --uid-owner 1000 -j ACCEPT"
    refuse = "iptables -A OUTPUT -d 10.231.3.7 -j REJECT --reject-with icmp-admin-prohibited"
    for mode in (EgressMode.ALLOWLIST, EgressMode.NONE):
        flat = [" ".join(r) for r in egress.rules(mode, ["10.231.0.0/16"], use_ipset=False, home=home)]
        assert flat.index(accept) + 1 == flat.index(refuse)
        if mode is EgressMode.ALLOWLIST:
            assert flat.index(refuse) < flat.index("iptables -A OUTPUT -d 10.231.0.0/16 -j ACCEPT")
    assert not any("10.231.3.7" in " ".join(r) for r in egress.rules(EgressMode.ALLOWLIST, [], use_ipset=False))


def test_a_strict_run_with_checks_is_refused_open_egress_in_one_line() -> None:
    """The checks' uid is cut off under every mode but open: a strict run whose changes are checked is refused an
    open egress, before anything is made, in the line the controller's probe in the container would say."""
    with pytest.raises(UsageError) as refused:
        egress.refuse_open_checks(EgressMode.OPEN, Isolation.STRICT, checks=True)
    assert refused.value.one_line().startswith(
        "the container's firewall does not cut the checks' uid off the network (egress open?)"
    )
    assert egress.not_cut_off(uids.checks_uid()) == (
        f"the container's firewall does not cut uid {uids.checks_uid()} off the network (egress open?)"
    )  # the probe's, inside
    for mode, isolation, checks in [
        (EgressMode.OPEN, Isolation.STRICT, False),  # nothing to check
        (EgressMode.OPEN, Isolation.SHARED, True),  # a shared run's checks run as the run's uid (SECURITY.md)
        (EgressMode.ALLOWLIST, Isolation.STRICT, True),
        (EgressMode.NONE, Isolation.STRICT, True),
    ]:
        egress.refuse_open_checks(mode, isolation, checks)
