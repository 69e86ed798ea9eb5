"""Jinja2 for orch's HTML and SVG (report.html, `orch watch --web`'s page, the charts): templates in orch/data/,
autoescape on for every template, so whatever a worker wrote (a claim, a reason, a file name, a job id) lands as
text, never as markup: each printed value is made visible (`visible`: no control or bidi character acts), then
goes through Jinja2's own escape (markupsafe's, with its C speedups). Only orch's own files (`asset`) and the
charts (rendered here too) go in as they are."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from orch import escape

if TYPE_CHECKING:
    import jinja2


def asset(name: str) -> Markup:
    """A file of orch/data (a stylesheet, a script), inlined as it is: orch's own, never a worker's."""
    return Markup((resources.files("orch") / "data" / name).read_text())


def visible(value: object) -> object:
    """Jinja2's `finalize`, before its autoescape: a printed value made visible (orch.escape.plain), so a bidi or
    control character a worker wrote cannot reorder the page. Markup (a chart, an asset, a macro's output) and
    numbers go in as they are."""
    if hasattr(value, "__html__") or isinstance(value, int | float):
        return value
    return escape.plain(value)  # a StrictUndefined raises here, as it would when printed


@cache
def environment() -> jinja2.Environment:
    import jinja2  # here: every `orch` command imports the report's module, few render a page

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("orch", "data"),
        autoescape=True,
        finalize=visible,
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals["asset"] = asset
    return env


def render(name: str, **context: Any) -> str:
    """orch/data/NAME rendered with `context`."""
    return environment().get_template(name).render(**context)
