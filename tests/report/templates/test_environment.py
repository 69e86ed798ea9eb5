"""orch/report/templates/environment.py: a printed value is escaped by Jinja2's own escape in every way a
template can print one, orch's own Markup goes in as it is, and a misspelt name is an error."""

from __future__ import annotations

import jinja2
import pytest
from markupsafe import Markup, escape

from orch.report.templates.environment import asset, environment

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

EVIL = """<script>alert("x")</script><img src=x onerror='alert(1)'> ' " &amp;"""
ESCAPED = str(escape(EVIL))


class Html:
    def __html__(self) -> str:
        return "<i>own</i>"


def page(source: str, **context: object) -> str:
    return environment().from_string(source).render(**context)


def test_printed_values_are_escaped_once_in_every_place_a_template_prints() -> None:
    assert page("<p title='{{ x }}'>{{ x }}</p>", x=EVIL) == f"<p title='{ESCAPED}'>{ESCAPED}</p>"
    assert page("{% for y in xs %}{{ y }}{% endfor %}", xs=[EVIL, EVIL]) == ESCAPED * 2
    assert page("{% set s %}<b>{{ x }}</b>{% endset %}{{ s }}", x=EVIL) == f"<b>{ESCAPED}</b>"
    assert page("{% macro m(y) %}<b>{{ y }}</b>{% endmacro %}{{ m(x) }}", x=EVIL) == f"<b>{ESCAPED}</b>"
    assert page("{{ x|join(', ') }}", x=[EVIL, "a"]) == f"{ESCAPED}, a"
    assert page("{{ 'W%s'|format(x) }}", x=EVIL) == f"W{ESCAPED}"
    assert page("{{ x }} {{ n }} {{ h }}", x=type("Text", (str,), {})(EVIL), n=3, h=Html()) == f"{ESCAPED} 3 <i>own</i>"
    assert page("{{ x }}", x=Markup("<svg></svg>")) == "<svg></svg>"  # a chart goes in as it is
    assert page("{% autoescape false %}{{ x }}{% endautoescape %}", x="<b>") == "<b>"


def test_a_misspelt_name_or_attribute_is_an_error() -> None:
    for source in ("{{ nope }}", "{{ nope.name }}", "{{ x.nope }}"):
        with pytest.raises(jinja2.UndefinedError):
            page(source, x=Html())
    assert page("{{ d['k'] }} {{ d.items()|list|length }}", d={"k": EVIL}) == f"{ESCAPED} 1"


def test_an_asset_is_orchs_own_file_as_it_is() -> None:
    css = asset("report/report.css")
    assert isinstance(css, Markup) and page("{{ asset('report/report.css') }}") == str(css)
