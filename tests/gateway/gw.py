"""Helpers for the gateway tests: boots, a started gateway, and plain HTTP against it."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from orch.gateway.modeldir import GatewayBoot, Upstream
from orch.gateway.process import GatewayClient, GatewayHandle, start_gateway, stop_gateway
from orch.run.folder import RunFolder

SCRIPTED = Upstream(kind="scripted")


def boot_for(run_dir: Path, upstream: Upstream | None = SCRIPTED, **extra: Any) -> GatewayBoot:
    return GatewayBoot(
        run="gwtest",
        run_dir=str(run_dir),
        upstreams=[] if upstream is None else [upstream],
        control_key=SecretStr(secrets.token_hex(16)),
        offline=upstream is None or upstream.kind == "scripted",
        **extra,
    )


@dataclass
class Running:
    handle: GatewayHandle
    handle_file: Path
    log: Path
    folder: RunFolder

    @property
    def client(self) -> GatewayClient:
        return GatewayClient(self.handle)

    def base(self, token: str) -> str:
        return f"{self.handle.url}/t/{token}"


@contextmanager
def gateway(tmp: Path, boot: GatewayBoot | None = None) -> Iterator[Running]:
    run_dir = tmp / "run"
    run_dir.mkdir(exist_ok=True)
    boot = boot or boot_for(run_dir)
    handle_file, log = tmp / "gateway.handle.json", tmp / "gateway.log"
    handle = start_gateway(boot, handle_file, log)
    try:
        yield Running(handle, handle_file, log, RunFolder(Path(boot.run_dir)))
    finally:
        stop_gateway(handle_file)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        text = self.body.decode()
        return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def call(
    url: str, body: object = None, method: str = "POST", headers: dict[str, str] | None = None, raw: bytes | None = None
) -> Reply:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    for name, value in {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        **(headers or {}),
    }.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def main_call(text: str = "hello", stream: bool = True, **extra: Any) -> dict[str, Any]:
    """A request the scripted model treats as a main-loop turn (streamed, tools offered)."""
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 1000,
        "stream": stream,
        "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def events_of(folder: RunFolder) -> list[dict[str, Any]]:
    if not folder.model_log.exists():
        return []
    return [json.loads(line) for line in folder.model_log.read_text().splitlines() if line.strip()]


def health(run: Running) -> dict[str, Any]:
    reply = call(
        f"{run.handle.url}/_orch/health",
        method="GET",
        headers={"x-orch-control": run.handle.control_key.get_secret_value()},
    )
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


def script_prompt(*steps: dict[str, Any]) -> str:
    lines = "\n".join(json.dumps(s) for s in steps)
    return f"Do this.\n\n```orch-script\n{lines}\n```\n"


def settled(run: Running) -> RunFolder:
    """The run folder once the gateway has written every exchange answered so far (it writes them just
    after each answer, off the worker's path)."""
    run.client.settle()
    return run.folder


def usage_of(folder: RunFolder) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(folder.model_usage.read_text())
    return result


def ledger_of(folder: RunFolder) -> list[dict[str, Any]]:
    if not folder.model_ledger.exists():
        return []
    return [json.loads(line) for line in folder.model_ledger.read_text().splitlines() if line.strip()]
