"""Replay matching (orch/gateway/recording/replay.py); the recording format: test_exchanges.py.

The request bodies are real (tests/gateway/recording/data/claude-replay.json): Claude Code run against orch's
scripted model (trimmed: long system prompts, tool schemas and reminder texts cut), each built for the place
it was captured in. Runs A and B are one prompt in two workdirs and run
folders; C is another prompt; D and E a brief read from each run's own folder; TITLE is the session-title
side call the interactive TUI makes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from orch.gateway.modeldir import Exchange
from orch.gateway.recording.exchanges import append_exchange
from orch.gateway.recording.keys import exchange_key
from orch.gateway.recording.normalise import normalise
from orch.gateway.recording.replay import Replayer, ReplayMiss
from orch.gateway.recording.translate import translate

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network

Body = dict[str, Any]

DATA = json.loads((Path(__file__).parent / "data" / "claude-replay.json").read_text())
PLACES = {name: (place["workdir"], place["run"]) for name, place in DATA["places"].items()}
"""Where each capture ran: (workdir, run folder)."""


def captured(body: str, place: str) -> Body:
    """A captured body as Claude Code sent it in `place`: that place's folders, tool_use ids, device, session."""
    facts = DATA["places"][place]
    text = json.dumps(DATA["bodies"][body])
    values = {name: facts[name.lower()] for name in ("WORKDIR", "RUN", "DEVICE", "SESSION")}
    values.update({f"ID{n}": tool_id for n, tool_id in enumerate(facts["ids"])})
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    return json.loads(text)  # type: ignore[no-any-return]


A6, B6 = captured("script", "A"), captured("script", "B")
C4 = captured("other_task", "C")
BRIEF_D6, BRIEF_E6 = captured("brief", "D"), captured("brief", "E")
TITLE: Body = DATA["title"]


def turn(body: Body, n: int) -> Body:
    """The request of turn `n` in the conversation `body` ends (Claude Code resends the whole history)."""
    return {**copy.deepcopy(body), "messages": copy.deepcopy(body["messages"][:n])}


def key_of(body: Body, run: str, path: str = "/v1/messages") -> tuple[str, str, int]:
    workdir, run_dir = PLACES[run]
    key = exchange_key(path, body, run_dir, workdir)
    return key.kind, key.conversation, key.turn


# ---------------------------------------------------------------- normalisation

RUN, WORK = "/home/u/.orch/runs/demo-1", "/home/u/src/app"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<system-reminder>\nToday is 2026-12-03.\n</system-reminder>\nFix the bug.", "Fix the bug."),
        ("a<system-reminder>x</system-reminder>b<system-reminder>\ny\n</system-reminder>c", "abc"),
        (f"Read your brief at {RUN}/briefs/w1.md", "Read your brief at <run>/briefs/w1.md"),
        (f"cd {WORK} && ls {WORK}/src", "cd <workdir> && ls <workdir>/src"),
        (f"workspace {RUN}/workspace/app", "workspace <run>/workspace/app"),
        ("see -home-u-src-app/memory", "see <workdir>/memory"),  # Claude Code's mangled project dir
        ("answer toolu_01XFDUDYJgAACzvnptvVoYEL and msg_9996f38fbe794bfab76532e3", "answer <id> and <id>"),
        ("session 3fa7e1c7-4c14-4a3a-a42f-46edae6cc8c8 done", "session <id> done"),
        ("commit 9f3e2a1b4c5d6e7f8a9b0c1d2e3f4a5b", "commit <id>"),
        ("at 2026-12-03T14:46:54.123Z or 2026-12-03 14:46:54+01:00", "at <time> or <time>"),
        ("dated 2026-12-03.", "dated <time>."),
        ("started 1764773214.5123 (ms 1764773214512)", "started <epoch> (ms <epoch>)"),
        ("keep msg_count, run_dir, 12345 and cafe", "keep msg_count, run_dir, 12345 and cafe"),
        ("  spaced \n\n out\t", "spaced out"),
        # A paste as Claude Code 2.1.332 sends it (two pastes of one text: ids cfab and 93d6).
        (
            '<pasted_content id="cfab">\nbrief\n</pasted_content id="cfab">',
            '<pasted_content id="<id>"> brief </pasted_content id="<id>">',
        ),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    assert normalise(text, RUN, WORK) == expected


