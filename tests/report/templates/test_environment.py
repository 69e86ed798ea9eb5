"""orch/report/templates/environment.py: a printed value is escaped to text by html_text (markupsafe's escape
without the Markup it would build), exactly as Jinja's own escape would, in every way a template can print one."""

from __future__ import annotations

import pytest
from markupsafe import Markup, escape

from orch.report.templates import environment as templates
from orch.report.templates.environment import environment, html_text

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

EVIL = """<script>alert("x")</script><img src=x onerror='alert(1)'> ' " &amp;"""
ESCAPED = str(escape(EVIL))


class Html:
    def __html__(self) -> str:
        return "<i>own</i>"


class Text(str):
    """A str subclass (an enum's value may be one): escaped like a str."""


@pytest.mark.parametrize("value", [EVIL, Text(EVIL), 3, 1.5, None, Markup("<b>safe</b>"), Html(), ""])
def test_html_text_is_markupsafes_escape_as_a_str(value: object) -> None:
    got = html_text(value)
    assert type(got) is str and got == str(escape(value))


def test_the_fallback_escape_is_markupsafes_byte_for_byte() -> None:
    """markupsafe's C escape is private: a markupsafe without it gets the same bytes from the fallback."""
    assert templates._escape_native(EVIL) == ESCAPED
    assert templates._escape_inner is not templates._escape_native, "markupsafe's fast escape is not found"


def page(source: str, **context: object) -> str:
    return environment().from_string(source).render(**context)


def test_printed_values_are_escaped_once_in_every_place_a_template_prints() -> None:
    assert page("<p title='{{ x }}'>{{ x }}</p>", x=EVIL) == f"<p title='{ESCAPED}'>{ESCAPED}</p>"
    assert page("{% for y in xs %}{{ y }}{% endfor %}", xs=[EVIL, EVIL]) == ESCAPED * 2
    assert page("{% set s %}<b>{{ x }}</b>{% endset %}{{ s }}", x=EVIL) == f"<b>{ESCAPED}</b>"
    assert page("{% macro m(y) %}<b>{{ y }}</b>{% endmacro %}{{ m(x) }}", x=EVIL) == f"<b>{ESCAPED}</b>"
    assert page("{{ x|join(', ') }}", x=[EVIL, "a"]) == f"{ESCAPED}, a"
    assert page("{{ 'W%s'|format(x) }}", x=EVIL) == f"W{ESCAPED}"
    assert page("{{ x }}", x=Markup("<svg></svg>")) == "<svg></svg>"  # a chart goes in as it is
    assert page("{% autoescape false %}{{ x }}{% endautoescape %}", x="<b>") == "<b>"
