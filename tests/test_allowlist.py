"""The egress allowlist's entries (orch.allowlist), one meaning for a container's firewall and a local proxy."""

from __future__ import annotations

import pytest

from orch.allowlist import allows, local_allowlist, local_entry, normalize_entry, public


@pytest.mark.parametrize(
    ("entry", "expected"),
    [("pypi.org", "pypi.org:443"), ("PyPI.org.", "pypi.org:443"), ("git.example:8443", "git.example:8443"),
     ("https://files.example/simple", "files.example:443")],
)  # fmt: skip
def test_a_local_entry_is_a_name_and_a_port(entry: str, expected: str) -> None:
    assert local_entry(entry) == expected


@pytest.mark.parametrize("entry", ["10.0.0.1", "10.0.0.0/8", "::1", "[::1]:443", "", "a b", "pypi.org:x"])
def test_a_local_entry_is_never_an_address(entry: str) -> None:
    with pytest.raises(ValueError):
        local_entry(entry)


def test_a_name_matches_itself_exactly_as_the_container_lists_it() -> None:
    listed = local_allowlist({"ORCH_DEFAULT_ALLOW": ""}, ["pypi.org", "git.example:8443"])
    assert listed == ["pypi.org:443", "git.example:8443"]
    assert allows(listed, "PYPI.org.", 443) and allows(listed, "git.example", 8443)
    assert not allows(listed, "pypi.org", 80) and not allows(listed, "evil.pypi.org", 443)
    assert not allows(listed, "org", 443) and not allows(listed, "git.example", 443)
    assert normalize_entry("pypi.org:8443") == "pypi.org"  # the container's: the host alone


def test_the_default_hosts_are_the_containers() -> None:
    assert "pypi.org:443" in local_allowlist({}, []) and "files.pythonhosted.org:443" in local_allowlist({}, [])


@pytest.mark.parametrize(
    ("address", "ok"),
    [("93.184.216.34", True), ("2606:4700::1111", True), ("127.0.0.1", False), ("10.1.2.3", False),
     ("192.168.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False), ("::1", False),
     ("fe80::1%eth0", False), ("::ffff:127.0.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
     ("fc00::1", False), ("nonsense", False), ("64:ff9b::a00:1", False), ("64:ff9b::7f00:1", False),
     ("2002:7f00:1::1", False), ("::127.0.0.1", False), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False)],
)  # fmt: skip
def test_only_a_global_address_is_reached(address: str, ok: bool) -> None:
    assert public(address) is ok


@pytest.mark.parametrize("bad", ["", "bad host", "a;b", "$(x)", "host`x`"])
def test_allow_entries_are_checked(bad: str) -> None:
    with pytest.raises(ValueError):
        normalize_entry(bad)
