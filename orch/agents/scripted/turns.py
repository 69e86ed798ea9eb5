"""The scripted agent's model turns: a minimal Claude-Code-like agent loop over the Messages API.

With `--model` (offline runs: the adapter passes it), each prompt the scripted agent gets is sent to its
model (the run's gateway, `ANTHROPIC_BASE_URL`, whose offline upstream is orch's scripted model), with
Claude Code's three file and shell tools on offer. Each tool call the model asks for is run here and its
result sent back, until the model ends its turn. So the controller's fast tests go through the same
gateway path (token, ledger, usage, budget, recording) as a real agent, with no agent binary.

The history lives for the session (a restart starts afresh, like an agent without a session store). A
turn that fails on an HTTP error ends like Claude Code's: a StopFailure hook naming the error kind.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orch.sse import SseParser

Emit = Callable[..., None]
Say = Callable[[str], None]

TIMEOUT = 120.0  # one model request through the gateway (the scripted model answers at once)
MAX_STEPS = 200  # tool calls in one turn: a script that loops must not spin forever
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command in the working directory.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {
        "name": "Write",
        "description": "Write a file.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["file_path", "content"],
        },
    },
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
    },
]
# The Messages API's error types as Claude Code's StopFailure hook names them (orch.fleet.workerstate).
ERRORS = {
    "rate_limit_error": "rate_limit",
    "overloaded_error": "overloaded",
    "authentication_error": "authentication_failed",
    "permission_error": "authentication_failed",
    "invalid_request_error": "invalid_request",
    "billing_error": "billing_error",
}

Message = dict[str, Any]


class TurnFailed(Exception):
    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error


class ModelSession:
    """One agent session's conversation with its model."""

    def __init__(self, base_url: str, key: str, emit: Emit, say: Say) -> None:
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.key = key
        self.emit = emit
        self.say = say
        self.messages: list[Message] = []

    def turn(self, prompt: str) -> str:
        """Run one prompt to the end of the model's turn; the last text it said."""
        if self.messages and self.messages[-1]["role"] == "user":
            # The last turn failed before any answer: the prompt joins it, as Claude Code merges them.
            self.messages[-1]["content"].append({"type": "text", "text": prompt})
        else:
            self.messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
        for _ in range(MAX_STEPS):
            content, stop = self.ask()
            self.messages.append({"role": "assistant", "content": content})
            uses = [b for b in content if b.get("type") == "tool_use"]
            if stop != "tool_use" or not uses:
                return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
            self.messages.append({"role": "user", "content": [self.run_tool(b) for b in uses]})
        return f"stopped after {MAX_STEPS} tool calls"

    def ask(self) -> tuple[list[Message], str | None]:
        body = {"model": "scripted", "max_tokens": 4096, "stream": True, "tools": TOOLS, "messages": self.messages}
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-api-key": self.key, "anthropic-version": "2023-06-01"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return assemble(sse_data(response))
        except urllib.error.HTTPError as exc:
            raw = exc.read().decode(errors="replace")
            try:
                kind = str(json.loads(raw)["error"]["type"])
            except (ValueError, KeyError, TypeError):
                kind = ""
            raise TurnFailed(ERRORS.get(kind, "server_error"), f"HTTP {exc.code}: {raw[:200]}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise TurnFailed("unknown", f"no answer from the model: {exc}") from None

    def run_tool(self, use: Message) -> Message:
        name, tool_input = str(use.get("name")), use.get("input") or {}
        self.emit("PreToolUse", tool_name=name, tool_input=tool_input)
        output, is_error = run_tool(name, tool_input)
        self.say(f"● {name} {json.dumps(tool_input)[:200]}\n{output[-2000:]}")
        self.emit("PostToolUse", tool_name=name, tool_input=tool_input, tool_response={"output": output})
        return {"type": "tool_result", "tool_use_id": use.get("id"), "content": output, "is_error": is_error}


def run_tool(name: str, tool_input: dict[str, Any]) -> tuple[str, bool]:
    """A tool call as Claude Code runs it: output text and whether it failed."""
    try:
        if name == "Bash":
            command = str(tool_input.get("command", ""))
            done = subprocess.run(
                ["sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=600
            )
            output = (done.stdout + done.stderr).decode(errors="replace")
            return output + (f"\nExit code {done.returncode}" if done.returncode else ""), done.returncode != 0
        path = Path(str(tool_input.get("file_path", "")))
        if name == "Write":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(tool_input.get("content", "")))
            return f"File created successfully at: {path}", False
        if name == "Read":
            lines = path.read_text(errors="replace").splitlines()
            return "\n".join(f"{i}\t{line}" for i, line in enumerate(lines, 1)), False
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{name} failed: {exc}", True
    return f"no such tool: {name}", True


def sse_data(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of an event stream, read line by line as they arrive."""
    parser = SseParser()
    for line in lines:
        yield from parser.feed(line)
    yield from parser.feed(b"\n\n")  # a last event without its blank line


def assemble(events: Iterator[dict[str, Any]]) -> tuple[list[Message], str | None]:
    """A streamed Messages API answer as its content blocks and stop reason."""
    blocks: dict[int, Message] = {}
    partial: dict[int, str] = {}
    stop = None
    for event in events:
        kind, index = event.get("type"), int(event.get("index", 0))
        if kind == "content_block_start":
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                blocks[index]["text"] = blocks[index].get("text", "") + delta["text"]
            elif delta.get("type") == "input_json_delta":
                partial[index] = partial.get(index, "") + delta["partial_json"]
        elif kind == "message_delta":
            stop = event["delta"].get("stop_reason")
        elif kind == "error":
            raise TurnFailed(ERRORS.get(event["error"].get("type", ""), "server_error"), str(event["error"]))
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    return [blocks[i] for i in sorted(blocks)], stop
