"""The recording format (orch/gateway/recording/exchanges.py): one gzip member per exchange, so a crash tears at
most one and concurrent appends keep every exchange whole; a bad cassette is one line naming the file and the
line; where a recording ran comes from its run.json and its gateway's `started` event."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from orch.errors import UsageError
from orch.gateway.modeldir import Exchange
from orch.gateway.recording.exchanges import append_exchange, read_exchanges, recorded_folders
from orch.gateway.recording.replay import Replayer
from tests.gateway.recording.test_replay import A6, OLD_RUN, OLD_WORK, RECORDING_A, cassette, recorded, turn

pytestmark = pytest.mark.pure  # files in tmp_path only


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def line_of(exchange: Exchange) -> bytes:
    return gzip.compress((exchange.model_dump_json() + "\n").encode())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "replay cassette {root}/missing does not exist"),
        (lambda root: write(root / "a-file", b"x"), "corrupt recording {root}/a-file: not gzip"),  # a file: exported
        (lambda root: root, "replay cassette {root} has no recording (no exchanges file in {root}/model)"),
        (lambda root: write(root / "model" / "exchanges-1.jsonl.gz", b"").parent.parent, "is empty"),
        (
            lambda root: write(root / "model" / "exchanges-1.jsonl.gz", b"not gzip").parent.parent,
            "corrupt exchanges file {root}/model/exchanges-1.jsonl.gz line 1: not gzip",
        ),
        (
            lambda root: (
                write(
                    root / "model" / "exchanges-2.jsonl.gz", line_of(RECORDING_A[0]) + gzip.compress(b'{"seq": 1}\n')
                ).parent.parent
            ),
            "corrupt exchanges file {root}/model/exchanges-2.jsonl.gz line 2: ts: Field required",
        ),
        (
            lambda root: (
                write(
                    root / "model" / "exchanges-2.jsonl.gz", line_of(RECORDING_A[0]) + gzip.compress(b"[1, 2\n")
                ).parent.parent
            ),
            "corrupt exchanges file {root}/model/exchanges-2.jsonl.gz line 2: Invalid JSON",
        ),
    ],
)
def test_a_bad_cassette_is_a_one_line_error(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError) as caught:
        Replayer(path, "/r", "/w")
    assert message.format(root=tmp_path) in caught.value.one_line()
    assert "\n" not in caught.value.one_line()


def test_a_torn_member_loses_only_its_own_exchange(tmp_path: Path) -> None:
    # A crash mid-write tears the last member; a restarted gateway appends after it.
    good = [line_of(e) for e in RECORDING_A]
    path = write(tmp_path / "exchanges-1.jsonl.gz", good[0] + good[1][: len(good[1]) // 2] + good[2] + good[3][:-3])
    assert [e.seq for e in read_exchanges(path)] == [1, 3]


def test_the_model_folder_itself_is_a_cassette(tmp_path: Path) -> None:
    root = cassette(tmp_path, RECORDING_A)
    assert isinstance(Replayer(root / "model", "/r", "/w").answer(1, "POST", "/v1/messages", turn(A6, 2)), Exchange)


def test_concurrent_appends_keep_every_exchange_whole(tmp_path: Path) -> None:
    path = tmp_path / "exchanges-1.jsonl.gz"
    big = {**A6, "padding": "x" * 200_000}  # bigger than one write chunk
    threads = [
        threading.Thread(target=append_exchange, args=(path, recorded(seq, 1, big if seq % 2 else A6, "A")))
        for seq in range(1, 41)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(e.seq for e in read_exchanges(path)) == list(range(1, 41))
    with gzip.open(path, "rt") as fh:  # and any gzip reader reads it as one JSON-lines file
        assert sum(1 for _ in fh) == 40


def test_the_recording_folders_come_from_the_cassette(tmp_path: Path) -> None:
    root = cassette(tmp_path, RECORDING_A)
    assert recorded_folders(root) == (str(root), "")
    (root / "run.json").write_text(json.dumps({"name": "r1", "workdir": OLD_WORK}))
    assert recorded_folders(root) == (str(root), OLD_WORK)
    started = {"ts": 1.0, "event": "started", "data": {"run_dir": OLD_RUN, "workdir": "/old/other"}}
    (root / "model" / "gateway.jsonl").write_text("garbage\n" + json.dumps(started) + "\n")
    assert recorded_folders(root) == (OLD_RUN, "/old/other")
