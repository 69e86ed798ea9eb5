"""The scripted model server: each kind of answer over HTTP (the stepping itself: test_script.py), side calls,
the request log, and the real Claude Code binary driven by it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import orch
from orch.offline.modelserver import ScriptedModelServer
from orch.waits import wait_for_paths
from tests.offline.test_script import CASES, INLINE, REMINDER, script, user

TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Write")]
API_KEY = "sk-ant-orch-dummy-key-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


# ---------------------------------------------------------------- helpers


def http(
    srv: ScriptedModelServer, path: str, body: dict[str, Any] | None = None, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(srv.url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    req.add_header("x-api-key", API_KEY)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for chunk in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
        if "data" in lines:
            event = json.loads(lines["data"])
            assert event["type"] == lines["event"]
            events.append(event)
    return events


def assemble(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild the assistant message from its stream, as an SDK would."""
    message: dict[str, Any] = events[0]["message"]
    partial: dict[int, str] = {}
    for event in events[1:]:
        if event["type"] == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            delta, block = event["delta"], message["content"][event["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    for index, text in partial.items():
        message["content"][index]["input"] = json.loads(text)
    return message


def ask(srv: ScriptedModelServer, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """One streamed main-loop request; returns (status, assembled message or error JSON)."""
    body = {"model": "claude-test", "max_tokens": 1000, "stream": True, "tools": TOOLS, "messages": messages}
    status, headers, raw = http(srv, "/v1/messages?beta=true", body)
    if status != 200:
        return status, json.loads(raw)
    assert headers["Content-Type"] == "text/event-stream"
    return status, assemble(sse_events(raw))


# Each kind of answer as the Anthropic API renders it (the stepping itself: test_script.py, pure).
OVER_HTTP = {
    case[0]: case
    for case in CASES
    if case[0] in ("no-script-ok", "inline-first-step", "fail-rate-limit", "fail-overloaded")
}
HTTP_ERRORS = {"rate_limit": (429, "rate_limit_error"), "overloaded": (529, "overloaded_error")}


@pytest.mark.parametrize(("messages", "expected"), [c[1:] for c in OVER_HTTP.values()], ids=OVER_HTTP.keys())
def test_each_answer_kind_over_http(
    server: ScriptedModelServer, messages: list[dict[str, Any]], expected: tuple[Any, ...]
) -> None:
    status, reply = ask(server, messages)
    if expected[0] == "fail":
        code, error = HTTP_ERRORS[expected[1]]
        assert (status, reply["type"], reply["error"]["type"]) == (code, "error", error)
        return
    assert status == 200
    [block] = reply["content"]
    if expected[0] == "text":
        assert reply["stop_reason"] == "end_turn"
        assert block["type"] == "text"
        assert block["text"].startswith(expected[1])
    else:
        assert reply["stop_reason"] == "tool_use"
        assert (block["type"], block["name"], block["input"]) == ("tool_use", expected[0], expected[1])


def test_stream_shape_and_unique_ids(server: ScriptedModelServer) -> None:
    ids = set()
    for _ in range(3):
        for messages in ([user(INLINE)], [user("hi")]):
            _, _, raw = http(
                server, "/v1/messages", {"model": "m", "stream": True, "tools": TOOLS, "messages": messages}
            )
            events = sse_events(raw)
            kinds = [e["type"] for e in events]
            assert kinds[:2] == ["message_start", "content_block_start"]
            assert kinds[-4:] == ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]
            message = assemble(events)
            assert message["usage"]["input_tokens"] > 10 and message["usage"]["output_tokens"] > 0
            ids.add(message["id"])
            ids.update(b["id"] for b in message["content"] if b["type"] == "tool_use")
    assert len(ids) == 9


def test_side_calls_never_step(server: ScriptedModelServer) -> None:
    plain = {"model": "m", "max_tokens": 10, "messages": [user(INLINE)]}
    status, _, raw = http(server, "/v1/messages", plain)
    message = json.loads(raw)
    assert status == 200 and message["stop_reason"] == "end_turn"
    assert message["content"][0]["type"] == "text" and message["id"].startswith("msg_")
    # Claude Code 2.1.332 streams its title request, with no tools and a JSON schema.
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    title = {
        **plain,
        "stream": True,
        "tools": [],
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }
    status, _, raw = http(server, "/v1/messages", title)
    assert json.loads(assemble(sse_events(raw))["content"][0]["text"]) == {"title": "Scripted session"}
    assert [r.step for r in server.requests] == ["side", "side"]


def test_count_tokens_and_other_paths(server: ScriptedModelServer) -> None:
    status, _, raw = http(server, "/v1/messages/count_tokens", {"model": "m", "messages": [user("x" * 400)]})
    assert status == 200 and json.loads(raw)["input_tokens"] > 100
    for method, path in (("POST", "/v1/complete"), ("GET", "/v1/models")):
        status, _, raw = http(server, path, {} if method == "POST" else None, method=method)
        assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
    assert http(server, "/", None, method="GET")[0] == 200
    assert http(server, "/", None, method="HEAD")[0] == 200
    req = urllib.request.Request(server.url + "/v1/messages", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(req, timeout=10)
    assert bad.value.code == 400


def test_request_log(server: ScriptedModelServer) -> None:
    ask(server, [user(REMINDER, INLINE)])
    ask(server, [user(script({"fail": "overloaded"}))])
    first, second = server.requests
    assert (first.path, first.model, first.stream, first.step) == ("/v1/messages", "claude-test", True, "Bash")
    assert first.prompt == INLINE.strip()
    assert second.step == "fail:overloaded"
    assert API_KEY not in repr(server.requests)
    server.stop()
    assert len(server.requests) == 2  # still readable after stop


def test_main_serves_until_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(orch.__file__).parent.parent)}
    url_file = tmp_path / "modelserver.url"
    argv = [sys.executable, "-m", "orch.offline.modelserver", "--port", "0", "--url-file", str(url_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert wait_for_paths([url_file], 10) == []
        assert url_file.read_text() == url + "\n"
        with urllib.request.urlopen(url + "/", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- the real Claude Code binary


def run_claude(
    claude_bin: Path,
    srv: ScriptedModelServer,
    tmp: Path,
    prompt: str,
    *extra: str,
    settings: dict[str, Any] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`claude -p PROMPT` in tmp/work with a seeded config dir; returns the process and its result event."""
    work, config = tmp / "work", tmp / "config"
    work.mkdir(exist_ok=True)
    config.mkdir(exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "hasSeenAutoDefaultNudge": True,
        "projects": {str(work): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
    }
    (config / ".claude.json").write_text(json.dumps(state))
    (config / "settings.json").write_text(json.dumps({"skipDangerousModePermissionPrompt": True, **(settings or {})}))
    env = {
        **os.environ,
        "CLAUDE_CONFIG_DIR": str(config),
        "ANTHROPIC_BASE_URL": srv.url,
        "ANTHROPIC_API_KEY": API_KEY,
        "IS_SANDBOX": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    argv = [str(claude_bin), "-p", prompt, "--permission-mode", "bypassPermissions"]
    argv += ["--output-format", "stream-json", "--verbose", *extra]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [e for e in events if e.get("type") == "result"]
    assert results, f"no result event (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return proc, results[-1]


@pytest.mark.claude
def test_claude_follows_brief(claude_bin: Path, server: ScriptedModelServer, tmp_path: Path) -> None:
    log, out = tmp_path / "log.txt", tmp_path / "result.md"
    brief = tmp_path / "task.md"
    brief.write_text(
        script(
            {"bash": f"echo step-one >> {log}"},
            {"write": str(out), "content": "result\nok"},
            {"reply": "all done"},
            prose="# Task\nFollow the script.",
        )
    )
    proc, result = run_claude(claude_bin, server, tmp_path, f"Read and follow the instructions in {brief} then begin")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (result["is_error"], result["result"]) == (False, "all done")
    assert log.read_text() == "step-one\n"
    assert out.read_text() == "result\nok"
    assert [r.step for r in server.requests if r.step != "side"] == ["Read", "Bash", "Write", "reply"]


@pytest.mark.claude
def test_claude_rate_limit_fires_stop_failure_then_resumes(
    claude_bin: Path, server: ScriptedModelServer, tmp_path: Path
) -> None:
    log, hook_log = tmp_path / "log.txt", tmp_path / "stop-failure.jsonl"
    hook = {"type": "command", "command": f"cat >> {hook_log}; echo >> {hook_log}", "timeout": 10}
    settings = {"hooks": {"StopFailure": [{"matcher": "", "hooks": [hook]}]}}
    prompt = script({"bash": f"echo before >> {log}"}, {"fail": "rate_limit"}, {"reply": "resumed"})
    _, result = run_claude(claude_bin, server, tmp_path, prompt, settings=settings)
    assert result["is_error"] is True and result["api_error_status"] == 429
    assert log.read_text() == "before\n"
    assert [r.step for r in server.requests if r.step != "side"] == ["Bash", "fail:rate_limit"]  # no retries
    payload = json.loads(hook_log.read_text().splitlines()[0])
    assert (payload["hook_event_name"], payload["error"]) == ("StopFailure", "rate_limit")
    # A nudge in the same session passes the fail step.
    _, resumed = run_claude(
        claude_bin, server, tmp_path, "continue", "--resume", result["session_id"], settings=settings
    )
    assert (resumed["is_error"], resumed["result"]) == (False, "resumed")


def test_chunked_request_bodies_are_read_whole() -> None:
    """A chunked body must be consumed, or the next request on the connection is garbage (a 404)."""
    import http.client

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with ScriptedModelServer() as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=10)
        for _ in range(2):  # the second request on the same connection must parse
            conn.putrequest("POST", "/v1/messages")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.putheader("Content-Type", "application/json")
            conn.endheaders()
            for part in (body[:10], body[10:]):
                conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            conn.send(b"0\r\n\r\n")
            response = conn.getresponse()
            assert response.status == 200
            response.read()
        conn.close()
        assert [r.step for r in server.requests] == ["side", "side"]