@pytest.mark.parametrize(
    ("text", "run_dir", "expected"),
    [
        ("/ and /home", "", "/ and /home"),  # no folder, or "/", replaces nothing
        ("Work in /home/u/src/app.", "", "Work in <workdir>."),
        ("/home/u/src/app2 and /home/u/src/app.bak", "", "/home/u/src/app2 and /home/u/src/app.bak"),
        ("/work --w re-w /w/x /w", "/w", "/work --w re-w <run>/x <run>"),  # a short folder: whole elements only
        (f"{WORK}/.orch/run", f"{WORK}/.orch/run", "<run>"),  # the run folder inside the workdir
    ],
)
def test_normalise_replaces_whole_path_elements(text: str, run_dir: str, expected: str) -> None:
    assert normalise(text, run_dir, WORK if run_dir != "/w" else "/") == expected


# ---------------------------------------------------------------- keys of real Claude Code bodies


@pytest.mark.parametrize("n", [2, 4, 6])
def test_one_prompt_in_two_places_has_one_key_per_turn(n: int) -> None:
    # Different workdirs, run folders, tool_use ids, device and session ids: the same turn.
    assert key_of(turn(A6, n), "A") == key_of(turn(B6, n), "B") == ("main", key_of(A6, "A")[1], n)


def test_a_brief_in_the_run_folder_matches_once_the_run_folder_is_a_placeholder() -> None:
    assert key_of(BRIEF_D6, "D") == key_of(BRIEF_E6, "E")
    # Without the run folders the first messages differ: it is the placeholder that matches them.
    raw_d = exchange_key("/v1/messages", BRIEF_D6, "", "")
    raw_e = exchange_key("/v1/messages", BRIEF_E6, "", "")
    assert raw_d.conversation != raw_e.conversation


