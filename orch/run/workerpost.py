"""A worker's `orch bus post` under strict isolation, with the standard library's C parts alone.

A worker posts many times, each post a process of its own, and the relay or controller stamps and checks
every post anyway (orch.run.listeners): the worker's side has only to send it. Importing pydantic and the
run's records for that was nine tenths of a post (bench/README.md, "Where a fleet's CPU goes"), so a post
from inside a run's sandbox (ORCH_SANDBOXED: its own socket of the relay's) or from a worker that may not
write bus.md (a container's strict run: the run's bus.sock) is sent from here, before orch.cli.main
imports anything else: `_socket` and `_json` are the C modules beneath socket and json, whose Python
layers import enum and re. Everything else (another run's name, an `--as` that is not a number, a lone
surrogate, a lead's post) takes the full path, unchanged.

The wire format is orch.run.bus's PostRequest: `{"sender": N or null, "text": "..."}`, one line; the answer
`{"ok": true}` or `{"ok": false, "error": "..."}`. Environment variables are declared in orch/settings/.
"""

from __future__ import annotations

import _json
import _socket
import os
import sys
import time
from collections.abc import Mapping, Sequence

STDIN = "-"
OWN_SOCKET = "/run/orch/posts.sock"
"""orch.run.paths.SANDBOX_SOCKETS / OWN_BUS: where the sandbox's own bus socket is bound."""
TIMEOUT = 10.0
OK = b'{"ok": true}'
USAGE_EXIT, FAILURE_EXIT = 2, 1


def parse(args: Sequence[str]) -> tuple[str, int | None, list[str]] | None:
    """The NAME, --as and TEXT of `orch bus post ARGS` as click would read them; None: ask typer."""
    positional: list[str] = []
    sender: int | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1 :]
            break
        if arg == "--as" or arg.startswith("--as="):
            if arg == "--as":
                if i + 1 == len(args):
                    return None
                i += 1
                value = args[i]
            else:
                value = arg.removeprefix("--as=")
            if not (value.isascii() and value.isdigit()):
                return None
            sender = int(value)  # the last --as wins, as in click
        elif arg.startswith("-") and arg != "-":
            return None  # --help, an unknown option or a negative number: click's answer is typer's
        else:
            positional.append(arg)
        i += 1
    if len(positional) < 2:
        return None  # a missing NAME or TEXT: typer's usage message
    return positional[0], sender, positional[1:]


def socket_path(name: str, environ: Mapping[str, str]) -> str | None:
    """Where this process posts to run `name` through its relay or controller; None: not a strict worker of
    that run (a lead, a shared worker, another run's name)."""
    run = environ.get("ORCH_RUN", "")
    if not run or os.path.basename(run.rstrip("/")) != name:
        return None
    if environ.get("ORCH_SANDBOXED") == "1":
        return OWN_SOCKET
    if os.access(os.path.join(run, "bus.md"), os.W_OK):
        return None  # it may write the bus itself (shared isolation): the full path does
    return os.path.join(run, "bus.sock")


def main(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> int | None:
    """Post from a strict worker: the exit code; None to let the full `orch` take ARGS."""
    parsed = parse(args)
    path = socket_path(parsed[0], environ) if parsed is not None else None
    if parsed is None or path is None:
        return None
    return post(path, *parsed)


def post(path: str, name: str, sender: int | None, words: Sequence[str]) -> int | None:
    """Post `words` (a lone `-`: standard input) to run `name`'s socket at `path`: the exit code; None for
    text the full path must refuse itself."""
    if list(words) == [STDIN]:  # as `orch send --file -`; `-` among other words is text
        raw = sys.stdin.buffer.read()
        if b"\x00" in raw:
            return _fail("standard input looks binary (contains NUL bytes) (hint: send UTF-8 text)", USAGE_EXIT)
        try:
            text = raw.decode("utf-8").rstrip("\r\n")  # an `echo ... |`'s newline would show as \n on the bus
        except UnicodeDecodeError as exc:
            return _fail(f"standard input is not UTF-8 text (byte {exc.start}) (hint: convert it to UTF-8)", 2)
    else:
        text = " ".join(words)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None  # bytes that are not UTF-8 on the command line: the full path says so
    if not text.strip():
        return _fail("empty bus message (hint: give the text to post)", USAGE_EXIT)
    who = "null" if sender is None else str(sender)
    request = f'{{"sender": {who}, "text": {_json.encode_basestring_ascii(text)}}}\n'
    return _send(name, path, request.encode())


def _send(name: str, path: str, request: bytes) -> int:
    hint = "(hint: is the run still running?)"
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(TIMEOUT)
            connect(sock, path)
            try:  # noqa: SIM105 - contextlib's import would cost more than the rest of this module
                sock.sendall(request)
            except BrokenPipeError:
                pass  # refused at once (a cap): its one line is there to read
            reply = b""
            while not reply.endswith(b"\n") and len(reply) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
        finally:
            sock.close()
    except OSError as exc:
        return _fail(f"cannot post to run {name}'s bus: {exc.strerror or exc} {hint}", FAILURE_EXIT)
    reply = reply.strip()
    if reply == OK:
        return 0
    marker = b'"error": "'
    at = reply.find(marker)
    if not reply.startswith(b'{"ok": false') or at < 0:
        return _fail(f"run {name}'s bus gave no answer {hint}", FAILURE_EXIT)
    try:
        error, _ = _json.scanstring(reply.decode(), at + len(marker))
    except ValueError:
        error = "the bus refused the post"
    return _fail(error, USAGE_EXIT)


def connect(sock: _socket.socket, path: str) -> None:
    """Connect, waiting while the server's backlog is full (a Unix socket refuses with EAGAIN then)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)  # the backlog drains in microseconds: a bounded retry, not a wait for a state


def _fail(message: str, code: int) -> int:
    print(f"orch: error: {message}", file=sys.stderr)  # as orch.cli.commands.OrchGroup says it
    return code
