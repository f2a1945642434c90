"""A fault-injecting HTTP front for an API server, real or emulated (issue 17).

:class:`FaultProxy` listens on ``127.0.0.1`` (plain HTTP) and forwards every request to
the API server named by an upstream kubeconfig, with that kubeconfig's credentials (its
bearer token, or its client certificate) and CA: a client given :attr:`FaultProxy.
kubeconfig` acts as the upstream kubeconfig's user, so RBAC still applies. Only what goes
through the proxy is faulted; the harness keeps its own direct connection, so its checks
and its fake kubelet never see a fault.

What it does to the traffic, drawn from a seeded random stream (:class:`Faults`):

* **refuse**: a write of a faulted kind (``bind``, ``delete``, ``patch``, ``create``,
  ``evict``) is answered ``500 InternalError`` without being forwarded, with probability
  ``rate``;
* **lose the reply**: with probability ``lost_rate`` the write is forwarded and applied,
  then the client is told it failed: half of the time a ``500``, half of the time the
  connection is closed before any reply (as a broken connection or a timeout would);
* **late watches**: every watch event is passed on ``watch_delay`` seconds after it
  came, so that a write's reply comes before the client sees its effect (a loaded API
  server's watch cache lags so);
* **cut watches**: every watch stream is cut (the connection aborted mid-stream) after a
  random time up to ``watch_cut_after`` seconds, if that is set; :meth:`cut_watches`
  cuts them all at once;
* **outage**: :meth:`outage` stops listening (open connections aborted, new ones
  refused) until :meth:`resume`, on the same port.

Requests of other kinds (reads, lists, watches, leases' GETs) pass untouched, streamed
as they come. Counters (``calls``, ``failed``, ``lost``, ``cut``) say what was done, per
call kind. Runs on the test's event loop; ``start``/``stop`` are its life cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration

from scheduler.sim.kubeconfig import write_kubeconfig

__all__ = ["WRITE_KINDS", "FaultProxy", "Faults", "call_kind", "call_resource"]

#: Every kind of write a scheduler makes.
WRITE_KINDS: Final = frozenset({"bind", "delete", "patch", "create", "evict"})
REVIEWS: Final = ("/tokenreviews", "/subjectaccessreviews")
"""POSTs that are questions, not writes: the guarded port's TokenReviews and
SubjectAccessReviews (the suite's scrapes of /metrics would fail on a refused one)."""

#: Headers that belong to one hop, not to be forwarded (RFC 9110 7.6.1), and those the
#: proxy sets itself. Content-Encoding and Accept-Encoding pass: bodies are relayed as
#: they are (a real API server gzips large lists), never decoded here.
_HOP_HEADERS: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "authorization",
    }
)


@dataclass
class Faults:
    """What :class:`FaultProxy` does, and what it did. ``kinds``: the write kinds that may
    be refused or lose their reply. ``watch_cut_after``: cut each watch after a random
    time up to this many seconds (None: never). ``watch_delay``: every watch event
    reaches the client this many seconds late."""

    rate: float = 0.0
    lost_rate: float = 0.0
    kinds: frozenset[str] = frozenset({"bind", "delete", "patch"})
    seed: int = 1
    watch_cut_after: float | None = None
    watch_delay: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)
    by_resource: Counter[str] = field(default_factory=Counter)
    """Writes by kind and resource (``patch pods/status``, ``create events``): what the
    scheduler spends its client's rate limit on."""
    failed: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    cut: int = 0

    def __post_init__(self) -> None:
        self.kinds = frozenset(self.kinds)
        unknown = set(self.kinds) - WRITE_KINDS
        if unknown:
            raise ValueError(f"Faults.kinds: unknown call kinds {sorted(unknown)}")
        if not 0.0 <= self.rate + self.lost_rate <= 1.0:
            raise ValueError(f"Faults: rate + lost_rate must be in [0, 1], not {self!r}")

    def summary(self) -> str:
        return (
            f"calls {dict(self.calls)} refused {dict(self.failed)} "
            f"replies lost {dict(self.lost)} watches cut {self.cut}"
        )


def call_kind(method: str, path: str) -> str | None:
    """The write kind of a request (``bind``, ``evict``, ``create``, ``delete``,
    ``patch``), or None for a read."""
    if method == "POST" and path.endswith("/binding"):
        return "bind"
    if method == "POST" and path.endswith("/eviction"):
        return "evict"
    if method == "POST" and path.endswith(REVIEWS):
        return None  # the guarded port's reviews create nothing: not the writes under test
    if method == "POST":
        return "create"
    if method == "DELETE":
        return "delete"
    if method in ("PATCH", "PUT"):
        return "patch"
    return None


def call_resource(path: str) -> str:
    """The resource of a request's path, with its subresource: ``pods/status`` for
    ``/api/v1/namespaces/ns/pods/p/status``, ``queues`` for ``/apis/g/v1/queues/q``."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]  # after the group version
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest = rest[2:] if len(rest) > 2 else rest[:1]
    if not rest:
        return "?"
    return "/".join([rest[0], *rest[2:3]])


def fault_status(message: str) -> dict[str, Any]:
    """The ``Status`` of an injected 500, as the API server words an internal error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"e2e fault injection: {message}",
        "reason": "InternalError",
        "code": 500,
    }


def _is_watch(request: web.Request) -> bool:
    return request.method == "GET" and request.query.get("watch", "") in ("1", "true")


