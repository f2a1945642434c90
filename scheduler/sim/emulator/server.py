"""The API emulator's server: lifecycle, routing and request handlers (layer 4, sim).

:class:`ApiEmulator` serves the embedded cluster's :class:`~scheduler.sim.store.ObjectStore`
over HTTP; what it serves and how it differs from the API server is in the package
docstring (:mod:`scheduler.sim.emulator`). It must run on the event loop that owns the
store, on real time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal

import anyio
from aiohttp import web

from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidInputError,
    InvalidObjectError,
    NotFoundError,
)
from scheduler.api.group_apis import KUBERNETES
from scheduler.schema import CrdCatalog, load_crds
from scheduler.sim.admission import AdmissionError, admit_pod_priority
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
from scheduler.sim.emulator.jsonpatch import JsonPatchError, apply_json_patch
from scheduler.sim.emulator.namespaces import (
    DEFAULT_NAMESPACES,
    delete_namespaced_objects,
    namespace_names,
    new_namespace,
)
from scheduler.sim.emulator.params import int_param
from scheduler.sim.emulator.resources import (
    ACTION_SUBRESOURCES,
    BUILTIN_RESOURCES,
    ResourceInfo,
    custom_resources,
)
from scheduler.sim.emulator.responses import (
    JSON,
    JSON_PATCH,
    MERGE,
    NOT_FOUND_MESSAGE,
    STRATEGIC,
    HttpError,
    bad_request,
    dumps,
    failure,
    status_of,
    success,
)
from scheduler.sim.emulator.selectors import (
    object_key,
    parse_filter,
    select,
)
from scheduler.sim.emulator.tables import TablePrinter
from scheduler.sim.emulator.views import unview, view
from scheduler.sim.emulator.watch import WatchShape, matching_at
from scheduler.sim.patch import merge_patch, strategic_merge_patch
from scheduler.sim.store import ApiObject, ObjectStore

log = logging.getLogger(__name__)

_TRUE: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})

PatchKind = Literal["merge", "strategic", "json"]


@dataclass(slots=True)
class _Target:
    """What a request's path names."""

    res: ResourceInfo
    namespace: str | None
    name: str = ""
    sub: str = ""


def _truthy(value: str | None) -> bool:
    return value is not None and value in _TRUE


