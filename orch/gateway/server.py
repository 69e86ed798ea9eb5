"""The gateway's server child: serves the supervisor's socket with aiohttp, one app per life.

`serve` runs in a fork of the supervisor (orch.gateway.child), handed its ChildStart in memory. Routes:
`/t/<token>/...` is a worker's request (checked, stripped, forwarded or replayed: orch.gateway.proxy);
`/_orch/...` the controller's (only with the control key). Anything else is an unknown token.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from orch.gateway import tokens
from orch.gateway.apis.registry import for_path
from orch.gateway.books import Books
from orch.gateway.eventlog import EventLog
from orch.gateway.ledger import Ledger
from orch.gateway.modeldir import GatewayBudget, GatewayEventKind
from orch.gateway.pricing import load_pricing
from orch.gateway.proxy import Proxy
from orch.gateway.recording.exchanges import Recorder
from orch.gateway.recording.replay import Replayer
from orch.gateway.wire import ChildStart, Report
from orch.gateway.writer import Writer
from orch.run.files import atomic_write
from orch.run.folder import RunFolder
from orch.text import first_error

log = logging.getLogger("orch.gateway")
_WORKER_PATH = re.compile(r"^/t/([^/?]+)(/[^?]*)?(\?.*)?$")
_CONTROL = re.compile(r"^/_orch/(tokens|jobs)/(\d{1,6})$")
MAX_BODY = 512 * 1024 * 1024  # Claude Code sends whole conversations, images included


def _json(status: int, payload: dict[str, Any]) -> web.Response:
    return web.json_response(payload, status=status)


class Gateway:
    def __init__(self, start: ChildStart, report_fd: int) -> None:
        self.boot = start.boot
        self.life = start.life
        self.folder = RunFolder(Path(self.boot.run_dir))
        self.folder.model_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(self.folder.model_log)
        self.tokens = tokens.TokenTable(start.tokens, start.agents)
        self.jobs: dict[int, str] = dict(start.jobs)
        self._report_fd = report_fd
        self._control_key = self.boot.control_key.get_secret_value().encode()
        pricing = load_pricing(self.boot.pricing)
        self.books = Books(self.folder, pricing, self.events, self.boot.offline, self.boot.replay is not None)
        replayer = Replayer(Path(self.boot.replay), self.boot.run_dir, self.boot.workdir) if self.boot.replay else None
        self.writer = Writer(
            self.books, Ledger(self.folder), Recorder(self.folder), self.boot.run_dir, self.boot.workdir
        )
        self.proxy = Proxy(self.boot, start.upstream_urls, self.events, self.books, self.writer, self.jobs, replayer)

    def report(self, report: Report) -> None:
        """Tell the supervisor (before answering: a child that dies next must not lose a live token)."""
        os.write(self._report_fd, (report.model_dump_json() + "\n").encode())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_orch/"):
            return await self.control(request)
        match = _WORKER_PATH.match(request.raw_path)
        worker = self.tokens.worker(match[1]) if match else None
        if match is None or worker is None:
            self.events.emit(
                GatewayEventKind.BAD_TOKEN,
                token=tokens.digest(match[1]) if match else "missing",
                path=((match[2] or "/") if match else request.path)[:200],  # never the /t/<token> part
            )
            protocol = for_path(match[2] or "/") if match else None
            return self.proxy.error(401, "authentication", "orch gateway: unknown worker token", protocol)
        agent = self.tokens.agent(worker)
        return await self.proxy.serve(request, worker, agent, match[2] or "/", match[3] or "")

    async def control(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("x-orch-control", "").encode()
        if not hmac.compare_digest(given, self._control_key):
            return _json(401, {"error": "orch gateway: control key missing or wrong"})
        path, method = request.path, request.method
        if path == "/_orch/health" and method == "GET":
            pid, offline = os.getpid(), self.boot.offline
            return _json(200, {"ok": True, "run": self.boot.run, "life": self.life, "pid": pid, "offline": offline})
        if path == "/_orch/settle" and method == "POST":
            await self.writer.settled()
            return _json(200, {"ok": True})
        if path == "/_orch/budget" and method == "PUT":
            try:
                budget = GatewayBudget.model_validate_json(await request.read())
            except ValidationError as exc:
                return _json(400, {"error": f"orch gateway: bad budget: {first_error(exc)}"})
            atomic_write(self.folder.model_budget, budget.model_dump_json(indent=2) + "\n")
            self.books.set_budget(budget)
            await self.books.flush()
            return _json(200, {"budget": budget.model_dump()})
        match = _CONTROL.match(path)
        if match and match[1] == "tokens" and method == "POST":
            worker = int(match[2])
            try:
                agent = self.token_agent(await request.read())
            except ValueError as exc:
                return _json(400, {"error": f"orch gateway: {exc}"})
            token = tokens.mint(self.boot.run, worker)
            self.report(Report(worker=worker, token=token, agent=agent))
            self.tokens.set(worker, token, agent)
            self.events.emit(GatewayEventKind.TOKEN_ISSUED, worker, token=tokens.digest(token), agent=agent)
            return _json(200, {"token": token})
        if match and match[1] == "jobs" and method == "PUT":
            try:
                job = json.loads(await request.read())["job"]
                if job is not None and not isinstance(job, str):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                return _json(400, {"error": 'orch gateway: expected {"job": "<name>"} or {"job": null}'})
            worker = int(match[2])
            self.report(Report(worker=worker, job=job, job_set=True))
            if job is None:
                self.jobs.pop(worker, None)
            else:
                self.jobs[worker] = job
            return _json(200, {"worker": worker, "job": job})
        return _json(404, {"error": f"orch gateway: no control endpoint {method} {path}"})

    def token_agent(self, raw: bytes) -> str | None:
        """The agent kind a token is minted for (`{"agent": "codex"}`; none: an empty body). A gateway of
        several upstreams binds every token to one kind, which must be one of theirs."""
        try:
            agent = json.loads(raw)["agent"] if raw.strip() else None
        except (ValueError, KeyError, TypeError):
            raise ValueError('expected {"agent": "<kind>"} or no body') from None
        if agent is not None and not isinstance(agent, str):
            raise ValueError('expected {"agent": "<kind>"} or no body')
        upstreams = self.boot.upstreams
        if agent is None and len(upstreams) > 1:
            raise ValueError("this gateway holds several upstreams: name the worker's agent kind")
        if agent is not None and upstreams and not any(u.serves(agent, None) for u in upstreams):
            raise ValueError(f"no upstream of this run serves agent {agent!r}")
        return agent


async def _serve(start: ChildStart, sock: socket.socket, report_fd: int) -> None:
    gateway = Gateway(start, report_fd)
    await gateway.proxy.open()
    gateway.writer.start()
    runner = web.AppRunner(gateway.app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, shutdown_timeout=5).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gateway.report(Report(ready=True))
    await stop.wait()
    await runner.cleanup()
    await gateway.writer.drain()  # a clean stop writes every answered exchange down
    await gateway.proxy.close()


def serve(start: ChildStart, sock: socket.socket, report_fd: int) -> int:
    """Serve `sock` until SIGTERM or SIGINT, reporting on `report_fd`: the server child's whole life."""
    asyncio.run(_serve(start, sock, report_fd))
    return 0
