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
    xml(text)               XML 1.0 text or an attribute value (report.junit.xml)
    sarif(text)             a SARIF message's text, several lines (report.sarif)
    plain(text)             text kept as it is but made visible, several lines (what the others build on; HTML:
                            each value a template prints, before Jinja2's autoescape, orch.report.templates)
    json_line(serialized)   one JSON document as one line of a JSON-lines file, for every line reader
    notice(text, limit)     a notification's text (orch.notify), once for all channels: printable, redacted,
                            defanged (no clickable link, no mention), no markup, one line; then per channel:
    slack(text) discord(text) desktop(text) osc_field(text)

Kept in the base layer (it imports orch.text alone), so that any layer can use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orch.text import shorten

_WHITESPACE = re.compile(r"\s+")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&$])")
"""What can open syntax anywhere in a line: escapes, code, emphasis, links and images, HTML and autolinks, table
cells, strikethrough, entities, math."""
_LINE_START = re.compile(r"^(\d*)([#>+\-=]|(?<=\d)[.)])")
"""What opens syntax only at a line's start: a heading, quote, list item (`-`, `+`, `1.`), setext underline."""
_MENTION = re.compile(r"@(?=\w)")
_BACKTICKS = re.compile(r"`+")
_SARIF_SYNTAX = re.compile(r"[\\\[\]]")
"""What a SARIF message reads as syntax: an embedded link's brackets `[text](target)`, and the escaping backslash."""
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
    return line if limit is None else shorten(line, limit)


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


def xml(text: object) -> str:
    """What XML 1.0 can hold (no control character but line breaks and tabs, no surrogate, no U+FFFE/U+FFFF) and
    shows as it is; ElementTree then escapes `& < >` and quotes."""
    return plain(text)


def sarif(text: object) -> str:
    """A SARIF message's text (report.sarif; GitHub code scanning shows it): made visible as `plain` does, and
    with no embedded link (SARIF 2.1.0, 3.11.6: `[text](target)` in a message is one): every `\\`, `[` and `]`
    escaped with a backslash, which SARIF then shows as the character itself."""
    return _SARIF_SYNTAX.sub(lambda m: "\\" + m.group(), plain(text))


def json_line(serialized: str) -> str:
    """One JSON document (already serialized, so with no raw line break of JSON's own) safe as one line of a
    JSON-lines file for every reader: the three line breaks JSON leaves raw inside strings (U+0085, U+2028,
    U+2029), which Python's `str.splitlines` splits on, written as `\\u` escapes (the same string to a parser)."""
    if serialized.isascii():
        return serialized
    for char, escaped in _LINE_ENDS.items():
        serialized = serialized.replace(char, escaped)
    return serialized


# --- notifications (orch.notify): one safe text for every channel, then each channel's own markup ------------
REDACTED = "[redacted]"
MAX_INPUT = 8192  # characters looked at: a worker's field is cut to 4000 by the hook writer already

_KEYS = re.compile(
    "|".join(
        [
            r"orch-[A-Za-z0-9._-]+-w\d+-[0-9a-f]{32}",  # orch's worker tokens (orch.gateway.tokens.mint)
            r"sk-(?:ant-)?[A-Za-z0-9_-]{16,}",  # Anthropic, OpenAI
            r"AIza[0-9A-Za-z_-]{30,}",  # Google
            r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",  # GitHub
            r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
            r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
            r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}",  # JWTs
            r"\b[0-9a-fA-F]{32,}\b",  # long hex
            # long strings mixing upper case, lower case and digits (base64 or urlsafe keys)
            r"(?=[A-Za-z0-9_+/-]*[0-9])(?=[A-Za-z0-9_+/-]*[a-z])(?=[A-Za-z0-9_+/-]*[A-Z])[A-Za-z0-9_+/-]{24,}={0,2}",
        ]
    )
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)([^\s'\"]{6,})")
_LABELLED = re.compile(
    r"(?i)\b(authorization|token|api[_-]?key|apikey|secret|password|passwd|private[_-]?key)"
    r"(['\"]?\s*[:=]\s*['\"]?)([^\s'\"]{6,})"
)
_QUERY = re.compile(r"(?i)([?&](?:t|token|key|sig|signature|access_token|auth)=)[^&\s#]+")
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,15}):/+")
_WWW = re.compile(r"(?i)\bwww\.")
_HOST_PATH = re.compile(r"(?i)\b((?:[a-z0-9-]+\.)+[a-z]{2,63})(?=[/:])")


def printable(text: str) -> str:
    """Every character that is not printable (controls, escapes, C1, format characters) as a space."""
    return "".join(c if c.isprintable() else " " for c in text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret and everything shaped like a credential replaced by [redacted]."""
    for secret in sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    for labelled in (_BEARER, _LABELLED):
        text = labelled.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _KEYS.sub(REDACTED, text)


def defang(text: str) -> str:
    """Links no chat or terminal makes clickable, and no mention that pings anyone."""
    text = _SCHEME.sub(lambda m: m.group(1) + "[:]//", text)
    text = _WWW.sub(lambda m: m.group(0)[:-1] + "[.]", text)
    text = _HOST_PATH.sub(lambda m: m.group(1).replace(".", "[.]"), text)
    return text.replace("@", "＠")


def unmarked(text: str) -> str:
    """No markup of any medium: angle brackets (HTML, Slack's `<!channel>` and `<url|label>`) become guillemets,
    and a Markdown link's `](` is broken apart."""
    return text.replace("<", "‹").replace(">", "›").replace("](", "] (")


def notice(text: object, limit: int, secrets: Iterable[str] = ()) -> str:
    """Worker-written text as every notification channel may show it (orch.notify): printable, redacted, defanged,
    one line, cut; each channel's function below then escapes its own markup.

    Unlike the other media, a control character becomes a space here, not its visible escape: redaction reads the
    text next, and a visible `\\x1b` would glue letters to a credential (`Bearer\\x1b<token>`, `\\x1b<hex>`), which
    its patterns then miss, where a space leaves the credential a word of its own."""
    raw = printable(str(text)[:MAX_INPUT])
    return shorten(_WHITESPACE.sub(" ", unmarked(defang(redact(raw, secrets)))).strip(), limit)


def slack(text: str) -> str:
    """For Slack's `text`: its three control characters escaped (`<!channel>`, `<url|label>` become text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_DISCORD_MARKUP = re.compile(r"([\\*_~`|>#\[\]()<:-])")


def discord(text: str) -> str:
    """For Discord's `content`: every Markdown character backslash-escaped (no masked link, no heading)."""
    return _DISCORD_MARKUP.sub(r"\\\1", text)


def desktop(text: str) -> str:
    """For a desktop notification's body, which notification servers read as a subset of HTML."""
    return slack(text).replace('"', "&quot;").replace("'", "&#39;")


def osc_field(text: str) -> str:
    """For one field of an OSC 9 / OSC 777 sequence: printable only (no BEL or ST ends it early), no `;`
    (OSC 777's field separator), and never a leading number (ConEmu reads `OSC 9;4;...` as a command)."""
    field = printable(text).replace(";", ",")
    return f"orch: {field}" if field[:1].isdigit() else field
