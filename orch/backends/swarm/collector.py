"""A swarm run's collector: where its run folder comes home while it runs on another node.

One per run, a service of its own on the manager that `DOCKER_HOST` names, on the run's overlay network, with
a volume there (`Home`). The run's task pushes a pass (orch.backends.swarm.passes) to it every few seconds and
a last one when it ends; a new task (the first, or one resuming on another node) takes the whole folder and
the workspace from it before it starts. The user's side reads it through the manager's engine alone: each
pass it took is kept in the volume's pass log, which orch.backends.swarm.home pulls and applies in order.

    python -m orch.backends.swarm.collector --life N [--port P]

It starts as root only to give its volume to the run's uid, then drops to that uid with no capability. A push
must carry the life's token (a swarm secret of that life, readable by the run's uid alone in the run's task)
and be of that life: a task of an earlier life, still running on a node cut off and back, is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from aiohttp import web

from orch.backends.swarm.names import COLLECTOR_PORT, HOME_MOUNT, SYNC_SECRET
from orch.backends.swarm.passes import PassError, make_pass
from orch.backends.swarm.receive import apply_pass
from orch.run.files import atomic_write
from orch.run.uids import drop_argv, no_new_privs
from orch.settings.compose import UID
from orch.settings.internal import GID

READY_LINE = "orch-collector: ready"
"""Printed once its volume's folders exist: the user's side may put the run's first folder there."""
MAX_PASS = 8 << 30
"""The largest pass taken (a run folder that writes more between two passes is cut off, said in one line)."""
CHUNK = 1 << 20


@dataclass(frozen=True)
class Home:
    """The collector's volume: the run folder's copy, the workspace, the pass log and its state."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def passes(self) -> Path:
        return self.root / "passes"

    def pass_file(self, seq: int) -> Path:
        return self.passes / f"{seq:08d}.tar"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def acked(self) -> Path:
        """The last pass the user's side applied to its copy (it puts this file through the manager's engine):
        the log keeps only the passes after it."""
        return self.root / "acked"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


class State:
    """The collector's books (`state.json`): the last pass applied and the life it takes passes from."""

    def __init__(self, seq: int = 0, life: int = 0, ended: dict[str, int] | None = None) -> None:
        self.seq, self.life, self.ended = seq, life, ended

    @classmethod
    def load(cls, home: Home) -> State:
        try:
            data = json.loads(home.state.read_text())
        except (OSError, ValueError):
            return cls()
        return cls(int(data.get("seq", 0)), int(data.get("life", 0)), data.get("ended"))

    def save(self, home: Home) -> None:
        atomic_write(home.state, json.dumps({"seq": self.seq, "life": self.life, "ended": self.ended}) + "\n")


