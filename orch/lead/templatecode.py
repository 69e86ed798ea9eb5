"""The Python code Jinja2 compiles orch's templates to, with one change: a printed value (`{{ x }}`) under
autoescape goes through orch.lead.templates.html_text (escaped text, a str) instead of markupsafe.escape (the
same text wrapped in a Markup). Imported only when a template is first rendered (Jinja2 with it)."""

from __future__ import annotations

from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame


class EscapeToText(CodeGenerator):
    """Jinja2's code generator (Environment.code_generator_class), escaping printed values to str."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        self.writeline("from orch.lead.templates import html_text")
        super().visit_Template(node, frame)

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        # A volatile context (autoescape switched at run time) keeps Jinja's own choice.
        if frame.eval_ctx.volatile or not frame.eval_ctx.autoescape:
            super()._output_child_pre(node, frame, finalize)
            return
        self.write("html_text(")
        if finalize.src is not None:
            self.write(finalize.src)
