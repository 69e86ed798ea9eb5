"""The container's DNS responder (orch.container.dns): the pinned names and nothing else, with real DNS
packets over a real UDP socket on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from dnslib import QTYPE, RCODE, DNSRecord

from orch.container import dns

PINNED = {"pypi.org": ["151.101.0.223", "151.101.64.223"], "model": ["172.18.0.4"]}


def _ask(name: str, qtype: str = "A") -> DNSRecord:
    reply, _ = dns.answer(DNSRecord.question(name, qtype).pack(), PINNED)
    assert reply is not None
    return DNSRecord.parse(reply)


def test_pinned_names_get_their_pinned_addresses_only() -> None:
    got = _ask("PyPI.org.")
    assert got.header.rcode == RCODE.NOERROR
    assert [str(rr.rdata) for rr in got.rr] == PINNED["pypi.org"]
    assert _ask("pypi.org", "AAAA").rr == []  # IPv6 is blocked: an empty answer, not a refusal


def test_other_names_are_refused_and_named() -> None:
    query = DNSRecord.question("6f726368.secret.attacker.example").pack()
    reply, refused = dns.answer(query, PINNED)
    assert reply is not None and DNSRecord.parse(reply).header.rcode == RCODE.NXDOMAIN
    assert refused == "6f726368.secret.attacker.example"
    assert dns.answer(b"\x00garbage", PINNED) == (None, None)  # not a query: dropped
    response = DNSRecord.parse(reply).pack()  # an answer sent to the responder is no question: dropped
    assert dns.answer(response, PINNED) == (None, None)


def test_table_keeps_names_not_networks() -> None:
    resolved = {"pypi.org": ["151.101.0.223"], "10.0.0.0/8": ["10.0.0.0/8"], "203.0.113.7/32": ["203.0.113.7/32"]}
    assert dns.table(resolved) == {"pypi.org": ["151.101.0.223"]}


def test_the_responder_process_answers_and_logs_refusals() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orch.container.dns", "--port", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(PINNED).encode() + b"\n")
        proc.stdin.close()
        ready = proc.stdout.readline().decode().split()
        assert ready[0] == dns.READY
        port = int(ready[1])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            for name in ("model", "data.attacker.example"):
                sock.sendto(DNSRecord.question(name).pack(), ("127.0.0.1", port))
                DNSRecord.parse(sock.recv(4096))
        refused = json.loads(proc.stderr.readline())
        assert refused == {"refused": "data.attacker.example", "type": QTYPE[QTYPE.A]}
    finally:
        proc.kill()
        proc.wait(10)
    assert subprocess.run([sys.executable, "-m", "orch.container.dns"], capture_output=True).returncode == 2


def test_refusals_are_noted_once_each_and_capped() -> None:
    """A worker looping over lookups cannot fill the disk through the log: each name once, then a cap."""
    log = dns.RefusalLog(limit=3)
    lines = [log.line(f"{n % 5}.x.example", "A") for n in range(100)]
    noted = [json.loads(line) for line in lines if line is not None]
    assert [n["refused"] for n in noted] == ["0.x.example", "1.x.example", "2.x.example", "..."]
    assert "more than 3 names" in noted[-1]["note"]
