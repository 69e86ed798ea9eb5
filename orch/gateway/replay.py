"""Replay matching: which recorded exchange answers a request, when a run is replayed from a cassette.

A request is found by worker, conversation and turn, never by its whole body: between two runs of the
same fleet everything incidental differs (tool_use and message ids, session ids, dates, the run folder
and workdir paths, the random id of each `<pasted_content>`, Claude Code's `<system-reminder>` blocks,
which carry dates and file contents). So:

- kind: `main` (streamed with tools offered: the agent's own turns), `side` (other /v1/messages calls:
  session titles and the like, asked for with an output format or without tools), `count_tokens`,
  `other` (any other endpoint);
- conversation: sha256 (16 hex) of the conversation's first user message, normalised (`normalise`);
- turn: the number of messages in the request (Claude Code's mid-conversation `system` turns count too,
  the same way in both runs).

Main turns are what decides a replay: a main request with no recording is a `ReplayMiss` saying what
differs. Side and count_tokens calls decide nothing, so they take the nearest recording of the same
worker and kind, else a synthesized minimal answer, and never miss.

Keys are computed once, at record time (with the recording run's paths), and stored in each Exchange.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orch.errors import UsageError
from orch.gateway import gemini, openai_chat, portable, responses
from orch.gateway.cassette import read_exchanges
from orch.gateway.records import Exchange, ExchangeKey
from orch.jsonsample import sample
from orch.text import shorten

Kind = Literal["main", "side", "count_tokens", "other"]

REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
# Ids the API and Claude Code mint afresh each run. Prefixed ids need a long tail so that words such as
# `msg_count` in a prompt stay as they are.
PREFIXED_ID_RE = re.compile(r"\b(?:toolu|srvtoolu|msg|req)_[A-Za-z0-9]{12,}\b")
UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Claude Code wraps a bracketed paste (how orch delivers a long brief) in tags with a random id per paste.
PASTE_ID_RE = re.compile(r'(</?pasted_content id=")[^"]*(")')
LONG_HEX_RE = re.compile(r"\b[0-9a-fA-F]{16,}\b")
ISO_TIME_RE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\d:])"
)
# Epoch seconds (optionally with a fraction) or milliseconds, 2001..2033: what time.time() prints.
EPOCH_RE = re.compile(r"\b1\d{9}(?:\d{3})?(?:\.\d+)?\b")
MIN_MANGLED = 8
MISS_TEXT = 80
"""How much of a normalised first message a miss quotes."""


def _mangle(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def _path_forms(path: str) -> list[str]:
    """A folder as it can appear in text: as given and resolved (/tmp may be a symlink)."""
    if not path.strip("/"):
        return []  # "" or "/": replacing it would rewrite every path
    forms = {path.rstrip("/")}
    with contextlib.suppress(OSError):
        forms.add(str(Path(path).resolve()))
    return list(forms)


Folders = tuple[tuple[str, str], ...]
"""(folder, what replaces it) pairs."""


@functools.lru_cache(maxsize=64)
def _folders(pairs: Folders) -> tuple[re.Pattern[str], dict[str, str]]:
    """One pattern for every form of the folders, longest first (a workdir inside the run folder, or the
    other way round, is replaced whole), each only where a path element ends: /work is not /w + ork, but
    a full stop may follow. Claude Code's mangled form (its projects dir: every non-alphanumeric
    character a dash) is replaced too, unless short: "-w" would match flags and hyphenated words."""
    names: dict[str, str] = {}
    for folder, replacement in pairs:
        for form in _path_forms(folder):
            names[form] = replacement
            mangled, target = _mangle(form), replacement if replacement.startswith("<") else _mangle(replacement)
            if len(mangled) >= MIN_MANGLED:
                names.setdefault(mangled, target)
    if not names:
        return re.compile(r"(?!)"), names
    alternatives = "|".join(re.escape(f) for f in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-]|\.\w)"), names


def replace_folders(text: str, pairs: Folders) -> str:
    pattern, names = _folders(pairs)
    return pattern.sub(lambda m: names[m.group(0)], text)


def normalise(text: str, run_dir: str, workdir: str) -> str:
    """`text` with everything that differs between two runs of the same work replaced by placeholders."""
    text = REMINDER_RE.sub("", text)
    # Paths before ids (a temp dir name can look like hex); timestamps before epochs and hex.
    text = replace_folders(text, ((workdir, "<workdir>"), (run_dir, "<run>")))
    text = PASTE_ID_RE.sub(r"\1<id>\2", text)
    text = ISO_TIME_RE.sub("<time>", text)
    text = PREFIXED_ID_RE.sub("<id>", text)
    text = UUID_RE.sub("<id>", text)
    text = EPOCH_RE.sub("<epoch>", text)
    text = LONG_HEX_RE.sub("<id>", text)
    return " ".join(text.split())


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "tool_result":
        return "\n".join(_block_text(b) for b in _blocks(block.get("content")))
    return f"[{kind}]"  # an image or document: its kind is part of the message, its bytes are not


def first_user_text(body: dict[str, Any]) -> str:
    """The raw text of the request's first user message ("" when it has none)."""
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            return "\n".join(_block_text(b) for b in _blocks(message.get("content")))
    return ""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_kind(path: str, body: dict[str, Any]) -> Kind:
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):  # OpenAI Chat Completions: aider's turns offer no tools either
        return "main" if openai_chat.main_call(body) else "side"
    if path.endswith("/v1/messages/count_tokens"):
        return "count_tokens"
    if not path.endswith("/v1/messages"):
        return "other"
    output_format = body.get("output_config")
    asks_format = isinstance(output_format, dict) and output_format.get("format") is not None
    # Claude Code streams its side calls too (titles): they offer no tools and ask for a JSON format.
    return "main" if body.get("stream") and body.get("tools") and not asks_format else "side"


