"""orch/escape.py: each medium's function, on hostile text (tests/report/test_escaping.py throws it through every
output orch writes); the notifications' once-for-all text and each channel's escape (tests/notify/test_bodies.py:
the bodies sent)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from orch import escape
from orch.notify.notice import TEXT_CHARS
from orch.report.templates.environment import environment
from tests.notify.hostile import FAKE_KEY, carries
from tests.notify.hostile import HOSTILE as NOTICE_HOSTILE

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

HOSTILE = (
    "\n# Injected heading\n\n| a | b |\n",
    "`code` ``x`` ```fence",
    "a | b || c",
    "<script>alert(1)</script><img src=x onerror=alert(1)>",
    "\x1b[31mred\x1b[0m\x1b]0;title\x07\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
    "\u202eevil\u202c \u2066isolate\u2069 \u200bzero\u200d \ufeff",
    "@channel @here @octocat/team hi",
    "[click](javascript:alert(1)) ![img](http://x/y.png) <http://x> &amp; &#64;",
    "line\u2028separator\u2029paragraph\x85next",
    "**bold** _em_ ~~gone~~ $x^2$ \\* \\",
    "1. one\n- two\n> quote\n=== \n    indented",
    "x" * 5000,
)
# Hostile text: the snippets above, glued to anything (control, bidi and separator characters weighted in).
ACTING = "\n\r\t\x00\x07\x1b\x7f\x85\x9b\u2028\u2029\u202a\u202e\u2066\u2069\u200b\ufeff"
DANGER = st.sampled_from(list(ACTING) + list("`|*_[]()<>#@&\\!~$=-+."))
TEXT = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20), DANGER), max_size=8).map("".join)


def shows_only(text: str, keep: str = "") -> bool:
    """Every character shows (but those in `keep`): nothing that acts (a control, a bidi or zero-width format
    character, a separator)."""
    return all(c.isprintable() or c in keep for c in text)


@given(TEXT)
def test_terminal_is_one_printable_line(text: str) -> None:
    line = escape.terminal(text, 80)
    assert shows_only(line) and len(line) <= 80


@given(TEXT)
def test_terminal_text_keeps_lines_and_acts_on_nothing(text: str) -> None:
    shown = escape.terminal_text(text)
    assert shows_only(shown, keep="\n\t")
    assert shown.count("\n") == text.replace("\r\n", "\n").count("\n")


def test_visible_escapes_name_the_character() -> None:
    assert escape.terminal("a\x1b[31mb\u202ec") == "a\\x1b[31mb\\u202ec"
    assert escape.plain("tab\tand\nline\x00") == "tab\tand\nline\\x00"
    assert escape.terminal("  spread\n over\tlines  ") == "spread over lines"


MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def inline_tokens(markdown: str) -> list[str]:
    """Every token type a Markdown renderer makes of `markdown`, inline ones included."""
    out = []
    for token in MD.parse(markdown):
        out.append(token.type)
        out += [child.type for child in token.children or []]
    return out


@given(TEXT)
@settings(max_examples=300)
def test_markdown_is_one_paragraph_of_text(text: str) -> None:
    shown = escape.markdown(text)
    assert "\n" not in shown and shows_only(shown.replace("\u200b", ""))
    tokens = inline_tokens(f"before {shown} after")
    assert set(tokens) <= {"paragraph_open", "inline", "text", "paragraph_close", "softbreak"}, tokens
    # The same, alone on a line and in a table cell: no heading, list, quote, rule or extra cell.
    assert set(inline_tokens(shown or "x")) <= {"paragraph_open", "inline", "text", "paragraph_close"}
    table = MD.parse(f"| a | b |\n|---|---|\n| {shown} | z |\n")
    assert sum(1 for t in table if t.type == "td_open") == 2


@given(TEXT)
def test_markdown_renders_the_text_as_written(text: str) -> None:
    rendered = MD.render(escape.markdown(text)).removeprefix("<p>").removesuffix("</p>\n")
    expected = escape.one_line(text)
    unescaped = rendered.replace("\u200b", "").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    assert unescaped.replace("&quot;", '"') == expected


def test_markdown_mentions_no_one() -> None:
    assert escape.markdown("@channel and a@b") == "@\u200bchannel and a@\u200bb"


@given(TEXT)
def test_markdown_code_is_one_code_span(text: str) -> None:
    span = escape.markdown_code(text)
    tokens = inline_tokens(f"see {span} here")
    assert tokens.count("code_inline") == 1 and set(tokens) <= {
        "paragraph_open", "inline", "text", "code_inline", "paragraph_close"
    }  # fmt: skip
    cell = escape.markdown_code(text, cell=True)
    assert sum(1 for t in MD.parse(f"| a | b |\n|---|---|\n| {cell} | z |\n") if t.type == "td_open") == 2


class Tags(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text = ""
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text += data


@given(TEXT)
def test_html_is_text_and_a_whole_attribute(text: str) -> None:
    """A template's printed value (orch.report.templates: `visible`, then Jinja2's autoescape)."""
    shown = environment().from_string('<p title="{{ t }}">{{ t }}</p>').render(t=text)
    page = Tags(shown)
    assert page.tags == ["p"] and page.text == escape.plain(text) and shows_only(page.text, keep="\n\t")


@given(TEXT)
def test_xml_is_always_well_formed(text: str) -> None:
    element = ET.Element("case", {"name": escape.xml(text)})
    element.text = escape.xml(text)
    back = ET.fromstring(ET.tostring(element))
    assert back.get("name") == escape.xml(text) == (back.text or "")


@given(TEXT)
def test_sarif_text_holds_no_embedded_link(text: str) -> None:
    shown = escape.sarif(text)
    assert not re.search(r"(?<!\\)(?:\\\\)*[\[\]]", shown)  # no bracket left unescaped: no link can open
    assert escape.sarif("see [x](http://evil)") == "see \\[x\\](http://evil)"
    assert escape.sarif("a\\b") == "a\\\\b"


@given(TEXT)
def test_a_json_line_stays_one_line_for_every_reader(text: str) -> None:
    line = escape.json_line(json.dumps({"reason": text}, ensure_ascii=False))
    assert len(line.splitlines()) == 1 and json.loads(line) == {"reason": text}


# --- notifications (orch.notify): made safe once, then for each channel ---------------------------------------
def test_a_notice_leaves_nothing_hostile_and_fits() -> None:
    text = escape.notice(NOTICE_HOSTILE, TEXT_CHARS)
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
        "src/orch/notify/send.py",
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


def test_a_control_character_cannot_hide_a_credential_from_a_notice() -> None:
    """A notice turns controls into spaces (the other media show their escapes) so that redaction still sees the
    credential as a word: shown as `\\x1b`, `Bearer\\x1bTOKEN` and `\\x1bHEX` would pass its patterns."""
    for secret, hidden in (("abcdef123456", "Bearer\x1babcdef123456"), ("deadbeef" * 5, "\x1b" + "deadbeef" * 5)):
        assert secret in escape.redact(escape.one_line(hidden)), "a visible escape would have let it through"
        shown = escape.notice(hidden, TEXT_CHARS)
        assert secret not in shown and "[redacted]" in shown, shown


def test_a_cut_never_leaves_half_a_key() -> None:
    text = escape.notice("x" * 120 + " " + FAKE_KEY, TEXT_CHARS)
    assert FAKE_KEY[:10] not in text


def test_links_and_mentions_are_defanged() -> None:
    assert escape.defang("ftp://host/x mailto:a@b.c www.x.org api.example.com/v1 main.py") == (
        "ftp[:]//host/x mailto:a＠b.c www[.]x.org api[.]example[.]com/v1 main.py"
    )
    assert escape.unmarked("<!channel> <@U1> [a](b)") == "‹!channel› ‹@U1› [a] (b)"


def test_each_medium_escapes_its_markup() -> None:
    assert escape.slack("<b> & <http://x|y>") == "&lt;b&gt; &amp; &lt;http://x|y&gt;"
    assert escape.discord("**x** [a](b) `c` > q # h") == r"\*\*x\*\* \[a\]\(b\) \`c\` \> q \# h"
    assert escape.desktop("<a href='x'>\"") == "&lt;a href=&#39;x&#39;&gt;&quot;"


def test_an_osc_field_cannot_end_its_sequence_or_split_it() -> None:
    assert escape.osc_field("a\x07b\x1b\\c;d") == "a b \\c,d"
    assert escape.osc_field("4;1;50") == "orch: 4,1,50"  # ConEmu's OSC 9;4 (progress) is never written
