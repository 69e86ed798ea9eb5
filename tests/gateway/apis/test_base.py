"""What the model APIs share (orch/gateway/apis/base.py): token counts a worker's upstream cannot inflate with
garbage, OpenAI's cached input kept apart, the user's credential presented (or a worker's own auth passed
through only where the scheme says), and replay's rewrite of every string in a JSON value."""

from __future__ import annotations

from typing import Any

import pytest

from orch.gateway.apis.base import CallKind, ProtocolBase, cached_apart, count, rewrite_json, rewrite_value
from orch.gateway.modeldir import Scheme, Tokens

pytestmark = pytest.mark.pure  # starts nothing


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), (0, 0), (-5, 0), (True, 0), (2.5, 0), ("7", 0), (None, 0), ([1], 0)],
    ids=["int", "zero", "negative", "bool", "float", "string", "none", "list"],
)
def test_count_takes_only_non_negative_ints(value: object, expected: int) -> None:
    assert count(value) == expected


CACHED: dict[str, tuple[object, Tokens | None]] = {
    "not-a-dict": ("usage", None),
    "no-details": ({"input_tokens": 10, "output_tokens": 2}, Tokens(input_tokens=10, output_tokens=2)),
    "cached-apart": (
        {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 2},
        Tokens(input_tokens=6, output_tokens=2, cache_read_input_tokens=4),
    ),
    # An upstream (or a lying proxy) claiming more cached than total input: never negative input.
    "more-cached-than-total": (
        {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 9}, "output_tokens": 1},
        Tokens(input_tokens=0, output_tokens=1, cache_read_input_tokens=3),
    ),
    "garbage-counts": (
        {"input_tokens": "lots", "input_tokens_details": "x", "output_tokens": -1},
        Tokens(input_tokens=0, output_tokens=0, cache_read_input_tokens=0),
    ),
}


@pytest.mark.parametrize(("usage", "expected"), CACHED.values(), ids=CACHED.keys())
def test_cached_input_is_kept_apart(usage: object, expected: Tokens | None) -> None:
    assert cached_apart(usage, "input_tokens", "output_tokens") == expected


class _Api(ProtocolBase):
    auth_headers = frozenset({"authorization"})

    def kind(self, method: str, path: str) -> CallKind:
        return "messages" if path == "/v1/messages" else "other"


def test_the_user_credential_is_presented_and_a_workers_auth_passed_only_under_passthrough() -> None:
    api, incoming = _Api(), {"authorization": "Bearer worker-token", "x-other": "1"}
    assert api.upstream_auth(Scheme.BEARER, "sk-user", incoming) == {"authorization": "Bearer sk-user"}
    assert api.upstream_auth(Scheme.NONE, "sk-user", incoming) == {}
    assert api.upstream_auth(Scheme.PASSTHROUGH, "", incoming) == {"authorization": "Bearer worker-token"}
    assert api.billable("POST", "/v1/messages") and not api.billable("GET", "/v1/models")
    assert api.model({"model": "m"}) == "m" and api.model({"model": ["m"]}) is None
    assert api.upstream_body({}, b"raw") == b"raw"


def test_rewrite_reaches_every_string_and_reports_no_change_as_none() -> None:
    value: Any = {"a": ["/old/x", {"b": "/old/y"}], "n": 1}
    assert rewrite_value(value, lambda s: s.replace("/old", "/new")) == {"a": ["/new/x", {"b": "/new/y"}], "n": 1}
    assert rewrite_json('{"p": "/old/x"}', lambda s: s.replace("/old", "/new")) == '{"p": "/new/x"}'
    assert rewrite_json('{"p": "/else"}', lambda s: s.replace("/old", "/new")) is None  # nothing changed
    assert rewrite_json("not json", str.upper) is None
