"""orch.notify.escape: a worker's text made safe once (plain), then for each medium."""

from __future__ import annotations

import pytest

from orch.notify import escape
from orch.notify.notice import TEXT_CHARS
from tests.notify.hostile import FAKE_KEY, HOSTILE, carries

pytestmark = pytest.mark.pure


def test_plain_leaves_nothing_hostile_and_fits() -> None:
    text = escape.plain(HOSTILE, TEXT_CHARS)
    assert carries(text) == []
    assert len(text) <= TEXT_CHARS and text.endswith("…")
    assert all(c.isprintable() for c in text)
    assert "＠here" in text and "https[:]//evil[.]example/login" in text  # readable, not clickable


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (f"key={FAKE_KEY}", "key=[redacted]"),
        ("sk-proj-abcdefghijklmnopqrstuv", "[redacted]"),
        ("AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "[redacted]"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123", "[redacted]"),
        ("xoxb-1234567890-abcdefghij", "[redacted]"),
        ("AKIAABCDEFGHIJKLMNOP", "[redacted]"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefgh", "[redacted]"),
        ("orch-my.run-w12-0123456789abcdef0123456789abcdef", "[redacted]"),
        ("Authorization: Bearer abc.def-123", "Authorization: [redacted] [redacted]"),
        ("password = hunter2x", "password = [redacted]"),
        ("GET /?t=abc&run=x", "GET /?t=[redacted]&run=x"),
        ("deadbeefdeadbeefdeadbeefdeadbeef00", "[redacted]"),
        ("Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MA==", "[redacted]"),
    ],
    ids=lambda v: v[:12],
)
def test_what_looks_like_a_credential_is_redacted(given: str, shown: str) -> None:
    assert escape.redact(given) == shown


@pytest.mark.parametrize(
    "kept",
    [
        "python3 -m pytest tests/test_parser_handles_unicode.py -k bad_input",
        "the password field is empty",
        "token expired",
        "git commit -m 'fix the parser'",
        "src/orch/notify/escape.py",
    ],
)
def test_ordinary_text_is_not_redacted(kept: str) -> None:
    assert escape.redact(kept) == kept


def test_a_known_secret_goes_whole_even_when_short_of_a_pattern() -> None:
    assert (
        escape.redact("post to hooks/T000/B000/XXXXsecret now", ["XXXXsecret"])
        == "post to hooks/T000/B000/[redacted] now"
    )
    assert escape.redact("short abc", ["abc"]) == "short abc"  # too short to be a secret: left alone


def test_a_cut_never_leaves_half_a_key() -> None:
    text = escape.plain("x" * 120 + " " + FAKE_KEY, TEXT_CHARS)
    assert FAKE_KEY[:10] not in text


def test_links_and_mentions_are_defanged() -> None:
    assert escape.defang("ftp://host/x mailto:a@b.c www.x.org api.example.com/v1 main.py") == (
        "ftp[:]//host/x mailto:a＠b.c www[.]x.org api[.]example[.]com/v1 main.py"
    )
    assert escape.unmarked("<!channel> <@U1> [a](b)") == "‹!channel› ‹@U1› [a] (b)"


def test_each_medium_escapes_its_markup() -> None:
    assert escape.slack("<b> & <http://x|y>") == "&lt;b&gt; &amp; &lt;http://x|y&gt;"
    assert escape.discord("**x** [a](b) `c` > q # h") == r"\*\*x\*\* \[a\]\(b\) \`c\` \> q \# h"
    assert escape.markup("<a href='x'>\"") == "&lt;a href=&#39;x&#39;&gt;&quot;"


def test_an_osc_field_cannot_end_its_sequence_or_split_it() -> None:
    assert escape.osc_field("a\x07b\x1b\\c;d") == "a b \\c,d"
    assert escape.osc_field("4;1;50") == "orch: 4,1,50"  # ConEmu's OSC 9;4 (progress) is never written
