"""Whether a shell call ran a command, read with a real bash grammar (tree-sitter-bash).

A verifier cites a command it ran; the controller looks for it among the shell calls its model made (the
gateway's ledger). A cited command counts as run by a call when it is the whole call, or a part of it that
the shell runs as a command: between the call's start or end and its control operators (`;`, `&&`, `||`,
`|`, `&`, a newline, `(`/`)`, `$(`, `if`/`then`/`do`/...), optionally followed by a redirection. Text that
only appears inside another command (an argument to `echo`, a quoted string, a heredoc's body, a comment)
is not a command the call ran. A call or a citation bash could not parse matches only as the whole call,
verbatim.

Both sides are compared as the grammar's tokens, so spacing and line breaks do not matter and a misparse
of the grammar (it attaches `cmd 2>&1 | x` after `&&` to the wrong node) does not either.

What this cannot know: whether a branch ran (`false && cmd`, `if false; then cmd; fi`). A part of a call
has no exit code of its own either, so its cited exit code is never checked (findings.exit_code_problem).
"""

from __future__ import annotations

from functools import cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

Token = tuple[str, str]
"""(the grammar's node type, or `op` for its operators and keywords; the token's text)."""

SEPARATORS = frozenset(
    {";", "&&", "||", "|", "|&", "&", ";;", "(", ")", "{", "}", "$(", "`", "<(", ">(", "!"}
    | {"if", "then", "elif", "else", "fi", "do", "done", "while", "until", "case", "esac"}
)
"""Operators and keywords around which a command of its own may start or end."""
REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<<", "<<-", "<<<"})
"""A command may end where its redirection starts (`cmd 2>&1`: `cmd` ran)."""
OPAQUE = frozenset({"heredoc_body", "raw_string", "ansi_c_string"})
"""Nodes taken as one token: nothing inside them runs as a command of the line (strictly: an unquoted
heredoc's `$(cmd)` does run, and is not counted)."""
NEWLINE = ("op", ";")
"""A line break between two commands separates them as `;` does."""


@cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def tokens(command: str) -> list[Token] | None:
    """The grammar's tokens of a command line, comments left out; None when bash could not parse it."""
    source = command.encode()
    tree = _parser().parse(source)
    if tree.root_node.has_error:
        return None
    out: list[Token] = []
    end = 0

    def emit(node: Node, token: Token) -> None:
        nonlocal end
        gap = source[end : node.start_byte]
        if out and b"\n" in gap.replace(b"\\\n", b"") and not _starts(out[-1]):
            out.append(NEWLINE)
        out.append(token)
        end = node.end_byte

    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            continue
        if node.child_count == 0 or node.type in OPAQUE:
            text = source[node.start_byte : node.end_byte].decode(errors="replace")
            emit(node, (node.type if node.is_named else "op", text))
        else:
            stack.extend(reversed(node.children))
    return out


def _starts(token: Token) -> bool:
    return token[0] == "op" and token[1] in SEPARATORS


def _ends(token: Token) -> bool:
    kind, text = token
    return (kind == "op" and (text in SEPARATORS or text in REDIRECTS)) or kind == "file_descriptor"


def ran(command: str, call: str) -> bool:
    """Whether shell call `call` ran `command`: the whole call, or a command of it (see above)."""
    cited, line = tokens(command), tokens(call)
    if not cited or line is None:
        return command.strip() == call.strip()
    n = len(cited)
    for i in range(len(line) - n + 1):
        if line[i : i + n] != cited:
            continue
        if (i == 0 or _starts(line[i - 1])) and (i + n == len(line) or _ends(line[i + n])):
            return True
    return False


def joinable(line: str) -> bool:
    """Whether a line of a script is a whole command that `;` may follow: it parses alone, holds no comment
    (which would swallow what is joined after it) and no heredoc (whose body would be on later lines), and
    does not end in `&` or `;`."""
    tree = _parser().parse(line.encode())
    if tree.root_node.has_error or line.rstrip().endswith(("&", ";")):
        return False
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in ("comment", "heredoc_redirect", "heredoc_body"):
            return False
        stack.extend(node.children)
    return True


def heredocs(command: str) -> list[str]:
    """The bodies of a shell line's here-documents: what `cat > f <<'EOF'` ... `EOF` writes (the text as the
    line has it: an unquoted heredoc's `$x` is not expanded)."""
    if "<<" not in command:
        return []
    source = command.encode()
    stack: list[Node] = [_parser().parse(source).root_node]
    bodies = []
    while stack:
        node = stack.pop()
        if node.type == "heredoc_body":
            bodies.append(source[node.start_byte : node.end_byte].decode(errors="replace"))
            continue
        stack.extend(node.children)
    return bodies