class FaultProxy:
    """See the module docstring. ``upstream_kubeconfig``: the API server and the identity
    to act as; ``workdir``: where the proxy's own kubeconfig is written."""

    def __init__(self, upstream_kubeconfig: str | None, workdir: Path, faults: Faults) -> None:
        self.upstream_kubeconfig = upstream_kubeconfig
        self.faults = faults
        self.kubeconfig_path = workdir / "fault-proxy.kubeconfig"
        self.port = 0
        self._rng = random.Random(faults.seed)
        self._upstream = ""
        self._headers: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._watches: set[asyncio.Task[Any]] = set()

    @property
    def kubeconfig(self) -> str:
        return str(self.kubeconfig_path)

    async def start(self) -> None:
        """Connect to the upstream, listen on a free port, write the kubeconfig."""
        configuration = Configuration()
        await kube_config.load_kube_config(
            config_file=self.upstream_kubeconfig, client_configuration=configuration
        )
        self._upstream = configuration.host.rstrip("/")
        keys = configuration.api_key or {}
        token = keys.get("authorization") or keys.get("BearerToken")
        if token:
            self._headers["Authorization"] = token
        tls: ssl.SSLContext | bool = False
        if self._upstream.startswith("https://"):
            tls = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
            if not configuration.verify_ssl:
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
            if configuration.cert_file:
                tls.load_cert_chain(configuration.cert_file, configuration.key_file)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await self._listen()
        write_kubeconfig(self.kubeconfig_path, f"http://127.0.0.1:{self.port}", context="e2e-proxy")

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if not self.port:
            server = self._site._server
            assert isinstance(server, asyncio.base_events.Server)
            self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def outage(self) -> None:
        """Stop listening: every watch is cut, open connections are closed, new ones are
        refused, until :meth:`resume`."""
        self.cut_watches()
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def resume(self) -> None:
        """Listen again, on the same port."""
        if self._site is None:
            await self._listen()

    def cut_watches(self) -> None:
        """Cut every open watch stream now (its connection aborted mid-stream)."""
        for task in list(self._watches):
            task.cancel()

    # ------------------------------------------------------------------ forwarding

    def _forward_headers(self, request: web.Request) -> dict[str, str]:
        return {**_end_to_end(request.headers), **self._headers}

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        if _is_watch(request):
            return await self._watch(request)
        kind = call_kind(request.method, request.path)
        draw = 1.0
        if kind is not None:
            self.faults.calls[kind] += 1
            self.faults.by_resource[f"{kind} {call_resource(request.path)}"] += 1
            if kind in self.faults.kinds:
                draw = self._rng.random()
        body = await request.read()
        if draw < self.faults.rate:
            assert kind is not None
            self.faults.failed[kind] += 1
            return web.json_response(fault_status(f"{kind} refused"), status=500)
        async with self._session.request(
            request.method,
            self._upstream + request.rel_url.raw_path_qs,
            headers=self._forward_headers(request),
            data=body or None,
        ) as upstream:
            payload = await upstream.read()
            if draw < self.faults.rate + self.faults.lost_rate and upstream.status < 300:
                assert kind is not None
                self.faults.lost[kind] += 1
                if self._rng.random() < 0.5:
                    return web.json_response(fault_status(f"{kind} reply lost"), status=500)
                return _aborted(request)
            return web.Response(
                body=payload, status=upstream.status, headers=_end_to_end(upstream.headers)
            )

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        """Stream a watch through, and cut it at the chosen time (or on :meth:`cut_watches`)."""
        assert self._session is not None
        task = asyncio.current_task()
        assert task is not None
        self._watches.add(task)
        after = self.faults.watch_cut_after
        deadline = None if after is None else self._rng.uniform(0.0, after)
        response: web.StreamResponse | None = None
        try:
            async with self._session.get(
                self._upstream + request.rel_url.raw_path_qs,
                headers=self._forward_headers(request),
            ) as upstream:
                response = web.StreamResponse(
                    status=upstream.status, headers=_end_to_end(upstream.headers)
                )
                await response.prepare(request)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline):
                        await self._relay(upstream, response)
                        await response.write_eof()
                        return response
            self.faults.cut += 1
        except asyncio.CancelledError:
            self.faults.cut += 1
            if not request.transport or request.transport.is_closing():
                raise  # the proxy itself is going away
        finally:
            self._watches.discard(task)
        return _aborted(request, response)

    async def _relay(self, upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
        """Copy a watch stream, each chunk ``watch_delay`` seconds after it came (in
        order), as a loaded API server's watch cache lags behind its writes."""
        delay = self.faults.watch_delay
        if not delay:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for chunk in upstream.content.iter_any():
                    queue.put_nowait((loop.time() + delay, chunk))
            finally:
                queue.put_nowait(None)  # the stream's end, or its break: end ours too

        reader = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not None:
                due, chunk = item
                await asyncio.sleep(max(0.0, due - loop.time()))
                await response.write(chunk)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await reader


def _aborted(
    request: web.Request, response: web.StreamResponse | None = None
) -> web.StreamResponse:
    """Close the client's connection at once, without a reply (or mid-reply). The
    response returned is never delivered: aiohttp's attempt to finish it meets the
    closed connection, which it takes quietly (an exception raised here would be logged
    as a handler's error)."""
    if request.transport is not None:
        request.transport.abort()
    return response if response is not None else web.Response(status=500)


def _end_to_end(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without those of one hop (:data:`_HOP_HEADERS`)."""
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
