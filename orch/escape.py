"""Worker text made inert for each medium it is shown in: one function per medium, which every output of orch
uses for what a worker wrote (claims, reasons, file names, commands, bus lines, its state's detail).

A hostile worker chooses that text. Whatever it holds, each function's result stays well-formed in its medium
and only shows the text: it opens no line, heading, table cell, list, link, mention, tag or code span of its
own, carries no terminal escape, and cannot reorder what is around it (bidi controls). Characters that act
rather than show (controls, bidi and zero-width format characters, line separators: what `str.isprintable`
calls non-printable) are written as visible escapes (`\\x1b`, `\\u202e`); whitespace runs become one space where
the medium is one line.

    terminal(text, limit)   a line orch prints: `orch run`'s commentary, `orch status`, `orch read`'s own lines
    terminal_text(text)     a worker's screen or transcript, several lines (`orch read`)
    markdown(text)          inline Markdown (report.md, the CI job summary, notifications): prose or a table cell
    markdown_code(text)     an inline code span in Markdown
    html(text)              HTML text or an attribute value (report.html, `orch watch --web`)
    xml(text)               XML 1.0 text or an attribute value (report.junit.xml)
    sarif(text)             a SARIF message's text, several lines (report.sarif)
    plain(text)             text kept as it is but made visible, several lines (what the others build on)
    json_line(serialized)   one JSON document as one line of a JSON-lines file, for every line reader

Kept in the base layer, with no import of orch, so that any layer (and a notification channel) can use them.
"""

from __future__ import annotations

import re
from html import escape as _html_escape

ELLIPSIS = "…"
_WHITESPACE = re.compile(r"\s+")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&$])")
"""What can open syntax anywhere in a line: escapes, code, emphasis, links and images, HTML and autolinks, table
cells, strikethrough, entities, math."""
_LINE_START = re.compile(r"^(\d*)([#>+\-=]|(?<=\d)[.)])")
"""What opens syntax only at a line's start: a heading, quote, list item (`-`, `+`, `1.`), setext underline."""
_MENTION = re.compile(r"@(?=\w)")
_BACKTICKS = re.compile(r"`+")
_SARIF_LINK = re.compile(r"(\\*)\](?=\()")
"""The `]` of an embedded link `[text](target)`, with the backslashes before it."""
_LINE_ENDS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
ZERO_WIDTH_SPACE = "\u200b"
"""Between `@` and a name, so Markdown renderers (GitHub's job summary) make no mention of it."""


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def plain(text: object, keep: str = "\n\t") -> str:
    """`text` with every character that acts rather than shows written as a visible escape (`\\x1b`, `\\u202e`),
    but those in `keep` (line breaks and tabs, by default). Printable text comes back as it is."""
    value = str(text)
    if value.isascii() and value.isprintable():
        return value
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in value)


def one_line(text: object) -> str:
    """`text` as one line: each run of whitespace (line breaks included) one space, the rest made visible."""
    return plain(_WHITESPACE.sub(" ", str(text)).strip(), keep="")


def terminal(text: object, limit: int | None = None) -> str:
    """One line for a terminal: no escape sequence, no control or bidi character (each shown as its escape), cut
    to `limit` characters ("…" marking a cut)."""
    line = one_line(text)
    return line if limit is None or len(line) <= limit else line[: limit - 1].rstrip() + ELLIPSIS


def terminal_text(text: object) -> str:
    """Several lines for a terminal (a screen, a transcript): line breaks and tabs kept, every other control
    (escape sequences' ESC included) and bidi character shown as its escape."""
    return plain(str(text).replace("\r\n", "\n"))


def markdown(text: object) -> str:
    """Inline Markdown that renders as exactly `text`, on one line: every character Markdown (CommonMark, GitHub's
    tables, autolinks and mentions) could read as syntax is backslash-escaped, so it opens no heading, list, quote,
    table cell, emphasis, link, image, HTML tag or entity, and `@name` mentions no one."""
    escaped = _LINE_START.sub(r"\1\\\2", _MARKDOWN_SPECIAL.sub(r"\\\1", one_line(text)))
    return _MENTION.sub("@" + ZERO_WIDTH_SPACE, escaped)


def markdown_code(text: object, cell: bool = False) -> str:
    """An inline code span showing `text` on one line: fenced with more backticks than any run inside it. In a
    table `cell`, its `|` is escaped too (GitHub's tables split cells on a `|` even inside code)."""
    line = one_line(text)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") or not line.strip() else ""
    body = line.replace("|", "\\|") if cell else line
    return f"{fence}{pad}{body}{pad}{fence}"


def html(text: object) -> str:
    """HTML text or a quoted attribute value: `& < > " '` as character references, and every control, bidi or
    zero-width character shown as its escape (it could reorder the page around it)."""
    return _html_escape(plain(text), quote=True)


def xml(text: object) -> str:
    """What XML 1.0 can hold (no control character but line breaks and tabs, no surrogate, no U+FFFE/U+FFFF) and
    shows as it is; ElementTree then escapes `& < >` and quotes."""
    return plain(text)


def sarif(text: object) -> str:
    """A SARIF message's text (report.sarif; GitHub code scanning shows it): made visible as `plain` does, and
    with no embedded link (SARIF reads `[text](target)` in a message as one): such a `]` is escaped, and the
    backslashes before it too."""
    return _SARIF_LINK.sub(lambda m: m.group(1) * 2 + "\\]", plain(text))


def json_line(serialized: str) -> str:
    """One JSON document (already serialized, so with no raw line break of JSON's own) safe as one line of a
    JSON-lines file for every reader: the three line breaks JSON leaves raw inside strings (U+0085, U+2028,
    U+2029), which Python's `str.splitlines` splits on, written as `\\u` escapes (the same string to a parser)."""
    if serialized.isascii():
        return serialized
    for char, escaped in _LINE_ENDS.items():
        serialized = serialized.replace(char, escaped)
    return serialized
