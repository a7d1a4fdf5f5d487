"""The dashboard's web server (aiohttp): the page, its JSON, and one event stream per tab.

Every request passes `kinetic.dashboard.guard` first and every response carries
its headers (a strict Content-Security-Policy among them). Changes reach the
pages as server-sent events from the shared watches (`kinetic.dashboard.hub`);
a batch's inputs are read once per change of the batch, by whichever tab asked
first, and every tab pages through that one read (`BatchViews`). The server
holds one `kinetic.api.kube.KubeClient` (`State.kube`): the watches, every
handle a page reads through and every action ask the API server through it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from aiohttp import web
from kubernetes.client import ApiException

from kinetic.api.kube import ClusterUnreachable, KubeClient, kube_reason
from kinetic.dashboard import actions, export, guard, reads, tables
from kinetic.dashboard.hub import ALL, Change, Hub
from kinetic.model import resources as r

log = logging.getLogger("kinetic.dashboard")

REBUILD_EVERY = 1.0  # seconds: a busy batch's inputs are read again at most this often
FORGET_AFTER = 300.0  # seconds: a batch no page asked about for this long is not re-read
KEEPALIVE = 15.0  # seconds between comments on an idle event stream
QUEUE_BOUND = 2000  # events waiting for one slow tab before it is told to resync
STATIC = resources.files("kinetic.dashboard") / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}


@dataclass
class Settings:
    """How the command started the server."""

    port: int
    token: str
    context: str | None = None
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False


@dataclass
class _Entry:
    view: reads.BatchView | None = None
    building: asyncio.Task[None] | None = None
    dirty: bool = False
    asked: float = field(default_factory=time.monotonic)


class BatchViews:
    """One read of each batch a page shows, made again when the batch changes."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.entries: dict[tuple[str, str], _Entry] = {}

    async def get(self, namespace: str, name: str) -> reads.BatchView:
        entry = self.entries.setdefault((namespace, name), _Entry())
        entry.asked = time.monotonic()
        if entry.view is None:
            if entry.building is None:
                entry.building = asyncio.ensure_future(self._build(namespace, name))
            await asyncio.shield(entry.building)
        if entry.view is None:  # the read failed: read again here, so its error is raised
            entry.view = await self.state.run(reads.open_batch, namespace, name, self.state.kube)
        return entry.view

    def changed(self, namespace: str, name: str) -> None:
        entry = self.entries.get((namespace, name))
        if entry is None:
            return
        if time.monotonic() - entry.asked > FORGET_AFTER:
            del self.entries[(namespace, name)]  # nobody looks at it any more
            return
        entry.dirty = True
        if entry.building is None:
            entry.building = asyncio.ensure_future(self._build(namespace, name))

    async def _build(self, namespace: str, name: str) -> None:
        entry = self.entries[(namespace, name)]
        try:
            while True:
                entry.dirty = False
                try:
                    entry.view = await self.state.run(
                        reads.open_batch, namespace, name, self.state.kube
                    )
                except Exception as e:  # noqa: BLE001 — shown when a page asks
                    log.info("reading batch %s/%s: %s", namespace, name, e)
                    return
                self.state.broadcast({"type": "view", "namespace": namespace, "name": name})
                await asyncio.sleep(REBUILD_EVERY)
                if not entry.dirty:
                    return
        finally:
            entry.building = None


