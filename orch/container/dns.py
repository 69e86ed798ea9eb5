"""The container's only DNS: the allowlist's names, answered with the addresses pinned at boot, and nothing else.

A lookup is a channel out: `<data>.attacker.example` reaches the attacker's name server through any
recursive resolver. So under `allowlist` and `none`, no DNS packet leaves the container: the init step
redirects every UDP query to port 53 (any address, Docker's 127.0.0.11 included, whatever uid sends it)
to this responder on loopback, and rejects TCP to port 53 (orch.container.egress.rules). The responder
forwards nothing. It answers:
- a name the init step resolved at boot (the workers' allowlist and the model API hosts): its IPv4
  addresses, the very ones the firewall lets through, so a name always leads where the firewall allows;
  AAAA gets an empty answer (IPv6 is blocked);
- anything else: NXDOMAIN, and one JSON line on stderr (`{"refused": NAME, "type": "A"}`; each name
  once, the first 1000 names only), which the
  init step points at the run folder's `logs/dns.log` where it knows the run.

Addresses are pinned for the container's life: a name whose addresses change later keeps its old ones
until the container starts again (`orch up` of the run, which resumes it, resolves afresh). The big
hosts on the default list (registries, GitHub) keep their anycast addresses for months.

    python -m orch.container.dns --port PORT    # the table on stdin (JSON: name -> [IPv4]); "ready PORT" on stdout

It runs as `nobody`, not a worker's uid and not the gateway's: it needs nothing but its port.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

PORT = 53535
TTL = 60
READY = "ready"
MAX_PACKET = 4096
MAX_LOGGED = 1000


def normalize(name: str) -> str:
    return name.rstrip(".").lower()


def answer(query: bytes, pinned: Mapping[str, Sequence[str]]) -> tuple[bytes | None, str | None]:
    """The reply to one query packet, and the name refused (None when answered); (None, None) for a
    packet that is not a DNS query: dropped."""
    try:
        request = DNSRecord.parse(query)
    except Exception:  # dnslib raises its own errors and others on garbage: not a query, dropped
        return None, None
    if request.header.qr or not request.questions:
        return None, None
    question = request.questions[0]
    name = normalize(str(question.qname))
    reply = request.reply()
    addresses = pinned.get(name)
    if addresses is None:
        reply.header.rcode = RCODE.NXDOMAIN
        return reply.pack(), name
    if question.qtype in (QTYPE.A, QTYPE.ANY):  # any other type (AAAA: IPv6 is blocked): an empty answer
        for address in addresses:
            reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=TTL))
    return reply.pack(), None


def table(entries: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """name -> single IPv4 addresses: networks (an --allow CIDR) and IP entries are no names to answer."""
    out: dict[str, list[str]] = {}
    for name, nets in entries.items():
        if any(c.isalpha() for c in name):
            ips = [n.removesuffix("/32") for n in nets if "/" not in n or n.endswith("/32")]
            if ips:
                out[normalize(name)] = ips
    return out


class RefusalLog:
    """Each refused name once, and at most MAX_LOGGED of them: a worker looping over lookups must not fill
    the run folder's disk through this log (nor this process's memory)."""

    def __init__(self, limit: int = MAX_LOGGED) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def line(self, name: str, qtype: str) -> str | None:
        if name in self.seen or len(self.seen) > self.limit:
            return None
        self.seen.add(name)
        if len(self.seen) > self.limit:
            return json.dumps({"refused": "...", "note": f"more than {self.limit} names refused: no more noted"})
        return json.dumps({"refused": name, "type": qtype})


def serve(sock: socket.socket, pinned: Mapping[str, Sequence[str]]) -> None:
    """Answer queries on `sock` forever; a refused name is one line on stderr (RefusalLog)."""
    noted = RefusalLog()
    while True:
        try:
            query, peer = sock.recvfrom(MAX_PACKET)
        except InterruptedError:  # pragma: no cover
            continue
        reply, refused = answer(query, pinned)
        if refused is not None:
            line = noted.line(refused, QTYPE.get(DNSRecord.parse(query).q.qtype, "?"))
            if line is not None:
                print(line, file=sys.stderr, flush=True)
        if reply is not None:
            try:
                sock.sendto(reply, peer)
            except OSError:  # the asker went away
                continue


def main(argv: list[str]) -> int:
    if argv[:1] != ["--port"] or len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m orch.container.dns --port PORT  (the table as JSON on stdin)", file=sys.stderr)
        return 2
    try:
        pinned = table(json.loads(sys.stdin.readline()))
    except (ValueError, AttributeError) as exc:
        print(f"orch-dns: bad table on stdin: {exc}", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", int(argv[1])))
    print(READY, sock.getsockname()[1], flush=True)  # the port: 0 asks for any free one (tests)
    serve(sock, pinned)
    return 0  # pragma: no cover - serve() never returns


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