@functools.lru_cache(maxsize=256)
def conversation(first_text: str, run_dir: str, workdir: str) -> str:
    """The conversation's digest. Every turn of a conversation repeats its first user message, so the
    normalising (a dozen regex passes, ~1 ms for a few KB) runs once per conversation, not per turn."""
    return digest(normalise(first_text, run_dir, workdir))


def exchange_key(path: str, body: dict[str, Any], run_dir: str, workdir: str) -> ExchangeKey:
    """How replay finds this request's recording (the gateway stores it with every exchange)."""
    if responses.handles(path):
        kind, first, turn = responses.replay_parts(body)
        return ExchangeKey(kind=kind, conversation=digest(normalise(first, run_dir, workdir)), turn=turn)
    if (google := gemini.replay_key(path, body)) is not None:
        call_kind, text, position = google
        return ExchangeKey(kind=call_kind, conversation=digest(normalise(text, run_dir, workdir)), turn=position)
    messages = body.get("messages")
    return ExchangeKey(
        kind=request_kind(path, body),
        conversation=conversation(first_user_text(body), run_dir, workdir),
        turn=len(messages) if isinstance(messages, list) else 0,
    )


@dataclass(frozen=True)
class ReplayMiss:
    """A main request the cassette has no answer for: the gateway refuses it with `message`."""

    worker: int
    turn: int
    message: str


@dataclass
class _Attempts:
    """The recordings of one (worker, kind, conversation, turn): runs of consecutive requests (a turn
    and its retries), each answered by its best exchange; the next request of that key takes the next
    run not yet used, a retry (the same key again, nothing in between) takes the same one again."""

    runs: list[list[Exchange]] = field(default_factory=list)
    used: int = 0


def _best(exchanges: list[Exchange]) -> Exchange:
    """Of one turn's recordings (oldest first): a success, then a client error (a budget refusal replays
    as one), then a rate limit, then a server error; among equals the latest (a retry that worked ends
    the run). By position, not seq: seq restarts with each gateway life."""

    def rank(item: tuple[int, Exchange]) -> tuple[int, int]:
        status = item[1].status
        klass = 0 if status < 400 else 3 if status >= 500 else 2 if status == 429 else 1
        return klass, -item[0]

    return min(enumerate(exchanges), key=rank)[1]


Index = tuple[int, str, str, int]
"""(worker, kind, conversation, turn)."""


def _model_dir(cassette: Path) -> Path:
    if not cassette.exists():
        raise UsageError(f"replay cassette {cassette} does not exist", hint="give a run folder (or a copy of one)")
    model = cassette / "model"
    # A run folder holds model/; its model dir itself is accepted too.
    return model if model.is_dir() or not any(cassette.glob("exchanges-*.jsonl.gz")) else cassette


