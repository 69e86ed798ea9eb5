"""A strict worker's `orch bus post` (orch.run.workerpost): through the real bus server on the worker's own
socket, it posts and is refused exactly as the full path (orch.run.bus.post_through_controller) is; what it
cannot decide goes to the full path; and it imports no pydantic, enum or re (the point of it)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.errors import OrchError
from orch.run import bus, workerpost
from orch.run.folder import RunFolder
from orch.run.listeners import BusServer
from tests.helpers import run_info


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[RunFolder, Path]]:
    """Run `r` of two workers, its bus served with worker 1's own socket (as the relay serves a sandbox's)."""
    run = RunFolder.for_name("r")
    run.create(run_info("r", workers=2))
    server = BusServer(run, peercred=False).start()
    path = tmp_path / "w1.sock"
    server.listen(path, worker=1)
    try:
        yield run, path
    finally:
        server.stop()


def _post(path: Path, words: list[str], sender: int | None = None, stdin: bytes = b"") -> tuple[int | None, str]:
    err = io.StringIO()
    saved = sys.stdin, sys.stderr
    sys.stdin, sys.stderr = io.TextIOWrapper(io.BytesIO(stdin)), err
    try:
        code = workerpost.post(str(path), "r", sender, words)
    finally:
        sys.stdin, sys.stderr = saved
    return code, err.getvalue().strip()


def _full(run: RunFolder, path: Path, text: str, sender: int | None = None) -> str:
    try:
        bus.post_through_controller(run, sender, text, path)
    except OrchError as exc:
        return f"orch: error: {exc.one_line()}"
    return ""


def test_a_post_is_stamped_as_the_sockets_worker(own: tuple[RunFolder, Path]) -> None:
    run, path = own
    assert _post(path, ["hello", "there"]) == (0, "")
    assert _post(path, ['quotes " and \\ and ünïcode\nand a newline']) == (0, "")
    assert _post(path, ["-"], sender=1, stdin=b"from stdin\n") == (0, "")
    lines = [bus.parse_line(line) for line in bus.read_lines(run)]
    assert [(line.sender, line.text) for line in lines if line] == [
        ("W1", "hello there"),
        ("W1", 'quotes " and \\\\ and ünïcode\\nand a newline'),
        ("W1", "from stdin"),
    ]


@pytest.mark.parametrize(
    ("words", "sender", "stdin"),
    [
        (["x"], 2, b""),  # --as another worker: the server refuses it
        (["y" * (bus.MAX_TEXT + 1)], None, b""),  # too long: the server refuses it
    ],
    ids=["as-another", "too-long"],
)
def test_refusals_read_as_the_full_paths(
    own: tuple[RunFolder, Path], words: list[str], sender: int | None, stdin: bytes
) -> None:
    run, path = own
    code, said = _post(path, words, sender, stdin)
    assert (code, said) == (2, _full(run, path, " ".join(words), sender))


def test_bad_input_is_refused_before_sending(own: tuple[RunFolder, Path]) -> None:
    _, path = own
    assert _post(path, ["  "]) == (2, "orch: error: empty bus message (hint: give the text to post)")
    code, said = _post(path, ["-"], stdin=b"\xff\xfe")
    assert code == 2 and "standard input is not UTF-8 text (byte 0)" in said
    assert _post(path, ["-"], stdin=b"a\x00b")[0] == 2
    assert _post(path, ["caf\udce9"]) == (None, "")  # not UTF-8 on the command line: the full path says so


def test_no_server_reads_as_the_full_paths(tmp_path: Path) -> None:
    run = RunFolder.for_name("r")
    run.create(run_info("r", workers=2))
    gone = tmp_path / "gone.sock"
    code, said = _post(gone, ["hi"])
    assert (code, said) == (1, _full(run, gone, "hi"))


def test_which_socket(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    sandboxed = {"ORCH_RUN": str(run), "ORCH_SANDBOXED": "1"}
    assert workerpost.socket_path("r", sandboxed) == workerpost.OWN_SOCKET
    assert workerpost.socket_path("other", sandboxed) is None  # another run's name: the full path refuses it
    assert workerpost.socket_path("r", {}) is None  # the lead
    (run / "bus.md").touch()
    assert workerpost.socket_path("r", {"ORCH_RUN": str(run)}) is None  # it may write the bus: shared
    if os.geteuid() != 0:  # root may write any file
        (run / "bus.md").chmod(0o444)
        assert workerpost.socket_path("r", {"ORCH_RUN": str(run)}) == str(run / "bus.sock")
    assert workerpost.main(["r", "--help"], sandboxed) is None  # what only typer answers


def test_a_post_imports_only_the_c_layers(own: tuple[RunFolder, Path], tmp_path: Path) -> None:
    """The worker's whole `orch bus post` process: no pydantic, enum, re or socket module (the C `_socket`)."""
    run, path = own
    probe = (
        "import sys\n"
        "from orch.run import workerpost\n"
        "workerpost.OWN_SOCKET = sys.argv[1]\n"
        "code = workerpost.main(sys.argv[2:])\n"
        "print(sorted(m for m in ('pydantic', 'enum', 're', 'socket', 'json') if m in sys.modules), code)\n"
    )
    env = {**os.environ, "ORCH_RUN": str(run.root), "ORCH_SANDBOXED": "1"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(path), "r", "probe"], env=env, capture_output=True, text=True
    )
    assert done.stdout.split() == ["[]", "0"], done.stderr
    assert bus.read_lines(run)[-1].endswith("[W1] probe")
