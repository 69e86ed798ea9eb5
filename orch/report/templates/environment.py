"""Jinja2 for orch's HTML and SVG (report.html, `orch watch --web`'s page, the charts): templates in orch/data/,
autoescape on for every template, so whatever a worker wrote (a claim, a reason, a file name, a job id) lands as
text, never as markup. Only orch's own files (`asset`) and the charts (rendered here too) go in as they are."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import markupsafe
from markupsafe import Markup

from orch import escape

if TYPE_CHECKING:
    import jinja2


def _escape_native(text: str) -> str:
    """markupsafe's own pure-Python escape, byte for byte (its fallback where the C speedups are missing)."""
    return (
        text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;").replace('"', "&#34;")
    )


# markupsafe.escape's C core, which returns a str (3.x; pinned below 4). It is not public, so a markupsafe
# without it falls back to the same escape in Python: the same bytes, about 3x slower per value.
_escape_inner: Callable[[str], str] = getattr(markupsafe, "_escape_inner", _escape_native)


def asset(name: str) -> Markup:
    """A file of orch/data (a stylesheet, a script), inlined as it is: orch's own, never a worker's."""
    return Markup((resources.files("orch") / "data" / name).read_text())


def html_text(value: object) -> str:
    """What markupsafe.escape gives, as a str rather than a Markup, of the value made visible (orch.escape.plain:
    a bidi or control character cannot reorder the page): a value a template prints (`{{ x }}`) is escaped
    here. Jinja's own escape wraps each one in a Markup (a Python-level constructor, a GC-tracked object), which
    was three quarters of a 1,000-finding report.html's time; the printed pieces are only joined into the page
    (or, in a `set` block or macro, joined and then marked safe), so a str does. Markup (a chart, an asset, a
    macro's output) goes in as it is, like markupsafe.escape does."""
    if value.__class__ is str:
        return _escape_inner(escape.plain(value))
    if hasattr(value, "__html__"):
        return str(value.__html__())
    return _escape_inner(escape.plain(str(value)))  # a StrictUndefined raises here, as with markupsafe.escape


@cache
def environment() -> jinja2.Environment:
    import jinja2  # here: every `orch` command imports the report's module, few render a page

    from orch.report.templates.codegen import OrchCode

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("orch", "data"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.code_generator_class = OrchCode
    env.globals["asset"] = asset
    return env


def render(name: str, **context: Any) -> str:
    """orch/data/NAME rendered with `context`."""
    return environment().get_template(name).render(**context)