def pasted(paste_id: str) -> Body:
    """A conversation opened with a bracketed paste (the real block, its lines cut to three)."""
    lines = "Here is a long brief.\nline 0: some text about the task at hand"
    text = f'\n\n<pasted_content id="{paste_id}">\n{lines}\n</pasted_content id="{paste_id}">\n'
    return {**A6, "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}, *A6["messages"][1:2]]}


def test_two_pastes_of_one_brief_have_one_key() -> None:
    assert key_of(pasted("cfab"), "A") == key_of(pasted("93d6"), "B") != key_of(A6, "A")


def test_different_conversations_have_different_keys() -> None:
    conversations = {key_of(A6, "A")[1], key_of(C4, "C")[1], key_of(BRIEF_D6, "D")[1], key_of(TITLE, "A")[1]}
    assert len(conversations) == 4


CHAT: Body = {
    "model": "gpt-4.1",
    "stream": True,
    "messages": [{"role": "system", "content": "Generate a title."}, {"role": "user", "content": "fix the bug"}],
}
AIDER: Body = {
    **CHAT,
    "messages": [
        {"role": "system", "content": "Act as an expert software developer. ... *SEARCH/REPLACE block* Rules: ..."},
        {"role": "user", "content": "fix the bug"},
    ],
}


@pytest.mark.parametrize(
    ("path", "body", "kind"),
    [
        ("/v1/messages", A6, "main"),
        ("/v1/messages?beta=true", A6, "main"),  # Claude Code asks with ?beta=true
        ("/v1/messages", TITLE, "side"),  # streamed, but no tools and a JSON format asked
        ("/v1/messages", {**A6, "stream": False}, "side"),
        ("/v1/messages", {**A6, "tools": []}, "side"),
        ("/v1/messages/count_tokens", A6, "count_tokens"),
        ("/v1/models", {}, "other"),
        # Chat Completions: opencode's turns offer tools, aider's offer none but teach edit blocks.
        ("/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, "main"),
        ("/chat/completions", AIDER, "main"),
        ("/chat/completions", {**AIDER, "stream": False}, "side"),  # aider's history summaries
        ("/chat/completions", CHAT, "side"),  # opencode's titles
    ],
)
def test_kind(path: str, body: Body, kind: str) -> None:
    assert exchange_key(path, body, "", "").kind == kind


def test_a_body_without_messages_has_turn_zero() -> None:
    assert exchange_key("/v1/messages", {"messages": "junk"}, "", "").turn == 0


# ---------------------------------------------------------------- replaying a recording

SSE = "event: message_start\ndata: {}\n\n"


def recorded(seq: int, worker: int, body: Body, run: str, path: str = "/v1/messages", status: int = 200) -> Exchange:
    workdir, run_dir = PLACES[run]
    return Exchange(
        seq=seq,
        ts=1764773214.0 + seq,
        worker=worker,
        method="POST",
        path=path,
        request=body,
        status=status,
        headers={"content-type": "text/event-stream"},
        stream=bool(body.get("stream")),
        body=f"answer {seq}",
        key=exchange_key(path, body, run_dir, workdir),
    )


def cassette(tmp_path: Path, exchanges: list[Exchange]) -> Path:
    """A run folder whose model/ holds `exchanges`, one file per worker, as the gateway writes them."""
    root = tmp_path / "recorded-run"
    (root / "model").mkdir(parents=True)
    for exchange in exchanges:
        append_exchange(root / "model" / f"exchanges-{exchange.worker}.jsonl.gz", exchange)
    return root


def replayer(tmp_path: Path, exchanges: list[Exchange], run: str = "B") -> Replayer:
    workdir, run_dir = PLACES[run]
    return Replayer(cassette(tmp_path, exchanges), run_dir, workdir)


def ask(rep: Replayer, worker: int, body: Body, path: str = "/v1/messages") -> Exchange | ReplayMiss:
    return rep.answer(worker, "POST", path, body)


# Worker 1 recorded run A: a title side call, then turns 2, 4 and 6.
RECORDING_A = [
    recorded(1, 1, TITLE, "A"),
    recorded(2, 1, turn(A6, 2), "A"),
    recorded(3, 1, turn(A6, 4), "A"),
    recorded(4, 1, turn(A6, 6), "A"),
]


@pytest.mark.parametrize("n", [2, 4, 6])
def test_run_b_is_answered_from_run_a(tmp_path: Path, n: int) -> None:
    answer = ask(replayer(tmp_path, RECORDING_A), 1, turn(B6, n))
    assert isinstance(answer, Exchange) and answer.body == f"answer {n // 2 + 1}"


@pytest.mark.parametrize(
    ("worker", "body", "expected"),
    [
        (1, {**turn(B6, 6), "messages": [*B6["messages"], *B6["messages"][2:4]]}, "worker 1, turn 8 of conversation "),
        (
            1,
            {**turn(B6, 6), "messages": [*B6["messages"], *B6["messages"][2:4]]},
            "recorded turns of that conversation end at 6",
        ),
        (1, turn(B6, 3), "worker 1, turn 3 of conversation "),
        (1, turn(B6, 3), "no recorded turn 3 (recorded: 2, 4, 6)"),
        (1, C4, 'worker 1, turn 4: no conversation starts with "Different task. ```orch-script'),
        (1, C4, 'recorded: "Do the steps. ```orch-script {"bash": "echo hi > out.txt"}'),
        (2, turn(B6, 2), 'worker 2, turn 2: no conversation starts with "Do the steps.'),
        (2, turn(B6, 2), "worker 2 has no recorded turns (that conversation was recorded for worker 1)"),
        (3, C4, "worker 3 has no recorded turns (recorded workers: 1)"),
    ],
)
def test_a_main_miss_names_worker_turn_and_difference(tmp_path: Path, worker: int, body: Body, expected: str) -> None:
    answer = ask(replayer(tmp_path, RECORDING_A), worker, body)
    assert isinstance(answer, ReplayMiss)
    assert (answer.worker, answer.turn) == (worker, len(body["messages"]))
    assert expected in answer.message and "\n" not in answer.message


def test_a_retry_gets_the_same_answer_and_a_new_session_the_next_recording(tmp_path: Path) -> None:
    # Worker 1 ran the prompt twice (a restart without resume): two sessions of one conversation.
    rep = replayer(tmp_path, [*RECORDING_A, recorded(5, 1, turn(A6, 2), "A"), recorded(6, 1, turn(A6, 4), "A")])
    bodies = [ask(rep, 1, turn(B6, n)) for n in (2, 2, 4, 2, 4, 4, 6, 2)]
    answers = [b.body if isinstance(b, Exchange) else b.message for b in bodies]
    assert answers == [
        "answer 2",
        "answer 2",  # a retry of turn 2
        "answer 3",
        "answer 5",  # the second session
        "answer 6",
        "answer 6",
        "answer 4",
        "answer 5",  # every recording used: the latest again
    ]


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([529, 200], 2),  # recorded: overloaded, then the retry worked
        ([200, 200], 2),  # both worked (the agent gave up on the first stream): the one it went on with
        ([429, 400], 2),  # a budget refusal beats a rate limit
        ([500, 429], 2),
        ([529, 500], 2),  # only failures: the latest
        ([200, 529], 1),
    ],
)
def test_recorded_retries_of_one_turn_answer_with_the_best(tmp_path: Path, statuses: list[int], expected: int) -> None:
    exchanges = [recorded(seq, 1, turn(A6, 2), "A", status=s) for seq, s in enumerate(statuses, 1)]
    answer = ask(replayer(tmp_path, exchanges), 1, turn(B6, 2))
    assert isinstance(answer, Exchange) and answer.seq == expected


