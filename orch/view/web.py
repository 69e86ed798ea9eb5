"""`orch watch --web`: the live view as a page, served on 127.0.0.1 with a random token in its URL.

One Hub per watched run makes snapshots (the same Watcher as the terminal view) when the folder changes,
and pushes each to every open page over SSE: five pages cost one watcher. The page is one HTML file with
its script and style inlined (orch/data/watch/, a Jinja2 template), under a Content-Security-Policy that lets it reach
nothing but this server. Every request needs the token; actions need `--control`, the token in a header
(a cross-site form cannot set one) and go through orch.view.actions, as the terminal view's keys do.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

from aiohttp import web
from pydantic import ValidationError

from orch import sse
from orch.errors import NotFoundError, OrchError
from orch.report.charts import cost_svg, timeline_svg
from orch.report.templates.environment import render
from orch.run.folder import RunFolder, list_runs, validate_name
from orch.run.records import Strict
from orch.view.actions import Action, perform
from orch.view.snapshot import Snapshot, Watcher
from orch.view.wake import Wakeup

TOKEN_HEADER = "X-Orch-Token"
KEEPALIVE = 15.0  # seconds between SSE comments, so proxies and tunnels keep the stream open
MAX_BODY = 64 * 1024
PAGE_LINES = 100  # commentary and bus lines sent to the page
FRAMES = 10  # updates pushed per second at most


class ActionRequest(Strict):
    action: Literal["send", "nudge", "restart", "kill"]
    worker: int | None = None
    text: str = ""


def page_html(nonce: str) -> str:
    """The page (orch/data/watch/index.html, Jinja2, autoescaped) with its style and script under `nonce`."""
    return render("watch/index.html", nonce=nonce)


class Payload(Strict):
    """What the page gets: the snapshot (its lines trimmed), the charts as SVG, and whether actions are on."""

    snapshot: Snapshot
    timeline: str
    costs: str
    control: bool


def payload(snap: Snapshot, control: bool) -> str:
    start = snap.progress.started or min((b.start for b in snap.timeline), default=snap.taken)
    end = snap.progress.finished or snap.taken
    trimmed = snap.model_copy(update={"commentary": snap.commentary[-PAGE_LINES:], "bus": snap.bus[-PAGE_LINES:]})
    return Payload(
        snapshot=trimmed,
        timeline=timeline_svg(snap.timeline, len(snap.workers), start, end) if snap.timeline else "",
        costs=cost_svg(snap.costs, start, end) if snap.costs else "",
        control=control,
    ).model_dump_json()


class Hub:
    """One run's watcher and the pages following it."""

    def __init__(self, run: RunFolder, control: bool) -> None:
        self.watcher = Watcher(run)  # NotFoundError for an unknown run
        self.control = control
        self.latest = payload(self.watcher.snapshot(), control)
        self.pages: set[asyncio.Queue[str]] = set()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        wake = Wakeup(self.watcher.run)
        try:
            while True:
                drawn = time.monotonic()
                await asyncio.to_thread(wake.wait)
                # A busy fleet changes its folder many times a second: at most FRAMES updates a second.
                await asyncio.sleep(max(0.0, drawn + 1 / FRAMES - time.monotonic()))
                try:
                    snap = await asyncio.to_thread(self.watcher.snapshot)
                except NotFoundError:
                    if self.watcher.last is None:
                        return
                    snap = self.watcher.last.model_copy(update={"gone": True})
                    self._publish(payload(snap, self.control))
                    return
                self._publish(payload(snap, self.control))
        finally:
            wake.stop()  # its fd goes with the process: a thread may still be waiting on it

    def _publish(self, data: str) -> None:
        self.latest = data
        for queue in self.pages:
            if queue.qsize() > 2:  # a slow page gets the newest, not a backlog
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(data)

    @contextlib.asynccontextmanager
    async def page(self) -> AsyncIterator[asyncio.Queue[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        queue.put_nowait(self.latest)
        self.pages.add(queue)
        self.start()
        try:
            yield queue
        finally:
            self.pages.discard(queue)


class WebView:
    def __init__(self, run: RunFolder | None, control: bool, token: str) -> None:
        self.default = run.name if run else None
        self.control = control
        self.token = token
        self.hubs: dict[str, Hub] = {}
        if run is not None:
            self.hubs[run.name] = Hub(run, control)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._check_token], client_max_size=MAX_BODY)
        app.router.add_get("/", self.index)
        app.router.add_get("/api/runs", self.runs)
        app.router.add_get("/api/snapshot", self.snapshot)
        app.router.add_get("/api/events", self.events)
        app.router.add_post("/api/action", self.action)
        return app

    @web.middleware
    async def _check_token(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        given = request.headers.get(TOKEN_HEADER) if request.method == "POST" else request.query.get("t")
        if not given or not secrets.compare_digest(given.encode(), self.token.encode()):
            return web.Response(status=403, text="orch watch: wrong or missing token (use the URL it printed)\n")
        response = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    def hub(self, request: web.Request) -> Hub:
        name = request.query.get("run") or self.default
        if not name:
            raise web.HTTPBadRequest(text="orch watch: which run? add run=NAME\n")
        try:
            validate_name(name)
            if name not in self.hubs:
                self.hubs[name] = Hub(RunFolder.for_name(name), self.control)
        except OrchError as exc:
            raise web.HTTPNotFound(text=f"orch watch: {exc.one_line()}\n") from None
        return self.hubs[name]

    async def index(self, request: web.Request) -> web.Response:
        nonce = secrets.token_urlsafe(12)
        csp = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        return web.Response(text=page_html(nonce), content_type="text/html", headers={"Content-Security-Policy": csp})

    async def runs(self, request: web.Request) -> web.Response:
        rows = []
        for run in list_runs():
            try:
                info = run.info()
            except OrchError:
                continue
            rows.append({"name": info.name, "backend": info.backend, "agent": info.mix(),
                         "workers": info.workers, "status": info.status.value})  # fmt: skip
        return web.json_response({"default": self.default, "runs": rows})

    async def snapshot(self, request: web.Request) -> web.Response:
        return web.Response(text=self.hub(request).latest, content_type="application/json")

    async def events(self, request: web.Request) -> web.StreamResponse:
        hub = self.hub(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await response.prepare(request)
        async with hub.page() as queue:
            while True:
                try:
                    data = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    await response.write(sse.comment("keepalive"))
                    continue
                await response.write(sse.message(data).encode())

    async def action(self, request: web.Request) -> web.Response:
        if not self.control:
            return web.Response(status=403, text="orch watch: read-only (start it with --web --control)\n")
        hub = self.hub(request)
        try:
            asked = ActionRequest.model_validate_json(await request.read())
        except ValidationError as exc:
            return web.Response(status=400, text=f"orch watch: bad action: {exc.errors()[0]['msg']}\n")
        try:
            outcome = await asyncio.to_thread(
                perform, hub.watcher.run, Action(asked.action), asked.worker, asked.text, "web"
            )
        except OrchError as exc:
            return web.Response(status=400, text=f"orch watch: {exc.one_line()}\n")
        return web.json_response(outcome.model_dump(mode="json"), status=200 if outcome.ok else 502)


def serve(run: RunFolder | None, host: str, port: int, control: bool, echo: Callable[[str], None]) -> None:
    """Serve until interrupted; prints the URL (with its token) first."""
    token = secrets.token_urlsafe(18)
    view = WebView(run, control, token)

    async def main() -> None:
        runner = web.AppRunner(view.app(), access_log=None, handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        where = f"{host}:{bound}" if ":" not in host else f"[{host}]:{bound}"
        suffix = f"&run={run.name}" if run else ""
        echo(f"http://{where}/?t={token}{suffix}")
        echo(f"orch watch: serving {'with actions (--control)' if control else 'read-only'}; Ctrl-C stops it")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
