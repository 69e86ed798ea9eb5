"""The Python code Jinja2 compiles orch's templates to, with two changes that make a big report.html as fast
as the f-strings it replaced (bench `reports`):

- a printed value (`{{ x }}`) under autoescape goes through orch.report.templates.environment.html_text (escaped text, a
  str) instead of markupsafe.escape (the same text wrapped in a Markup, three quarters of the page's time);
- `x.name` is Python's attribute access, not Jinja's `environment.getattr` (a method call that falls back
  to `x["name"]` and to an Undefined): in orch's templates an attribute that is not there is an
  AttributeError at once (write `d["key"]` for a dict's key).

Imported only when a template is first rendered (Jinja2 with it)."""

from __future__ import annotations

from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame


class OrchCode(CodeGenerator):
    """Jinja2's code generator (Environment.code_generator_class) with the two changes above."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        self.writeline("from orch.report.templates.environment import html_text")
        super().visit_Template(node, frame)

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        # A volatile context (autoescape switched at run time) keeps Jinja's own choice.
        if frame.eval_ctx.volatile or not frame.eval_ctx.autoescape:
            super()._output_child_pre(node, frame, finalize)
            return
        self.write("html_text(")
        if finalize.src is not None:
            self.write(finalize.src)

    def visit_Getattr(self, node: nodes.Getattr, frame: Frame) -> None:
        if self.environment.is_async or not node.attr.isidentifier():
            super().visit_Getattr(node, frame)
            return
        self.write("(")
        self.visit(node.node, frame)
        self.write(f").{node.attr}")