def test_order_is_the_file_order_not_seq(tmp_path: Path) -> None:
    # A restarted gateway numbers from 1 again: the later life's recording is still the later one.
    first, second = recorded(7, 1, turn(A6, 2), "A"), recorded(1, 1, turn(A6, 2), "A")
    answer = ask(replayer(tmp_path, [first, second]), 1, turn(B6, 2))
    assert isinstance(answer, Exchange) and answer.seq == 1


def test_a_recorded_side_call_failure_is_not_given_again(tmp_path: Path) -> None:
    rep = replayer(tmp_path, [recorded(1, 1, TITLE, "A", status=529), recorded(2, 1, turn(A6, 2), "A")])
    answer = ask(rep, 1, TITLE)
    assert isinstance(answer, Exchange) and (answer.seq, answer.status) == (0, 200)


@pytest.mark.parametrize(
    ("worker", "body", "path", "expected"),
    [
        (1, TITLE, "/v1/messages", "answer 1"),  # recorded exactly
        (
            1,
            {**TITLE, "messages": [{"role": "user", "content": "<session>\nother\n</session>"}]},
            "/v1/messages",
            "answer 1",
        ),
        (1, A6, "/v1/messages/count_tokens", "synthesized"),  # nothing of that kind recorded for worker 1
        (2, TITLE, "/v1/messages", "synthesized"),
    ],
)
def test_side_calls_never_miss(tmp_path: Path, worker: int, body: Body, path: str, expected: str) -> None:
    answer = ask(replayer(tmp_path, RECORDING_A), worker, body, path)
    assert isinstance(answer, Exchange)
    assert answer.body == expected if expected != "synthesized" else answer.seq == 0


