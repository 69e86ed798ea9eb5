"""The failed-turn watcher beside Codex (orch/agents/codex/watch.py): what it makes of Codex's session log.
The real binary's failed turns are in tests/agents/codex/test_adapter.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.agents.codex.watch import Logs, error_name, failure

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def _complete(error: object) -> str:
    payload = {"type": "task_complete", "turn_id": "t1", "last_agent_message": None, "error": error}
    return json.dumps({"type": "event_msg", "payload": payload})


@pytest.mark.parametrize(
    ("info", "name"),
    [
        ({"response_too_many_failed_attempts": {"http_status_code": 429}}, "rate_limit"),  # seen from the pinned Codex
        ({"http_connection_failed": {"http_status_code": 401}}, "authentication_failed"),
        ({"http_connection_failed": {"http_status_code": 529}}, "overloaded"),
        ({"http_connection_failed": {"http_status_code": 500}}, "server_error"),
        ({"http_connection_failed": {"http_status_code": 400}}, "invalid_request"),
        ("internal_server_error", "server_error"),
        ("context_window_exceeded", "invalid_request"),
        ("something_new", "unknown"),
        (None, "unknown"),
        ({"weird": "shape"}, "unknown"),
    ],
)
def test_codex_errors_get_the_names_the_worker_states_know(info: object, name: str) -> None:
    assert error_name(info) == name


def test_only_a_failed_task_complete_is_a_failure_and_its_url_is_dropped() -> None:
    message = "unexpected status 401 Unauthorized: no, url: http://127.0.0.1:1/t/orch-r-w1-SECRET/responses"
    event = failure(_complete({"message": message, "codex_error_info": "unauthorized"}))
    assert event is not None and event["hook_event_name"] == "StopFailure"
    assert event["error"] == "authentication_failed" and "SECRET" not in event["error_details"]
    assert failure(_complete(None)) is None  # a turn that ended well: its Stop hook said so
    for garbage in ("", "not json", "[1, 2]", '{"type": "event_msg", "payload": 3}', '"x"'):
        assert failure(garbage) is None


def test_logs_read_new_lines_only_and_never_half_a_line(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "12" / "04"
    day.mkdir(parents=True)
    old = day / "rollout-a.jsonl"
    old.write_text(_complete({"codex_error_info": "internal_server_error"}) + "\n")  # a resumed worker's past
    logs = Logs(str(tmp_path))
    assert logs.read() == []
    new = day / "rollout-b.jsonl"
    line = _complete({"codex_error_info": "internal_server_error"})
    new.write_text(line[:20])
    assert logs.read() == []
    new.write_text(line + "\n")
    with old.open("a") as fh:
        fh.write("{}\n")
    assert sorted(logs.read()) == sorted([line, "{}"])
    assert logs.read() == []
