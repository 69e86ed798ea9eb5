"""The egress allowlist's entries, one meaning in both modes: what `--allow` takes and how a name is matched.

A run's container (orch.container.egress) resolves the listed names once, at boot, and lets their addresses
through its firewall; a local strict run's relay (orch.backends.local.egressproxy) checks each CONNECT a worker asks
for against the same names. A name matches only itself, exactly (case and a trailing dot aside): no wildcard,
no subdomain. Standard library and orch.settings only: the container's init imports it as root.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from orch.settings.user import DEFAULT_ALLOW

# The npm and PyPI registries and GitHub: what workers need to install packages and fetch code.
DEFAULT_HOSTS = (
    "registry.npmjs.org",
    "pypi.org",
    "files.pythonhosted.org",
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
)
HTTPS_PORT = 443
"""A local entry without a port allows this one (the proxy is for CONNECT: TLS)."""
_BAD = " /\\;$`'\""


def default_hosts(env: Mapping[str, str]) -> list[str]:
    if DEFAULT_ALLOW.is_set(env):  # set but empty: no default hosts
        return DEFAULT_ALLOW.get(env)
    return list(DEFAULT_HOSTS)


def normalize_entry(entry: str) -> str:
    """`--allow` takes a host name, an IP or a CIDR; a URL or host:port is cut down to its host."""
    text = entry.strip()
    if not text:
        raise ValueError("empty --allow entry")
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        pass
    host = urlsplit(text if "//" in text else f"//{text}").hostname
    if not host or any(c in host for c in _BAD):
        raise ValueError(f"not a host name, IP or CIDR: {entry!r}")
    return host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def name_of(host: str) -> str:
    """A host name as the allowlist compares it: lower case, without a trailing dot."""
    return host.strip().rstrip(".").lower()


def local_entry(entry: str) -> str:
    """A local run's `--allow HOST[:PORT]` as `host:port` (443 when none is given). Locally only names are
    taken: the relay resolves each name itself and refuses IP literals, so an IP or CIDR is a ValueError."""
    host = normalize_entry(entry)
    if is_ip(host) or "/" in host:
        raise ValueError(f"locally --allow takes host names, not an IP or CIDR: {entry!r}")
    text = entry.strip()
    try:
        port = urlsplit(text if "//" in text else f"//{text}").port
    except ValueError:
        raise ValueError(f"not a port in --allow {entry!r}") from None
    return f"{name_of(host)}:{port or HTTPS_PORT}"


def local_allowlist(env: Mapping[str, str], extra: Iterable[str]) -> list[str]:
    """A local run's allowlist (`host:port` entries): the default hosts (registries and GitHub, as the
    container's), then `extra`. The model API is not on it: the workers reach the model through the gateway."""
    return list(dict.fromkeys(local_entry(e) for e in [*default_hosts(env), *extra]))


def allows(allowlist: Iterable[str], host: str, port: int) -> bool:
    """Whether `host:port` is on a local allowlist: the name exactly, the port exactly."""
    return f"{name_of(host)}:{port}" in set(allowlist)


def public(address: str) -> bool:
    """Whether an address a listed name resolved to may be reached: a global unicast address only, never
    loopback, private, link-local, shared, multicast or reserved (the host's own services, the LAN)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif any(ip in net for net in _EMBEDS_IPV4):  # an IPv4 address inside: a gateway may reach the LAN by it
            return False
    return ip.is_global and not ip.is_multicast


# IPv6 ranges that carry an IPv4 address a translator or relay may forward to (NAT64, 6to4, Teredo, the old
# IPv4-compatible form): never taken, whatever the IPv4 address inside.
_EMBEDS_IPV4 = tuple(
    ipaddress.IPv6Network(net) for net in ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "::/96")
)