def test_synthesized_answers_are_well_formed(tmp_path: Path) -> None:
    rep = replayer(tmp_path, RECORDING_A)
    title = ask(rep, 2, TITLE)
    assert isinstance(title, Exchange) and title.stream and title.headers["content-type"] == "text/event-stream"
    events = [json.loads(line[6:]) for line in title.body.splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert json.loads(events[2]["delta"]["text"]) == {"title": "Replayed session"}  # the schema it asked for
    count = ask(rep, 2, A6, "/v1/messages/count_tokens")
    assert isinstance(count, Exchange) and json.loads(count.body)["input_tokens"] > 0
    whole = ask(rep, 2, {**TITLE, "stream": False})
    assert isinstance(whole, Exchange) and json.loads(whole.body)["content"][0]["type"] == "text"


def test_other_endpoints_answer_from_a_recording_of_the_same_path_or_miss(tmp_path: Path) -> None:
    rep = replayer(tmp_path, [*RECORDING_A, recorded(5, 1, {}, "A", path="/v1/models")])
    models = rep.answer(1, "POST", "/v1/models?beta=true", {})
    assert isinstance(models, Exchange) and models.seq == 5
    miss = rep.answer(1, "GET", "/v1/files", {})
    assert isinstance(miss, ReplayMiss) and miss.message == "worker 1: no recording of GET /v1/files"


# ---------------------------------------------------------------- bad cassettes


# ---------------------------------------------------------------- answers in this run's folders

OLD_RUN, OLD_WORK, NEW_RUN, NEW_WORK = "/old/runs/r1", "/old/src/app", "/new/runs/r2", "/new/copy/app"
FOLDERS = ((OLD_RUN, NEW_RUN), (OLD_WORK, NEW_WORK))


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def tool_stream(tool_input: dict[str, Any], cut: int) -> str:
    """A tool_use answer as the scripted model streams it: the input JSON in two fragments, cut at `cut`."""
    payload = json.dumps(tool_input)
    return sse(
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "input": {}},
        },
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": part}}
            for part in (payload[:cut], payload[cut:])
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    )


def streamed_input(text: str) -> Any:
    fragments = [
        e["delta"]["partial_json"]
        for line in text.splitlines()
        if line.startswith("data: ") and (e := json.loads(line[6:]))["type"] == "content_block_delta"
    ]
    return json.loads("".join(fragments))


@pytest.mark.parametrize("cut", [5, 22, 30, 40])  # 22..40 cut the path itself
def test_a_recorded_tool_input_names_this_runs_folders(cut: int) -> None:
    tool_input = {"file_path": f"{OLD_WORK}/out.md", "content": f"see {OLD_RUN}/brief-1.md"}
    exchange = recorded(1, 1, A6, "A").model_copy(update={"body": tool_stream(tool_input, cut), "stream": True})
    translated = translate(exchange, FOLDERS)
    assert streamed_input(translated.body) == {
        "file_path": f"{NEW_WORK}/out.md",
        "content": f"see {NEW_RUN}/brief-1.md",
    }
    # Only the fragments change: every other event is as recorded, byte for byte.
    before, after = exchange.body.split("\n\n"), translated.body.split("\n\n")
    assert [b for b, a in zip(before, after, strict=True) if b != a and "input_json_delta" not in b] == []


@pytest.mark.parametrize(
    ("body", "stream", "expected"),
    [
        (
            sse(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"in {OLD_WORK}."}}
            ),
            True,
            f"in {NEW_WORK}.",
        ),
        (json.dumps({"content": [{"type": "text", "text": f"{OLD_RUN}/x"}]}), False, f"{NEW_RUN}/x"),
        (json.dumps({"content": [{"type": "text", "text": "/old/src/app2 stays"}]}), False, "/old/src/app2 stays"),
    ],
)
def test_recorded_text_names_this_runs_folders(body: str, stream: bool, expected: str) -> None:
    content_type = "text/event-stream" if stream else "application/json"
    exchange = recorded(1, 1, A6, "A").model_copy(
        update={"body": body, "stream": stream, "headers": {"content-type": content_type}}
    )
    assert expected in translate(exchange, FOLDERS).body
    assert translate(exchange, ()) is exchange


def test_the_replayer_answers_in_this_runs_folders(tmp_path: Path) -> None:
    tool_input = {"file_path": f"{OLD_WORK}/out.md", "content": "made"}
    answer_a = recorded(2, 1, turn(A6, 2), "A").model_copy(update={"body": tool_stream(tool_input, 25)})
    root = cassette(tmp_path, [answer_a])
    (root / "run.json").write_text(json.dumps({"workdir": OLD_WORK}))
    answer = Replayer(root, NEW_RUN, NEW_WORK).answer(1, "POST", "/v1/messages", turn(B6, 2))
    assert isinstance(answer, Exchange) and streamed_input(answer.body)["file_path"] == f"{NEW_WORK}/out.md"