class Collector:
    """The handlers: pushes applied one at a time, off the event loop."""

    def __init__(self, home: Home, life: int, token: str) -> None:
        self.home, self.token = home, token
        self.lock = asyncio.Lock()
        for folder in (home.run, home.workspace, home.passes, home.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self.state = State.load(home)
        self._catch_up()
        if self.state.life != life:  # a new life: the last one's end no longer says how the run is
            self.state.life, self.state.ended = life, None
            self.state.save(home)

    def _catch_up(self) -> None:
        """Passes logged but not applied (the collector stopped between the two): applied now, in order."""
        while self.home.pass_file(self.state.seq + 1).is_file():
            with self.home.pass_file(self.state.seq + 1).open("rb") as body, contextlib.suppress(PassError):
                apply_pass(self.home.run, body)
            self.state.seq += 1
        self.state.save(self.home)

    def _allowed(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def push(self, request: web.Request) -> web.Response:
        if not self._allowed(request):
            return web.json_response({"error": "not this life's token"}, status=401)
        body = await _body(request, self.home.tmp)
        try:
            async with self.lock:
                seq = self.state.seq + 1
                done = await asyncio.to_thread(self._take, body, seq)
        except PassError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        finally:
            body.close()
        return web.json_response({"seq": self.state.seq, "stale": done})

    def _take(self, body: IO[bytes], seq: int) -> list[str]:
        """Log the pass, apply it, then count it: a collector stopped in between applies it at its start."""
        log = self.home.pass_file(seq)
        with tempfile.NamedTemporaryFile(dir=self.home.tmp, delete=False) as out:
            shutil.copyfileobj(body, out)
        body.seek(0)
        try:
            done = apply_pass(self.home.run, body, life=self.state.life)
        except PassError:
            os.unlink(out.name)
            raise
        os.replace(out.name, log)
        self.state.seq = seq
        self.state.save(self.home)
        self._prune()
        return done.stale

    def _prune(self) -> None:
        """The passes the user's side has applied leave the log (its copy of the folder has them; a new task
        restores from the collector's copy, never from the log)."""
        try:
            acked = min(int(self.home.acked.read_text().strip() or 0), self.state.seq)
        except (OSError, ValueError):
            return
        for done in self.home.passes.glob("*.tar"):
            if done.stem.isdigit() and int(done.stem) <= acked:
                done.unlink(missing_ok=True)

    async def end(self, request: web.Request) -> web.Response:
        """The run's task says it ended (after its last pass): how, for the user's side."""
        if not self._allowed(request):
            return web.json_response({"error": "not this life's token"}, status=401)
        code = int(request.query.get("code", "1"))
        async with self.lock:
            self.state.ended = {"life": self.state.life, "code": code}
            self.state.save(self.home)
        return web.json_response({"seq": self.state.seq})

    async def folder(self, request: web.Request) -> web.StreamResponse:
        """The whole run folder (`/run`) or workspace (`/workspace`), as one pass, for a task about to start."""
        if not self._allowed(request):
            return web.json_response({"error": "not this life's token"}, status=401)
        root = self.home.run if request.path == "/run" else self.home.workspace
        async with self.lock:
            out, _, _ = await asyncio.to_thread(make_pass, root, {}, self.state.life)
        response = web.StreamResponse(headers={"Content-Type": "application/x-tar"})
        await response.prepare(request)
        with out:
            while chunk := out.read(CHUNK):
                await response.write(chunk)
        await response.write_eof()
        return response


async def _body(request: web.Request, tmp: Path) -> IO[bytes]:
    body = tempfile.SpooledTemporaryFile(max_size=8 << 20, dir=str(tmp))  # noqa: SIM115 (closed by the caller)
    size = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        size += len(chunk)
        if size > MAX_PASS:
            body.close()
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_PASS, actual_size=size)
        body.write(chunk)
    body.seek(0)
    return body


def app(home: Home, life: int, token: str) -> web.Application:
    collector = Collector(home, life, token)
    application = web.Application(client_max_size=MAX_PASS)
    application.add_routes(
        [
            web.post("/push", collector.push),
            web.post("/end", collector.end),
            web.get("/run", collector.folder),
            web.get("/workspace", collector.folder),
        ]
    )
    return application


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orch.backends.swarm.collector")
    parser.add_argument("--life", type=int, required=True)
    parser.add_argument("--port", type=int, default=COLLECTOR_PORT)
    parser.add_argument("--home", type=Path, default=Path(HOME_MOUNT))
    parser.add_argument("--token-file", type=Path, default=Path(f"/run/secrets/{SYNC_SECRET}"))
    args = parser.parse_args(argv)
    uid, gid = UID.get(), GID.get()
    if os.geteuid() == 0 and uid and gid:  # root only to give the volume to the run's uid; then none of it
        os.chown(args.home, uid, gid)
        os.execvp("setpriv", [*drop_argv(uid, gid), sys.executable, "-m", __spec__.name, *(argv or sys.argv[1:])])
    token = args.token_file.read_text().strip()
    application = app(Home(args.home), args.life, token)  # its folders made, its log caught up
    print(f"{READY_LINE}: life {args.life} on port {args.port}", flush=True)
    web.run_app(application, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    no_new_privs()  # first, as `--security-opt no-new-privileges` would where the engine cannot (Swarm 20.10)
    sys.exit(main())
