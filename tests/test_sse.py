"""orch/sse.py: an event framed here is read back whole by the parser (and by any client that follows the
spec), whatever line ends its data holds; the model streams' framing is byte for byte what the APIs send."""

from __future__ import annotations

import json

import pytest

from orch import sse

pytestmark = pytest.mark.pure  # starts nothing: no process, no tmux, no network


def test_a_message_is_one_data_line_per_line_of_its_data() -> None:
    assert sse.message('{"a": 1}') == 'data: {"a": 1}\n\n'
    assert sse.message("x", event="ping", end="\r\n") == "event: ping\r\ndata: x\r\n\r\n"
    # A line end inside the data cannot end the event or start a field of its own (an `event:` or `id:`).
    assert sse.message("one\nevent: forged\r\nid: 9\rtwo") == (
        "data: one\ndata: event: forged\ndata: id: 9\ndata: two\n\n"
    )
    assert sse.comment("keepalive") == b": keepalive\n\n"
    assert sse.comment("a\nb") == b": a\n: b\n\n"


def test_frame_is_what_the_model_apis_send() -> None:
    events: list[dict[str, object]] = [{"type": "message_start", "n": 1}, {"type": "message_stop"}]
    assert sse.frame(events, named=True) == (
        b'event: message_start\ndata: {"type": "message_start", "n": 1}\n\n'
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )
    assert sse.frame([{"a": 1}], crlf=True, done=True) == b'data: {"a": 1}\r\n\r\ndata: [DONE]\r\n\r\n'


def test_what_is_framed_is_parsed_back_whole_even_split_anywhere() -> None:
    payload = {"text": "line\nbreak\r\nand </script> \u2028 data: x\n\n"}
    stream = (sse.message(json.dumps(payload)) + sse.comment("keepalive").decode() + sse.message("[1]")).encode()
    for cut in range(len(stream)):
        parser = sse.SseParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == [payload]  # [1] is not an object