class State:
    """Everything one server holds: its settings, its one client of the API server, watches,
    batch views and open streams."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kube = KubeClient(settings.context)
        self.hub = Hub(self.kube)
        self.views = BatchViews(self)
        self.queues: set[asyncio.Queue[str]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.hub.listen(self._from_thread)
        wanted = [ALL] if self.settings.all_namespaces else list(self.settings.namespaces)
        for namespace in wanted or [self.kube.current_namespace()]:
            self.hub.watch_namespace(namespace)
        loop.run_in_executor(None, reads.warm_up, self.kube)

    def _from_thread(self, change: Change) -> None:
        if self.loop is None or self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self._changed, change)
        except RuntimeError:  # the loop closed meanwhile: the server is stopping
            pass

    def stop(self) -> None:
        self.hub.unlisten(self._from_thread)
        self.hub.stop()

    def _changed(self, change: Change) -> None:
        if change.kind in ("upsert", "delete") and change.obj is not None:
            row = tables.summary(change.obj)
            self.broadcast({"type": change.kind, "row": row})
            if change.plural == r.BATCH_PLURAL:
                self.views.changed(row["namespace"], row["name"])
        else:
            self.broadcast(
                {
                    "type": change.kind,
                    "plural": change.plural,
                    "namespace": change.namespace,
                    "reason": change.reason,
                }
            )

    def broadcast(self, event: dict[str, Any]) -> None:
        message = f"data: {json.dumps(event, default=str)}\n\n"
        for queue in list(self.queues):
            if queue.full():  # a tab that stopped reading: drop what it missed, say so
                while not queue.empty():
                    queue.get_nowait()
                message_now = 'data: {"type": "resync"}\n\n'
                queue.put_nowait(message_now)
            queue.put_nowait(message)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking read (the Kubernetes client, storage) in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


STATE = web.AppKey("state", State)


# --------------------------------------------------------------------------- the guard


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    settings = request.app[STATE].settings
    seen = guard.Seen(
        method=request.method,
        path=request.path,
        host=request.headers.get("Host"),
        origin=request.headers.get("Origin"),
        query_token=request.query.get(guard.TOKEN_PARAM),
        cookie=request.cookies.get(guard.cookie_name(settings.port)),
    )
    verdict = guard.judge(seen, settings.token, settings.port)
    if not verdict.allowed:
        return web.Response(status=403, text=f"403 Forbidden: {verdict.reason}\n")
    if verdict.redirect is not None:
        response = web.Response(status=303, headers={"Location": verdict.redirect})
        cookie = guard.COOKIE
        response.set_cookie(
            guard.cookie_name(settings.port),
            settings.token,
            httponly=cookie.httponly,
            samesite=cookie.samesite,
            path=cookie.path,
        )
        return response
    try:
        return await handler(request)
    except tables.BadRequest as e:
        return _error(400, str(e))
    except actions.BadAction as e:
        return _error(400, str(e))
    except LookupError as e:
        return _error(404, str(e))
    except ApiException as e:
        return _error(e.status or 502, f"the API server said: {e.status} {kube_reason(e)}")
    except ClusterUnreachable as e:
        return _error(502, str(e))


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(guard.SECURITY_HEADERS)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _json(data: Any) -> web.Response:
    return web.json_response(data, dumps=reads.dumps)


# --------------------------------------------------------------------------- pages and files


async def page(request: web.Request) -> web.StreamResponse:
    """Every page is the one document; its script reads the path (deep links)."""
    return _file("index.html")


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if "/" in name or name.startswith(".") or not (STATIC / name).is_file():
        raise web.HTTPNotFound()
    return _file(name)


def _file(name: str) -> web.Response:
    suffix = name[name.rfind(".") :]
    return web.Response(
        body=(STATIC / name).read_bytes(), content_type=_TYPES.get(suffix, "text/plain")
    )


# --------------------------------------------------------------------------- lists and events


async def objects(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json(reads.objects_of(state.hub.streams()) | {"namespaces": state.hub.namespaces()})


async def add_namespace(request: web.Request) -> web.Response:
    body = await request.json()
    namespace = str(body.get("namespace") or "").strip()
    if not namespace or len(namespace) > 63:
        raise tables.BadRequest("namespace: give a namespace name (1 to 63 characters)")
    request.app[STATE].hub.watch_namespace(namespace)
    return _json({"watching": request.app[STATE].hub.namespaces()})


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: every change the shared watches see, as it happens."""
    state = request.app[STATE]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_BOUND)
    state.queues.add(queue)
    try:
        await response.write(b"retry: 2000\n\n")
        while True:
            try:
                message = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                message = ": keepalive\n\n"
            await response.write(message.encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        state.queues.discard(queue)
    return response


# --------------------------------------------------------------------------- a batch


def _batch_key(request: web.Request) -> tuple[str, str]:
    return request.match_info["ns"], request.match_info["name"]


async def batch(request: web.Request) -> web.Response:
    state = request.app[STATE]
    view = await state.views.get(*_batch_key(request))
    head = view.head()
    head["failures"] = await state.run(reads.shown_failures, view)
    return _json(head)


async def batch_inputs(request: web.Request) -> web.Response:
    """A page of the inputs table, from the batch's one shared read: no API call here."""
    status, number, size = tables.paging(
        request.query.get("status"), request.query.get("page"), request.query.get("size")
    )
    view = await request.app[STATE].views.get(*_batch_key(request))
    return _json(tables.page_of(view.rows, status, number, size).wire())


async def batch_failures(request: web.Request) -> web.Response:
    """Every failed input, as CSV or JSON (a download)."""
    fmt = request.match_info["fmt"]
    state = request.app[STATE]
    namespace, name = _batch_key(request)
    view = await state.views.get(namespace, name)
    failed = [row.index for row in view.rows if row.phase == "FAILED"]
    await state.run(reads.read_failures, view, failed)
    records = export.failure_records(view.rows, view.failures)
    if fmt == "csv":
        body, kind = export.to_csv(records), "text/csv"
    else:
        body, kind = export.to_json(name, namespace, records), "application/json"
    return web.Response(
        text=body,
        content_type=kind,
        headers={"Content-Disposition": f'attachment; filename="{name}-failures.{fmt}"'},
    )


# --------------------------------------------------------------------------- an input, a job


async def _handle(request: web.Request) -> Any:
    state = request.app[STATE]
    info = request.match_info
    if "index" in info:
        index = _index(info["index"])
        return await state.run(reads.input_handle, info["ns"], info["name"], index, state.kube)
    return await state.run(reads.job_handle, info["ns"], info["name"], state.kube)


def _index(text: str) -> int:
    if not text.isdigit():
        raise tables.BadRequest(f"input index {text!r}: a whole number, 0 or more")
    return int(text)


def _rank(request: web.Request) -> int:
    text = request.query.get("rank", "0")
    if not text.isdigit():
        raise tables.BadRequest(f"rank={text!r}: a whole number, 0 or more (0: the coordinator)")
    return int(text)


async def one(request: web.Request) -> web.Response:
    handle = await _handle(request)
    return _json(await request.app[STATE].run(reads.detail, handle))


async def one_log(request: web.Request) -> web.Response:
    handle = await _handle(request)
    try:
        return _json(await request.app[STATE].run(reads.log_of, handle, _rank(request)))
    except ValueError as e:  # a rank the job does not have: the message says which it has
        raise tables.BadRequest(str(e)) from None


async def one_value(request: web.Request) -> web.Response:
    """Load a function's value: only on the page's explicit, confirmed ask (a POST)."""
    body = await request.json()
    if body.get("unpickle") is not True:
        raise tables.BadRequest(
            "unpickle: must be true, the user's confirmation that loading the value runs code "
            "from whoever ran the job"
        )
    handle = await _handle(request)
    return _json(await request.app[STATE].run(reads.reveal, handle))


async def follow(request: web.Request) -> web.StreamResponse:
    """The running Pod's log as it is written, as server-sent events, until it ends."""
    state = request.app[STATE]
    handle = await _handle(request)
    rank = _rank(request)
    pod = await state.run(handle.pod, rank)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    if pod is None:
        await response.write(b'data: {"end": true}\n\n')
        return response
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    stop = threading.Event()

    def pump() -> None:
        try:
            for chunk in handle.stream_logs(pod):
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(queue.put_nowait, chunk)
        except Exception as e:  # noqa: BLE001 — the Pod went away: end the stream
            log.info("following %s: %s", pod, e)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=pump, name=f"follow-{pod}", daemon=True).start()
    try:
        while True:
            chunk = await queue.get()
            if chunk is None:
                await response.write(b'data: {"end": true}\n\n')
                break
            await response.write(f"data: {json.dumps({'text': chunk})}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        stop.set()
    return response


# --------------------------------------------------------------------------- actions, operator


async def act(request: web.Request) -> web.Response:
    body = await request.json()
    index = body.get("index")
    ask = actions.Ask(
        action=str(body.get("action") or ""),
        namespace=str(body.get("namespace") or ""),
        name=str(body.get("name") or ""),
        kind=str(body.get("kind") or "batch"),
        index=index if isinstance(index, int) else None,
    )
    state = request.app[STATE]
    outcome = await state.run(actions.take, ask, body.get("confirm") is True, state.kube)
    return _json(outcome.wire())


async def operator(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json(await state.run(reads.operator_info, state.kube))


# --------------------------------------------------------------------------- the app


def make_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[_guard], client_max_size=64 * 1024)
    state = State(settings)
    app[STATE] = state
    app.on_response_prepare.append(_headers)

    async def started(app: web.Application) -> None:
        state.start(asyncio.get_running_loop())

    async def stopped(app: web.Application) -> None:
        state.stop()

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    batch_path = "/api/batches/{ns}/{name}"
    input_path = batch_path + "/inputs/{index:[0-9]+}"
    job_path = "/api/jobs/{ns}/{name}"
    app.add_routes(
        [
            web.get("/api/objects", objects),
            web.post("/api/namespaces", add_namespace),
            web.get("/api/events", events),
            web.get(batch_path, batch),
            web.get(batch_path + "/inputs", batch_inputs),
            web.get(batch_path + "/failures.{fmt:csv|json}", batch_failures),
            web.get(input_path, one),
            web.get(input_path + "/log", one_log),
            web.get(input_path + "/follow", follow),
            web.post(input_path + "/value", one_value),
            web.get(job_path, one),
            web.get(job_path + "/log", one_log),
            web.get(job_path + "/follow", follow),
            web.post(job_path + "/value", one_value),
            web.post("/api/actions", act),
            web.get("/api/operator", operator),
            web.get("/static/{name}", static),
            web.get("/api/{tail:.*}", _no_such_api),
            web.get("/{tail:.*}", page),
        ]
    )
    return app


async def _no_such_api(request: web.Request) -> web.Response:
    return _error(404, f"no such API path: {request.path}")


def loopback_socket(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 only (port 0: any free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def serve(settings: Settings, sock: socket.socket) -> None:
    """Serve until interrupted."""
    web.run_app(make_app(settings), sock=sock, print=None, handle_signals=True)
