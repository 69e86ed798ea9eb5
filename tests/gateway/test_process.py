"""The gateway process: start, handle, tokens, auth, streaming through to a scripted upstream, stop."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from orch import procs
from orch.errors import OrchError
from orch.gateway.modeldir import Scheme, Upstream
from orch.gateway.process import GatewayHandle, handle_path, load_handle, save_handle, start_gateway, stop_gateway
from orch.offline.modelserver import ScriptedModelServer
from orch.waits import wait_until
from tests.gateway.gw import boot_for, call, events_of, gateway, main_call


def test_streams_a_message_through_a_scripted_upstream(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        assert stat.S_IMODE(gw.handle_file.stat().st_mode) == 0o600
        assert "control_key" not in json.loads(gw.handle_file.read_text())
        assert gw.client.health()
        token = gw.client.mint_token(1)
        assert token.startswith("orch-gwtest-w1-") and len(token.rsplit("-", 1)[1]) == 32
        reply = call(gw.base(token) + "/v1/messages", main_call("say hi"), headers={"x-api-key": token})
        assert reply.status == 200, reply.body
        assert reply.headers["content-type"].startswith("text/event-stream")
        kinds = [e["type"] for e in reply.events()]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert "content_block_delta" in kinds
        log = events_of(gw.folder)
        assert [e["event"] for e in log if e["event"] == "token-issued"] == ["token-issued"]
        assert token not in gw.folder.model_log.read_text()
        assert token not in gw.log.read_text()


def test_the_scripted_model_holds_its_socket_alone(tmp_path: Path) -> None:
    """The supervisor binds the model's socket and starts the model beside the server child: once the model is
    gone, a worker's call is answered at once (the connection refused), not left in a socket's backlog."""
    with gateway(tmp_path) as gw:
        children = procs.children(gw.handle.pid)
        [model] = [pid for pid in children if "orch.offline.modelserver" in procs.cmdline(pid)]
        [server] = [pid for pid in children if pid != model]  # a fork of the supervisor (orch.gateway.child)
        assert procs.cmdline(server) == procs.cmdline(gw.handle.pid) and gw.client.info()["pid"] == server
        token = gw.client.mint_token(1)
        os.kill(model, signal.SIGKILL)
        wait_until(lambda: not procs.alive(model), 10, "the scripted model to die")
        reply = call(gw.base(token) + "/v1/messages", main_call("say hi"), headers={"x-api-key": token})
        assert reply.status == 502, reply.body


def test_forwards_to_an_api_upstream_with_the_scheme(tmp_path: Path) -> None:
    with ScriptedModelServer() as upstream:
        api = Upstream(kind="api", url=upstream.url, scheme=Scheme.API_KEY, secret=SecretStr("sk-real"))
        boot = boot_for(tmp_path / "run", api)
        (tmp_path / "run").mkdir()
        with gateway(tmp_path, boot) as gw:
            token = gw.client.mint_token(2)
            reply = call(gw.base(token) + "/v1/messages", main_call(stream=False), headers={"x-api-key": token})
            assert reply.status == 200 and reply.json()["type"] == "message"
            reply = call(gw.base(token) + "/v1/messages/count_tokens", {"messages": []})
            assert reply.status == 200 and "input_tokens" in reply.json()
        assert [r.auth for r in upstream.requests] == ["api-key", "api-key"]


def test_a_bad_token_is_401_and_an_event(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        old = gw.client.mint_token(1)
        new = gw.client.mint_token(1)  # replaces, i.e. revokes, the first
        for token in ("orch-gwtest-w1-" + "0" * 32, old):
            reply = call(gw.base(token) + "/v1/messages", main_call())
            assert reply.status == 401
            assert reply.headers["x-should-retry"] == "false"
            assert reply.json() == {
                "type": "error",
                "error": {"type": "authentication_error", "message": "orch gateway: unknown worker token"},
            }
        assert call(f"{gw.handle.url}/v1/messages", main_call()).status == 401  # no token at all
        assert call(gw.base(new) + "/v1/messages", main_call()).status == 200
        bad = [e for e in events_of(gw.folder) if e["event"] == "bad-token"]
        assert len(bad) == 3 and bad[-1]["data"]["token"] == "missing"
        assert old not in gw.folder.model_log.read_text()


def test_control_needs_the_control_key(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        url = gw.handle.url
        assert call(f"{url}/_orch/tokens/1").status == 401
        assert call(f"{url}/_orch/tokens/1", headers={"x-orch-control": "wrong"}).status == 401
        assert call(f"{url}/_orch/health", method="GET").status == 401
        assert not [e for e in events_of(gw.folder) if e["event"] == "token-issued"]


def test_handles_save_load_and_stop(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        saved = tmp_path / "saved" / "h.json"
        save_handle(saved, gw.handle)
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        assert load_handle(saved).control_key.get_secret_value() == gw.handle.control_key.get_secret_value()
        assert "**" in repr(gw.handle)
        pid = gw.handle.pid
        assert stop_gateway(saved)
        assert not saved.exists()
        assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1][:3]


def test_stop_leaves_a_foreign_pid_alone(tmp_path: Path) -> None:
    handle = tmp_path / "h.json"
    handle.write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": os.getpid()}))
    assert not stop_gateway(handle)  # our own pid is no gateway: never signalled


def test_a_bad_boot_is_one_line(tmp_path: Path) -> None:
    boot = boot_for(tmp_path, Upstream(kind="api", url=""))
    with pytest.raises(OrchError, match="upstream kind api needs a url"):
        start_gateway(boot, tmp_path / "h.json", tmp_path / "log")


def test_handle_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orch_home: Path) -> None:
    assert handle_path("r1") == orch_home / "gateways" / "r1.json"
    assert not (orch_home / "gateways").exists()  # a path, not a side effect
    save_handle(handle_path("r1"), GatewayHandle(url="http://127.0.0.1:1", pid=1, control_key=SecretStr("k")))
    assert stat.S_IMODE((orch_home / "gateways").stat().st_mode) == 0o700
    monkeypatch.setenv("ORCH_IN_CONTAINER", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert handle_path("r1") == tmp_path / "orch-gateway-r1.json"


def test_handle_reprs_hide_the_key() -> None:
    handle = GatewayHandle(url="http://x", pid=1, control_key="k-secret")  # type: ignore[arg-type]
    assert "k-secret" not in repr(handle) and "k-secret" not in str(handle)
