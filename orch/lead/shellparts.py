"""Which commands a shell command line executes, read with a real bash grammar (tree-sitter-bash).

A verifier cites a command it ran; the controller looks for it among the shell calls its model made (the
gateway's ledger). A cited command counts as run by a call when it is the whole call, or one of the
commands the call's shell executes: a part of a `;`/`&&`/`||` list, a stage of a pipeline, a subshell's
body, an `if`'s condition, a command with its redirections. Text that only appears inside another
command (an argument to `echo`, a quoted string, a heredoc's body, a comment) is not a command the call
ran. A line bash could not parse runs nothing but itself.

What this cannot know: whether a branch ran (`false && cmd`, `if false; then cmd; fi`). A part of a call
has no exit code of its own either, so its cited exit code is never checked (findings.exit_code_problem).
"""

from __future__ import annotations

from functools import cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

STATEMENTS = frozenset(
    {
        "command",
        "pipeline",
        "list",
        "redirected_statement",
        "subshell",
        "compound_statement",
        "negated_command",
        "if_statement",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "test_command",
    }
)
"""Node types that are something the shell executes."""
TEXT = frozenset({"raw_string", "ansi_c_string", "heredoc_body", "comment", "word"})
"""Node types whose inside is text, never a command the line runs (strictly: an unquoted heredoc's `$(cmd)`
does run, and is not counted). A `"..."` string is walked: its `$(cmd)` runs."""


@cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def squash_command(command: str) -> str:
    """A command with its runs of whitespace made one space: how it is compared."""
    return " ".join(command.split())


def executed_parts(line: str) -> set[str]:
    """The commands `line` executes, each whitespace-squashed; the whole line always among them."""
    parts = {squash_command(line)}
    source = line.encode()
    tree = _parser().parse(source)
    if tree.root_node.has_error:
        return parts
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in STATEMENTS:
            parts.add(squash_command(source[node.start_byte : node.end_byte].decode(errors="replace")))
        if node.type not in TEXT:
            stack.extend(node.named_children)
    return parts
