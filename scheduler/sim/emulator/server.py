"""The API emulator's server: lifecycle, routing and namespaces (layer 4, sim).

:class:`ApiEmulator` serves the embedded cluster's :class:`~scheduler.sim.store.ObjectStore`
over HTTP; what it serves and how it differs from the API server is in the package
docstring (:mod:`scheduler.sim.emulator`). It routes each request to discovery, to its
reads (:mod:`.reads`) or its writes (:mod:`.writes`), and serves the derived namespaces
itself. It must run on the event loop that owns the store, on real time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType

import anyio
from aiohttp import web

from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    InvalidInputError,
    InvalidObjectError,
    NotFoundError,
)
from scheduler.schema import CrdCatalog, load_crds
from scheduler.sim.emulator.discovery import (
    SERVER_VERSION,
    api_group,
    api_group_list,
    api_versions,
    openapi_v3,
    resource_list,
    root_paths,
    served_markers,
)
from scheduler.sim.emulator.jsonpatch import JsonPatchError
from scheduler.sim.emulator.list_selectors import parse_filter
from scheduler.sim.emulator.namespaces import (
    DEFAULT_NAMESPACES,
    delete_namespaced_objects,
    namespace_names,
    new_namespace,
    watch_namespaces,
)
from scheduler.sim.emulator.params import int_param
from scheduler.sim.emulator.reads import Reads
from scheduler.sim.emulator.resource_catalog import (
    ACTION_SUBRESOURCES,
    BUILTIN_RESOURCES,
    ResourceInfo,
    custom_resources,
)
from scheduler.sim.emulator.responses import (
    JSON,
    NOT_FOUND_MESSAGE,
    HttpError,
    bad_request,
    failure,
    status_of,
)
from scheduler.sim.emulator.tables import TablePrinter
from scheduler.sim.emulator.wire import (
    Target,
    incoming,
    json_response,
    parse_json,
    read_body,
    truthy,
    wants_table,
)
from scheduler.sim.emulator.writes import Writes
from scheduler.sim.store import ApiObject, ObjectStore

log = logging.getLogger(__name__)


class ApiEmulator:
    """The Kubernetes REST API over an :class:`ObjectStore`, on ``http://host:port``.

    ``catalog`` gives the custom kinds served (the default CRD catalog when None); each
    must agree with the store on being cluster-scoped. ``port=0`` picks a free port.
    ``bookmark_interval`` is how often a watch that asked for bookmarks gets one while
    idle (the API server sends one about every minute); ``watch_timeout`` ends a watch
    that gave no ``timeoutSeconds``. ``wall`` is the Unix time that ``kubectl get`` ages
    are computed against (real time by default). Use ``async with`` or ``start``/``stop``
    on the event loop that owns the store.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        catalog: CrdCatalog | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        watch_timeout: float = 1800.0,
        wall: Callable[[], float] | None = None,
    ) -> None:
        if bookmark_interval <= 0 or watch_timeout <= 0:
            raise ValueError("bookmark_interval and watch_timeout must be positive")
        self.store = store
        self.catalog = catalog if catalog is not None else load_crds()
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._wall = wall or time.time
        resources = [*BUILTIN_RESOURCES, *custom_resources(self.catalog)]
        for res in resources:
            if res.view != "plain" or res.kind == "Binding":
                continue
            if store.is_cluster_scoped(res.kind_in_store) == res.namespaced:
                scope = "namespaced" if res.namespaced else "cluster-scoped"
                raise ValueError(f"{res.kind} is {scope} here but not in the store")
        self._resources: dict[tuple[str, str, str], ResourceInfo] = {
            (r.group, r.version, r.name): r for r in resources
        }
        self._namespaces: dict[str, ApiObject] = {}
        self._deleted_namespaces: set[str] = set()
        """Namespaces deleted through the API and not created again: a create in one
        meets a 404, as on the API server once the namespace controller has emptied it."""
        self._runner: web.AppRunner | None = None
        self._served_port: int | None = None
        self._watches: set[anyio.CancelScope] = set()
        self._started_at = self._wall()
        self._tables = TablePrinter(self._wall)
        self._reads = Reads(
            store,
            self._tables,
            self._watches,
            bookmark_interval=bookmark_interval,
            watch_timeout=watch_timeout,
        )
        self._writes = Writes(store, self.catalog)
        for obj in served_markers(self.catalog, self._resources.values()):
            if self.store.try_get(obj["kind"], "", obj["metadata"]["name"]) is None:
                self.store.create(obj)

    # ----------------------------------------------------------------- lifecycle

    @property
    def served_port(self) -> int:
        """The port the server listens on (after :meth:`start`)."""
        if self._served_port is None:
            raise RuntimeError("the emulator is not started")
        return self._served_port

    @property
    def url(self) -> str:
        """``http://host:port``, the base URL of the API (after :meth:`start`)."""
        return f"http://{self.host}:{self.served_port}"

    async def start(self) -> str:
        """Listen and serve; returns the base URL."""
        if self._runner is not None:
            return self.url
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._served_port = int(runner.addresses[0][1])
        self._started_at = self._wall()
        log.info("Kubernetes API emulator serving on %s", self.url)
        return self.url

    async def stop(self) -> None:
        """End every watch, close connections and stop listening. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for scope in list(self._watches):
            scope.cancel()
        await runner.cleanup()
        self._served_port = None

    async def __aenter__(self) -> ApiEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ----------------------------------------------------------------- dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        target: Target | None = None
        try:
            parts = [p for p in request.path.split("/") if p]
            discovery = self._discovery(parts)
            if discovery is not None:
                if request.method != "GET":
                    raise HttpError(405, "MethodNotAllowed", f"{request.method} is not allowed")
                return discovery
            target = self._target(parts)
            return await self._serve(request, target)
        except ApiError as exc:
            res = target.res if target is not None else None
            return json_response(exc.code, status_of(exc, res, target.name if target else ""))
        except HttpError as exc:
            return json_response(exc.code, failure(exc.code, exc.reason, exc.message))
        except (InvalidInputError, JsonPatchError) as exc:
            code, reason = (
                (422, "Invalid") if isinstance(exc, JsonPatchError) else (400, "BadRequest")
            )
            return json_response(code, failure(code, reason, str(exc)))
        except Exception as exc:
            log.exception("emulator: %s %s failed", request.method, request.path_qs)
            return json_response(500, failure(500, "InternalError", f"internal error: {exc}"))

    def _discovery(self, parts: list[str]) -> web.StreamResponse | None:
        if parts in ([], ["api"], ["apis"]) or parts[0] in (
            "version",
            "healthz",
            "readyz",
            "livez",
        ):
            return self._root_document(parts)
        if parts[:2] == ["openapi", "v3"]:
            return json_response(200, openapi_v3(self._resources, parts[2:]))
        if parts[0] == "api" and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[0] == "apis" and len(parts) == 2:
            group = api_group(self._resources, parts[1])
            if group is None:
                raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
            return json_response(200, {"kind": "APIGroup", "apiVersion": "v1", **group})
        if parts[0] == "apis" and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        if parts[0] not in ("api", "apis"):
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        return None

    def _root_document(self, parts: list[str]) -> web.StreamResponse:
        if not parts:
            return json_response(200, root_paths(self._resources))
        if parts[0] == "version":
            return json_response(200, dict(SERVER_VERSION))
        if parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts == ["api"]:
            address = f"{self.host}:{self._served_port or self.port}"
            return json_response(200, api_versions(address))
        return json_response(200, api_group_list(self._resources))

    def _resource_list(self, group: str, version: str) -> web.StreamResponse:
        document = resource_list(self._resources, group, version, self.store.has_status_subresource)
        return json_response(200, document)

    def _target(self, parts: list[str]) -> Target:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        res = self._resources.get((group, version, rest[0]))
        if res is None or len(rest) > 3 or (namespace is not None and not res.namespaced):
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and not (
            (sub == "status" and self.store.has_status_subresource(res.kind_in_store))
            or (res.name, sub) in ACTION_SUBRESOURCES
        ):
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        return Target(res, namespace, name, sub)

    async def _serve(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        if truthy(query.get("dryRun")) or query.get("dryRun") == "All":
            raise bad_request("dry run is not supported by the emulator")
        if t.res.namespaced and t.namespace is None and (t.name or method != "GET"):
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)  # needs .../namespaces/NS/...
        if t.sub == "status" and method not in ("GET", "PUT", "PATCH"):
            raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed on status")
        if t.res.view == "namespace":
            return await self._serve_namespace(request, t)
        if method == "POST" and t.namespace in self._deleted_namespaces:
            raise HttpError(404, "NotFound", f'namespaces "{t.namespace}" not found')
        if t.res.kind == "Binding":
            if method != "POST" or t.name:
                raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed on bindings")
            body = await read_body(request)
            return self._writes.bind(t, str((body.get("metadata") or {}).get("name") or ""), body)
        if t.sub in ("binding", "eviction"):
            if method != "POST":
                raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed")
            body = await read_body(request)
            if t.sub == "binding":
                return self._writes.bind(t, t.name, body)
            return self._writes.evict(t, body)
        if method == "GET":
            if t.name:
                return self._reads.get(request, t)
            if truthy(query.get("watch")):
                return await self._reads.watch(request, t)
            return self._reads.list(request, t)
        if method == "POST" and not t.name:
            return self._writes.create(t, await read_body(request))
        if method == "PUT" and t.name:
            return self._writes.replace(t, await read_body(request))
        if method == "PATCH" and t.name:
            return await self._writes.patch(request, t)
        if method == "DELETE":
            text = await request.text()
            options = parse_json(text) if text.strip() else {}
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be an object")
            if t.name:
                return self._writes.delete(t, t.name, options, query)
            return self._writes.delete_collection(request, t, options)
        raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed here")

    # ----------------------------------------------------------------- namespaces

    def _namespace_object(self, name: str) -> ApiObject:
        obj = self._namespaces.get(name)
        if obj is None:
            obj = new_namespace(name, self._started_at)
            self._namespaces[name] = obj
        return obj

    async def _watch_namespaces(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        response = web.StreamResponse(status=200)
        response.content_type = JSON
        response.enable_chunked_encoding()
        await response.prepare(request)
        with anyio.CancelScope() as scope:
            self._watches.add(scope)
            try:
                await watch_namespaces(
                    response,
                    lambda: namespace_names(self.store, self._namespaces),
                    self._namespace_object,
                    lambda: self.store.resource_version,
                    initial=query.get("resourceVersion", "") in ("", "0"),
                    timeout=float(int_param(query, "timeoutSeconds") or self.watch_timeout),
                    bookmark_interval=(
                        self.bookmark_interval if truthy(query.get("allowWatchBookmarks")) else None
                    ),
                )
            except ConnectionError:
                return response
            finally:
                self._watches.discard(scope)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _serve_namespace(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        names = namespace_names(self.store, self._namespaces)
        if t.sub:
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        if method == "GET" and t.name:
            if t.name not in names:
                raise NotFoundError(f'namespaces "{t.name}" not found', name=t.name)
            obj = self._namespace_object(t.name)
            if wants_table(request):
                return json_response(200, self._tables.table(t.res, [obj], None, request.query))
            return json_response(200, obj)
        if method == "GET" and truthy(request.query.get("watch")):
            return await self._watch_namespaces(request)
        if method == "GET":
            flt = parse_filter(request.query)
            items = [o for n in names if flt.matches(o := self._namespace_object(n))]
            meta = {"resourceVersion": str(self.store.resource_version)}
            if wants_table(request):
                return json_response(200, self._tables.table(t.res, items, meta, request.query))
            listing = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": meta}
            return json_response(200, {**listing, "items": items})
        if method == "POST" and not t.name:
            body = incoming(t, await read_body(request))
            name = body["metadata"].get("name")
            if not isinstance(name, str) or not name:
                raise InvalidObjectError(
                    "Namespace is invalid: metadata.name: Required value", kind="Namespace"
                )
            if name in names:
                raise AlreadyExistsError(f'namespaces "{name}" already exists', name=name)
            self._deleted_namespaces.discard(name)
            obj = self._namespace_object(name)
            labels = body["metadata"].get("labels") or {}
            obj["metadata"]["labels"] = {**labels, **obj["metadata"]["labels"]}
            return json_response(201, obj)
        if method == "DELETE" and t.name:
            if t.name not in names:
                raise NotFoundError(f'namespaces "{t.name}" not found', name=t.name)
            if t.name in DEFAULT_NAMESPACES:
                raise HttpError(
                    403,
                    "Forbidden",
                    f'namespaces "{t.name}" is forbidden: this namespace may not be deleted',
                )
            obj = self._namespace_object(t.name)
            delete_namespaced_objects(self.store, t.name)
            self._namespaces.pop(t.name, None)
            self._deleted_namespaces.add(t.name)
            return json_response(200, {**obj, "status": {"phase": "Terminating"}})
        raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed on namespaces")