def _file_worker(path: Path) -> int:
    number = path.name.removeprefix("exchanges-").removesuffix(".jsonl.gz")
    return int(number) if number.isdigit() else -1


def _translate_value(value: Any, pairs: Folders) -> Any:
    if isinstance(value, str):
        return replace_folders(value, pairs)
    if isinstance(value, list):
        return [_translate_value(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _translate_value(v, pairs) for k, v in value.items()}
    return value


def _translate_sse(text: str, pairs: Folders) -> str:
    """The recorded stream with the recording's folders replaced in text and tool inputs. A tool input
    comes in partial-JSON fragments that may cut a path in two: its whole JSON, rewritten, goes into its
    first fragment and the others are emptied. Events it does not change stay byte for byte."""
    if '"chat.completion.chunk"' in text:  # OpenAI Chat Completions: its own chunk shape
        return openai_chat.translate_stream(text, functools.partial(_translate_value, pairs=pairs))
    events = text.split("\n\n")
    deltas: dict[int, dict[str, Any]] = {}
    """Event number -> its content_block_delta payload."""
    for number, event in enumerate(events):
        data = next((line[6:] for line in event.split("\n") if line.startswith("data: ")), "")
        with contextlib.suppress(ValueError):
            loaded = json.loads(data) if '"content_block_delta"' in data else None
            if isinstance(loaded, dict) and isinstance(loaded.get("delta"), dict):
                deltas[number] = loaded
    changed: set[int] = set()
    inputs: dict[int, list[int]] = defaultdict(list)
    """Block index -> the events holding its input_json_delta fragments, in order."""
    for number, payload in deltas.items():
        delta = payload["delta"]
        if delta.get("type") == "input_json_delta":
            inputs[int(payload.get("index") or 0)].append(number)
        elif isinstance(delta.get("text"), str) and (new := replace_folders(delta["text"], pairs)) != delta["text"]:
            delta["text"] = new
            changed.add(number)
    for numbers in inputs.values():
        whole = "".join(str(deltas[n]["delta"].get("partial_json") or "") for n in numbers)
        try:
            rewritten = json.dumps(_translate_value(json.loads(whole), pairs))
        except ValueError:
            continue  # a stream cut mid-input: leave it as it came
        if rewritten != json.dumps(json.loads(whole)):
            for position, n in enumerate(numbers):
                deltas[n]["delta"]["partial_json"] = rewritten if position == 0 else ""
                changed.add(n)
    for n in changed:
        events[n] = "\n".join(
            f"data: {json.dumps(deltas[n])}" if line.startswith("data: ") else line for line in events[n].split("\n")
        )
    return "\n\n".join(events)


def translate(exchange: Exchange, pairs: Folders) -> Exchange:
    """`exchange` answering in this run's folders instead of the recording's (a recorded Write into the
    old workdir would otherwise write there). Only the response: the request stays as recorded."""
    if not pairs:
        return exchange
    if responses.is_stream(exchange.body):
        body = responses.translate_stream(exchange.body, lambda text: replace_folders(text, pairs))
    elif gemini.is_stream(exchange.body):
        body = gemini.translate_stream(exchange.body, functools.partial(_translate_value, pairs=pairs))
    elif exchange.stream or exchange.headers.get("content-type", "").startswith("text/event-stream"):
        body = _translate_sse(exchange.body, pairs)
    else:
        try:
            body = json.dumps(_translate_value(json.loads(exchange.body), pairs))
        except ValueError:
            body = replace_folders(exchange.body, pairs)
    return exchange if body == exchange.body else exchange.model_copy(update={"body": body})


def recorded_folders(root: Path) -> tuple[str, str]:
    """Where the recording ran: (run folder, workdir). A cassette in place is its own run folder; its
    run.json says the workdir; a gateway `started` event saying `run_dir`/`workdir` overrides both
    (kept across copies)."""
    run_dir, workdir = str(root), ""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((root / "run.json").read_text())
        workdir = str(info.get("workdir") or "") if isinstance(info, dict) else ""
    with contextlib.suppress(OSError):
        for line in (root / "model" / "gateway.jsonl").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                data = event.get("data") if isinstance(event, dict) and event.get("event") == "started" else None
                if isinstance(data, dict):
                    run_dir = str(data.get("run_dir") or run_dir)
                    workdir = str(data.get("workdir") or workdir)
    return run_dir, workdir


def _recording(cassette: Path) -> tuple[list[Exchange], tuple[str, str]]:
    """A cassette's exchanges (each worker's in order, worker by worker) and where it was recorded (run
    folder, workdir): from an exported file (orch.gateway.portable), or from a run folder's model/."""
    if cassette.is_file():
        header, exchanges = portable.read(cassette)
        return exchanges, portable.where(header)
    model = _model_dir(cassette)
    files = sorted(model.glob("exchanges-*.jsonl.gz"), key=_file_worker)
    if not files:
        raise UsageError(
            f"replay cassette {cassette} has no recording (no model/exchanges-*.jsonl.gz)",
            hint="record a run first: a run's gateway records every exchange",
        )
    exchanges = [e for path in files for e in read_exchanges(path)]
    if not exchanges:
        raise UsageError(f"replay cassette {cassette} is empty: its exchanges files hold no exchange")
    return exchanges, recorded_folders(model.parent if model.name == "model" else model)


def cassette_exchanges(cassette: Path) -> list[Exchange]:
    """What `orch record export` copies: a run folder's exchanges in replay's order."""
    return _recording(cassette)[0]


class Replayer:
    """Answers requests from a cassette's recording. Pure apart from loading: no clock, no I/O per call."""

    def __init__(self, cassette: Path, run_dir: str, workdir: str) -> None:
        self.run_dir, self.workdir = run_dir, workdir
        exchanges, (recorded_run, recorded_workdir) = _recording(cassette)
        self._lock = threading.Lock()
        self._index: dict[Index, _Attempts] = defaultdict(_Attempts)
        self._by_kind: dict[tuple[int, str], list[Exchange]] = defaultdict(list)
        self._first_text: dict[tuple[int, str], str] = {}
        """(worker, conversation) -> its normalised first message, for miss messages (main kind only)."""
        self._last: dict[int, Index] = {}
        """Per worker, the main key answered last: the same key again is a retry."""
        last_recorded: dict[int, Index] = {}
        # Answers name the recording's folders (a Write's file_path): they are given this run's instead.
        self._folders: Folders = tuple(
            (old, new)
            for old, new in ((recorded_run, run_dir), (recorded_workdir, workdir))
            if old and new and old != new
        )
        # File order is each worker's order (one file per worker, appended as exchanges complete).
        for exchange in exchanges:
            key = exchange.key
            index = (exchange.worker, key.kind, key.conversation, key.turn)
            attempts = self._index[index]
            if key.kind == "main":
                # Consecutive main requests with one key are a turn and its retries: one run.
                if last_recorded.get(exchange.worker) == index and attempts.runs:
                    attempts.runs[-1].append(exchange)
                else:
                    attempts.runs.append([exchange])
                last_recorded[exchange.worker] = index
                if (exchange.worker, key.conversation) not in self._first_text:
                    text = normalise(first_user_text(exchange.request), recorded_run, recorded_workdir)
                    self._first_text[(exchange.worker, key.conversation)] = text
            else:
                attempts.runs.append([exchange])
                self._by_kind[(exchange.worker, key.kind)].append(exchange)
        self.exchanges = len(exchanges)

    def answer(self, worker: int, method: str, path: str, body: dict[str, Any]) -> Exchange | ReplayMiss:
        answer = self._answer(worker, method, path, body)
        return translate(answer, self._folders) if isinstance(answer, Exchange) else answer

    def _answer(self, worker: int, method: str, path: str, body: dict[str, Any]) -> Exchange | ReplayMiss:
        key = exchange_key(path, body, self.run_dir, self.workdir)
        index = (worker, key.kind, key.conversation, key.turn)
        with self._lock:
            attempts = self._index.get(index)
            if key.kind == "main":
                if attempts is None:
                    return ReplayMiss(worker, key.turn, self._miss(worker, key, body))
                retry = self._last.get(worker) == index and attempts.used > 0
                self._last[worker] = index
                if not retry and attempts.used < len(attempts.runs):
                    attempts.used += 1
                return _best(attempts.runs[max(attempts.used, 1) - 1])
            if key.kind == "other":
                return self._other(worker, method, path, key)
            exact = [run[0] for run in attempts.runs if run[0].status < 400] if attempts else []
            if exact:
                return _best(exact)
            return self._nearest(worker, key) or _synthesized(worker, method, path, body, key)

    def _nearest(self, worker: int, key: ExchangeKey) -> Exchange | None:
        """The worker's recording of this kind closest to this request: same conversation first, then
        the nearest turn, successes only (a recorded side-call failure is no answer to give again)."""
        recorded = [e for e in self._by_kind.get((worker, key.kind), []) if e.status < 400]
        if not recorded:
            return None
        return min(recorded, key=lambda e: (e.key.conversation != key.conversation, abs(e.key.turn - key.turn)))

    def _other(self, worker: int, method: str, path: str, key: ExchangeKey) -> Exchange | ReplayMiss:
        bare = path.split("?", 1)[0]
        same = [
            e for e in self._by_kind.get((worker, "other"), []) if (e.method, e.path.split("?", 1)[0]) == (method, bare)
        ]
        if same:
            return _best(same)
        return ReplayMiss(worker, key.turn, f"worker {worker}: no recording of {method} {shorten(path, 80)}")

    def _miss(self, worker: int, key: ExchangeKey, body: dict[str, Any]) -> str:
        where = f"worker {worker}, turn {key.turn}"
        turns = sorted(t for (w, k, c, t) in self._index if (w, k, c) == (worker, "main", key.conversation))
        if turns:
            if key.turn > turns[-1]:
                difference = f"recorded turns of that conversation end at {turns[-1]}"
            else:
                difference = f"no recorded turn {key.turn} (recorded: {_numbers(turns)})"
            return f"{where} of conversation {key.conversation}: {difference}"
        text = shorten(normalise(first_user_text(body), self.run_dir, self.workdir), MISS_TEXT)
        # Workers numbered differently in the two runs show up here.
        others = sorted({w for (w, c) in self._first_text if c == key.conversation})
        elsewhere = f" (that conversation was recorded for worker {_numbers(others)})" if others else ""
        mine = [t for (w, _), t in self._first_text.items() if w == worker]
        if mine:
            recorded = "; ".join(f'"{shorten(t, MISS_TEXT)}"' for t in mine[:3])
            more = f" and {len(mine) - 3} more" if len(mine) > 3 else ""
            return f'{where}: no conversation starts with "{text}"; recorded: {recorded}{more}{elsewhere}'
        workers = _numbers(sorted({w for (w, _) in self._first_text}))
        why = elsewhere or f" (recorded workers: {workers})"
        return f'{where}: no conversation starts with "{text}"; worker {worker} has no recorded turns{why}'


def _numbers(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:8]))
    return shown + (f" … {values[-1]}" if len(values) > 8 else "")


