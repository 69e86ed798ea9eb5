"""orch/report/templates/codegen.py: orch's templates compile to code that prints through html_text and reads
attributes directly, and a misspelt name or attribute is still an error."""

from __future__ import annotations

from importlib import resources

import jinja2
import pytest
from markupsafe import escape

from orch.report.templates.environment import environment

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

EVIL = """<script>alert("x")</script>"""


class Html:
    def __html__(self) -> str:
        return "<i>own</i>"


def page(source: str, **context: object) -> str:
    return environment().from_string(source).render(**context)


def test_a_misspelt_name_is_still_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        page("{{ nope }}")
    with pytest.raises(jinja2.UndefinedError):
        page("{{ nope.name }}")
    with pytest.raises(AttributeError):  # read as Python reads it (templatecode): no fallback to x["nope"]
        page("{{ x.nope }}", x=Html())
    assert page("{{ d['k'] }} {{ d.items()|list|length }}", d={"k": EVIL}) == f"{escape(EVIL)} 1"


def test_every_template_prints_through_html_text() -> None:
    """A Jinja2 that renamed the hook templatecode overrides would leave pages right but slow: caught here."""
    env = environment()
    for name in ("report/report.html", "watch/index.html", "charts/timeline.svg", "charts/cost.svg"):
        source = (resources.files("orch") / "data" / name).read_text()
        code = env.compile(source, name, raw=True)
        assert "html_text(" in code and "yield escape(" not in code and "environment.getattr(" not in code, name
