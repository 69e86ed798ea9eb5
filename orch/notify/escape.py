"""Worker-written text made safe for a person, once for all channels (`plain`) and then per medium.

What a worker waits on (a command, a file, a question) is text a hostile worker controls, and a
notification puts it in front of a person, on a chat whose markup pings people and renders links, on a
terminal that runs escape sequences, on a desktop whose notifications take markup. So `plain`:
- keeps printable characters only (C0 and C1 controls, escapes, bidirectional overrides become spaces);
- redacts what is shaped like a credential: orch's run tokens, API keys of the common providers,
  JWTs, `token=...` and `?t=...` (the web view's token), long mixed-case strings, and every exact value
  given as a known secret (the notifier's credential variables, its own webhook URLs);
- defangs links (`https[:]//`, `www[.]`, `host[.]com/`) so no chat or terminal makes them clickable, and
  mentions (`@here`, `<@U1>`: every `@` becomes a fullwidth `＠`);
- leaves no markup: `<` and `>` become `‹` and `›` (HTML, Slack's `<!channel>` and `<url|label>`), and a
  Markdown link's `](` is broken apart;
- makes it one line and cuts it (after redacting: a cut never leaves half a key in the clear).
Each medium then escapes its own markup: `slack`, `discord`, `markup` (notify-send's body),
`osc_field` (a field of a terminal's OSC sequence).

Kept in this one module so it can merge with issue 30's escaping per output medium.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orch.text import shorten

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
_SPACES = re.compile(r"\s+")


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


def plain(text: object, limit: int, secrets: Iterable[str] = ()) -> str:
    """Worker-written text as every channel may show it: printable, redacted, defanged, one line, cut."""
    raw = printable(str(text)[:MAX_INPUT])
    return shorten(_SPACES.sub(" ", unmarked(defang(redact(raw, secrets)))).strip(), limit)


def slack(text: str) -> str:
    """For Slack's `text`: its three control characters escaped (`<!channel>`, `<url|label>` become text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_DISCORD_MARKUP = re.compile(r"([\\*_~`|>#\[\]()<:-])")


def discord(text: str) -> str:
    """For Discord's `content`: every Markdown character backslash-escaped (no masked link, no heading)."""
    return _DISCORD_MARKUP.sub(r"\\\1", text)


def markup(text: str) -> str:
    """For a desktop notification's body, which notification servers read as a subset of HTML."""
    return slack(text).replace('"', "&quot;").replace("'", "&#39;")


def osc_field(text: str) -> str:
    """For one field of an OSC 9 / OSC 777 sequence: printable only (no BEL or ST ends it early), no `;`
    (OSC 777's field separator), and never a leading number (ConEmu reads `OSC 9;4;...` as a command)."""
    field = printable(text).replace(";", ",")
    return f"orch: {field}" if field[:1].isdigit() else field