def _json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type=JSON)


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
        target: _Target | None = None
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
            return _json_response(exc.code, status_of(exc, res, target.name if target else ""))
        except HttpError as exc:
            return _json_response(exc.code, failure(exc.code, exc.reason, exc.message))
        except (InvalidInputError, JsonPatchError) as exc:
            code, reason = (
                (422, "Invalid") if isinstance(exc, JsonPatchError) else (400, "BadRequest")
            )
            return _json_response(code, failure(code, reason, str(exc)))
        except Exception as exc:
            log.exception("emulator: %s %s failed", request.method, request.path_qs)
            return _json_response(500, failure(500, "InternalError", f"internal error: {exc}"))

    def _discovery(self, parts: list[str]) -> web.StreamResponse | None:
        if parts in ([], ["api"], ["apis"]) or parts[0] in (
            "version",
            "healthz",
            "readyz",
            "livez",
        ):
            return self._root_document(parts)
        if parts[:2] == ["openapi", "v3"]:
            return _json_response(200, openapi_v3(self._resources, parts[2:]))
        if parts[0] == "api" and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[0] == "apis" and len(parts) == 2:
            group = api_group(self._resources, parts[1])
            if group is None:
                raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
            return _json_response(200, {"kind": "APIGroup", "apiVersion": "v1", **group})
        if parts[0] == "apis" and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        if parts[0] not in ("api", "apis"):
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        return None

    def _root_document(self, parts: list[str]) -> web.StreamResponse:
        if not parts:
            return _json_response(200, root_paths(self._resources))
        if parts[0] == "version":
            return _json_response(200, dict(SERVER_VERSION))
        if parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts == ["api"]:
            address = f"{self.host}:{self._served_port or self.port}"
            return _json_response(200, api_versions(address))
        return _json_response(200, api_group_list(self._resources))

    def _resource_list(self, group: str, version: str) -> web.StreamResponse:
        document = resource_list(self._resources, group, version, self.store.has_status_subresource)
        return _json_response(200, document)

    def _target(self, parts: list[str]) -> _Target:
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
        return _Target(res, namespace, name, sub)

    async def _serve(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        if _truthy(query.get("dryRun")) or query.get("dryRun") == "All":
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
            body = await self._body(request)
            return self._bind(t, str((body.get("metadata") or {}).get("name") or ""), body)
        if t.sub in ("binding", "eviction"):
            if method != "POST":
                raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed")
            body = await self._body(request)
            if t.sub == "binding":
                return self._bind(t, t.name, body)
            return self._evict(t, body)
        if method == "GET":
            if t.name:
                obj = view(t.res, self.store.get(t.res.kind_in_store, t.namespace or "", t.name))
                if self._wants_table(request):
                    return _json_response(200, self._tables.table(t.res, [obj], None, query))
                return _json_response(200, obj)
            if _truthy(query.get("watch")):
                return await self._watch(request, t)
            return self._list(request, t)
        if method == "POST" and not t.name:
            return self._create(t, await self._body(request))
        if method == "PUT" and t.name:
            return self._replace(t, await self._body(request))
        if method == "PATCH" and t.name:
            return await self._patch(request, t)
        if method == "DELETE":
            text = await request.text()
            options = self._json(text) if text.strip() else {}
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be an object")
            if t.name:
                return self._delete(t, t.name, options, query)
            return self._delete_collection(request, t, options)
        raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed here")

    # ----------------------------------------------------------------- bodies

    @staticmethod
    def _json(text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    async def _body(self, request: web.Request) -> dict[str, Any]:
        body = self._json(await request.text())
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        return body

    def _incoming(self, t: _Target, body: dict[str, Any], name: str = "") -> dict[str, Any]:
        """Check and complete the kind, apiVersion, name and namespace of a written object."""
        res = t.res
        kind = body.setdefault("kind", res.kind)
        api_version = body.setdefault("apiVersion", res.api_version)
        if kind != res.kind or api_version != res.api_version:
            raise bad_request(
                f"the object's kind and apiVersion ({api_version}, {kind}) do not match the "
                f"resource ({res.api_version}, {res.kind})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if name and meta.setdefault("name", name) != name:
            raise bad_request(
                "the name of the object does not match the name on the URL"
                f" ({meta['name']!r} != {name!r})"
            )
        if (
            res.namespaced
            and t.namespace is not None
            and meta.setdefault("namespace", t.namespace) != t.namespace
        ):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        return body

    def _admit(self, res: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """Validate and default a custom object with its CRD schema (422 if invalid); a
        ``scheduling.k8s.io`` PodGroup naming a Workload that does not exist is refused
        (403), as the API server's admission does."""
        if res.crd is None:
            return obj
        checked = self.catalog.check(obj)
        if res.kind_in_store == KUBERNETES.pod_group_key:
            spec = checked.get("spec") or {}
            workload = ((spec.get("podGroupTemplateRef") or {}).get("workload") or {}).get(
                "workloadName"
            )
            meta = checked.get("metadata") or {}
            kind = f"Workload.{KUBERNETES.group}"
            if (
                workload
                and self.store.try_get(kind, str(meta.get("namespace") or ""), workload) is None
            ):
                raise HttpError(
                    403,
                    "Forbidden",
                    f'podgroups.scheduling.k8s.io "{meta.get("name", "")}" is forbidden: '
                    f'PodGroup rejected: Workload "{workload}" not found',
                )
        return checked

    # ----------------------------------------------------------------- reads

    def _list(self, request: web.Request, t: _Target) -> web.StreamResponse:
        query = request.query
        items, rv = select(self.store, t.res, t.namespace, parse_filter(query))
        start = 0
        token = query.get("continue", "")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))
                key = (str(after[0]), str(after[1]))
            except (ValueError, TypeError, IndexError, binascii.Error) as exc:
                raise bad_request("invalid continue token") from exc
            while start < len(items) and object_key(items[start]) <= key:
                start += 1
        limit = int_param(query, "limit")
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        end = len(items)
        if limit is not None and limit > 0 and start + limit < len(items):
            end = start + limit
            last = object_key(items[end - 1])
            meta["continue"] = base64.urlsafe_b64encode(dumps(list(last))).decode()
            meta["remainingItemCount"] = len(items) - end
        page = items[start:end]
        if self._wants_table(request):
            return _json_response(200, self._tables.table(t.res, page, meta, query))
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": meta,
            "items": page,
        }
        return _json_response(200, body)

    async def _watch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        query = request.query
        flt = parse_filter(query)
        rv_text = query.get("resourceVersion", "")
        since: int | None = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise bad_request(f"invalid resourceVersion {rv_text!r}") from exc
        timeout = float(int_param(query, "timeoutSeconds") or self.watch_timeout)
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        table = self._wants_table(request)
        response = web.StreamResponse(status=200)
        response.content_type = JSON
        response.enable_chunked_encoding()
        await response.prepare(request)
        shape = WatchShape(t.res, flt, self._tables if table else None, query)
        if since is not None and not flt.everything:
            shape.seen.update(matching_at(self.store, t.res, t.namespace, flt, since))
        with anyio.CancelScope() as scope:
            self._watches.add(scope)
            try:
                with anyio.move_on_after(timeout):
                    events = self.store.watch(
                        t.res.kind_in_store,
                        namespace=t.namespace,
                        resource_version=since,
                        bookmark_interval=self.bookmark_interval if bookmarks else None,
                    )
                    async with aclosing(events) as stream:
                        async for ev in stream:
                            line = shape.line(ev)
                            if line is not None:
                                await response.write(line)
            except GoneError as exc:
                event = {"type": "ERROR", "object": status_of(exc, t.res)}
                with contextlib.suppress(ConnectionError):
                    await response.write(dumps(event) + b"\n")
            except ConnectionError:
                return response
            finally:
                self._watches.discard(scope)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    # ----------------------------------------------------------------- writes

    def _create(self, t: _Target, body: dict[str, Any]) -> web.StreamResponse:
        obj = self._incoming(t, body)
        if t.res.kind == "Pod" and not t.sub:
            classes, _ = self.store.list("PriorityClass")
            try:
                obj = admit_pod_priority(obj, classes)
            except AdmissionError as exc:
                name = (obj.get("metadata") or {}).get("name", "")
                raise HttpError(403, "Forbidden", f'pods "{name}" is forbidden: {exc}') from exc
        if t.res.kind == "CustomResourceDefinition":
            obj = self._establish(obj)
        created = self.store.create(unview(t.res, self._admit(t.res, obj)))
        return _json_response(201, view(t.res, created))

    def _establish(self, crd: dict[str, Any]) -> dict[str, Any]:
        """A CustomResourceDefinition of a kind the emulator serves is ``Established`` at
        once, as the API server's controllers make it; any other is stored, not served."""
        spec = crd.get("spec") or {}
        name = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        for marker in served_markers(self.catalog, ()):
            if marker["metadata"]["name"] == name:
                return {**crd, "status": marker["status"]}
        return crd

    def _replace(self, t: _Target, body: dict[str, Any]) -> web.StreamResponse:
        stored = unview(t.res, self._incoming(t, body, t.name))
        if t.res.crd is not None:
            old = self.store.get(t.res.kind_in_store, t.namespace or "", t.name)
            stored = self._admit_update(t, old, stored)
        updated = self.store.replace(stored, subresource=t.sub or None)
        return _json_response(200, view(t.res, updated))

    def _admit_update(self, t: _Target, old: ApiObject, new: dict[str, Any]) -> dict[str, Any]:
        """Validate an update of a custom object as the API server does: what the write
        cannot change (status through the main resource, the rest through ``status``) is
        taken from the stored object first. Returns the object to hand to the store."""
        if not self.store.has_status_subresource(t.res.kind_in_store):
            return self._admit(t.res, new)
        if t.sub == "status":
            candidate = {**old, "metadata": new.get("metadata"), "status": new.get("status")}
        else:
            candidate = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                candidate["status"] = old["status"]
        return self._admit(t.res, candidate)

    async def _patch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        content_type = request.content_type
        kind: PatchKind
        if content_type == MERGE:
            kind = "merge"
        elif content_type == STRATEGIC and t.res.crd is None:
            kind = "strategic"
        elif content_type == JSON_PATCH:
            kind = "json"
        elif content_type != STRATEGIC:  # not a patch at all: the server's generic refusal
            raise HttpError(415, "UnsupportedMediaType", "415: Unsupported Media Type")
        else:  # a patch type the resource does not take (strategic merge of a custom object)
            accepted = [JSON_PATCH, MERGE] + ([] if t.res.crd else [STRATEGIC])
            raise HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )
        patch = self._json(await request.text())
        res, namespace = t.res, t.namespace or ""
        if kind != "json" and not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        if kind != "json" and res.crd is None and res.view == "plain":
            # the store's own copy-on-write patch: the hot path of status updates
            updated = self.store.patch(
                res.kind_in_store,
                namespace,
                t.name,
                patch,
                patch_type=kind,
                subresource=t.sub or None,
            )
            return _json_response(200, view(res, updated))
        stored = self.store.get(res.kind_in_store, namespace, t.name)
        old = view(res, stored)
        if kind == "json":
            new = apply_json_patch(old, patch)
        elif kind == "merge":
            new = merge_patch(old, patch)
        else:
            new = strategic_merge_patch(old, patch)
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise InvalidObjectError("a patch must leave an object with metadata", kind=res.kind)
        new["metadata"] = {**new["metadata"], "name": t.name}
        if res.namespaced:
            new["metadata"]["namespace"] = namespace
        new = unview(res, new)
        if res.crd is not None:
            new = self._admit_update(t, stored, new)
        updated = self.store.replace(new, subresource=t.sub or None)
        return _json_response(200, view(res, updated))

    def _delete(
        self, t: _Target, name: str, options: Mapping[str, Any], query: Mapping[str, str]
    ) -> web.StreamResponse:
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = int_param(query, "gracePeriodSeconds")
        pre = options.get("preconditions") or {}
        kind, namespace = t.res.kind_in_store, t.namespace or ""
        last = self.store.delete(
            kind,
            namespace,
            name,
            grace_period_seconds=None if grace is None else int(grace),
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
        )
        still = self.store.try_get(kind, namespace, name)
        if still is not None:
            return _json_response(200, view(t.res, still))
        if t.res.return_deleted:
            return _json_response(200, view(t.res, last))
        details: dict[str, Any] = {"name": name, "kind": t.res.name}
        if t.res.group:
            details["group"] = t.res.group
        if last["metadata"].get("uid"):
            details["uid"] = last["metadata"]["uid"]
        return _json_response(200, success(200, details))

    def _delete_collection(
        self, request: web.Request, t: _Target, options: Mapping[str, Any]
    ) -> web.StreamResponse:
        items, _ = select(self.store, t.res, t.namespace, parse_filter(request.query))
        grace = options.get("gracePeriodSeconds")
        if grace is None and request.query.get("gracePeriodSeconds"):
            grace = request.query["gracePeriodSeconds"]
        deleted: list[ApiObject] = []
        for obj in items:
            meta = obj["metadata"]
            with contextlib.suppress(NotFoundError):
                deleted.append(
                    view(
                        t.res,
                        self.store.delete(
                            t.res.kind_in_store,
                            meta.get("namespace", ""),
                            meta["name"],
                            grace_period_seconds=None if grace is None else int(grace),
                        ),
                    )
                )
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": deleted,
        }
        return _json_response(200, body)

    def _bind(self, t: _Target, name: str, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Binding") != "Binding":
            raise bad_request(f"expected a Binding, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        target = body.get("target") or {}
        node = target.get("name") if isinstance(target, Mapping) else None
        if not name or (meta.get("name") and meta["name"] != name):
            raise bad_request("the Binding's metadata.name must name the pod on the URL")
        if not isinstance(node, str) or not node:
            raise InvalidObjectError(
                f'Binding "{name}" is invalid: target.name: Required value',
                kind="Binding",
                name=name,
            )
        self.store.bind(
            t.namespace or "default",
            name,
            node,
            uid=meta.get("uid") or None,
            annotations=meta.get("annotations") or None,
        )
        return _json_response(201, success(201))

    def _evict(self, t: _Target, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Eviction") != "Eviction":
            raise bad_request(f"expected an Eviction, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise bad_request("the Eviction's metadata.name must name the pod on the URL")
        options = body.get("deleteOptions") or {}
        pre = options.get("preconditions") or {}
        namespace = t.namespace or "default"
        if pre.get("resourceVersion"):
            current = self.store.get("Pod", namespace, t.name)["metadata"].get("resourceVersion")
            if str(pre["resourceVersion"]) != current:
                raise ConflictError(
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: {current}",
                    kind="Pod",
                    name=t.name,
                )
        grace = options.get("gracePeriodSeconds")
        self.store.evict(
            namespace,
            t.name,
            uid=pre.get("uid") or None,
            grace_period_seconds=None if grace is None else int(grace),
        )
        return _json_response(201, success(201))

    # ----------------------------------------------------------------- namespaces

    def _namespace_object(self, name: str) -> ApiObject:
        obj = self._namespaces.get(name)
        if obj is None:
            obj = new_namespace(name, self._started_at)
            self._namespaces[name] = obj
        return obj

    async def _serve_namespace(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method = request.method
        names = namespace_names(self.store, self._namespaces)
        if t.sub:
            raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
        if method == "GET" and t.name:
            if t.name not in names:
                raise NotFoundError(f'namespaces "{t.name}" not found', name=t.name)
            obj = self._namespace_object(t.name)
            if self._wants_table(request):
                return _json_response(200, self._tables.table(t.res, [obj], None, request.query))
            return _json_response(200, obj)
        if method == "GET" and not _truthy(request.query.get("watch")):
            flt = parse_filter(request.query)
            items = [o for n in names if flt.matches(o := self._namespace_object(n))]
            meta = {"resourceVersion": str(self.store.resource_version)}
            if self._wants_table(request):
                return _json_response(200, self._tables.table(t.res, items, meta, request.query))
            listing = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": meta}
            return _json_response(200, {**listing, "items": items})
        if method == "POST" and not t.name:
            body = self._incoming(t, await self._body(request))
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
            return _json_response(201, obj)
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
            return _json_response(200, {**obj, "status": {"phase": "Terminating"}})
        raise HttpError(405, "MethodNotAllowed", f"{method} is not allowed on namespaces")

    # ----------------------------------------------------------------- tables

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")