def _synthesized(worker: int, method: str, path: str, body: dict[str, Any], key: ExchangeKey) -> Exchange:
    """A minimal answer for a side or count_tokens call the cassette never saw (seq 0: not recorded)."""
    if (google := gemini.synthesized(path, body)) is not None:
        content_type, text, stream = google
        return _exchange(worker, method, path, body, key, content_type, text, stream=stream)
    if key.kind == "count_tokens":
        payload: dict[str, Any] = {"input_tokens": max(1, len(json.dumps(body)) // 4)}
        return _exchange(worker, method, path, body, key, "application/json", json.dumps(payload), stream=False)
    output_format = body.get("output_config")
    schema = output_format.get("format", {}).get("schema") if isinstance(output_format, dict) else None
    text = json.dumps(sample(schema, "Replayed session")) if isinstance(schema, dict) else "Replayed session"
    model = str(body.get("model") or "replay")
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {
        "id": f"msg_replay{key.conversation}{key.turn}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    if not body.get("stream"):
        whole = {**message, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
        return _exchange(worker, method, path, body, key, "application/json", json.dumps(whole), stream=False)
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": usage},
        {"type": "message_stop"},
    ]
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return _exchange(worker, method, path, body, key, "text/event-stream", sse, stream=True)


def _exchange(
    worker: int,
    method: str,
    path: str,
    body: dict[str, Any],
    key: ExchangeKey,
    content_type: str,
    text: str,
    stream: bool,
) -> Exchange:
    return Exchange(
        seq=0,
        ts=0.0,
        worker=worker,
        method=method,
        path=path,
        request=body,
        status=200,
        headers={"content-type": content_type},
        stream=stream,
        body=text,
        key=key,
    )
