"""The Kubernetes API emulator's reads: get, list (selectors, pages) and watch (layer 4,
sim emulator).

:class:`Reads` answers the GET requests of :class:`~scheduler.sim.emulator.ApiEmulator`
on its store: one object, a page of a list (``limit`` and ``continue``; a ``Table`` when
asked), or a watch streamed as JSON lines until its timeout, the client leaving or the
emulator stopping (every watch's cancel scope is in the emulator's set).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from contextlib import aclosing
from typing import Any

import anyio
from aiohttp import web

from scheduler.api.errors import GoneError
from scheduler.sim.emulator.list_selectors import object_key, parse_filter, select
from scheduler.sim.emulator.params import int_param
from scheduler.sim.emulator.responses import JSON, bad_request, dumps, status_of
from scheduler.sim.emulator.tables import TablePrinter
from scheduler.sim.emulator.views import view
from scheduler.sim.emulator.watch import WatchShape, matching_at
from scheduler.sim.emulator.wire import Target, json_response, truthy, wants_table
from scheduler.sim.store import ObjectStore

__all__ = ["Reads"]


class Reads:
    def __init__(
        self,
        store: ObjectStore,
        tables: TablePrinter,
        watches: set[anyio.CancelScope],
        *,
        bookmark_interval: float,
        watch_timeout: float,
    ) -> None:
        self._store = store
        self._tables = tables
        self._watches = watches
        """The cancel scopes of the watches being served (the emulator cancels them)."""
        self._bookmark_interval = bookmark_interval
        self._watch_timeout = watch_timeout

    def get(self, request: web.Request, t: Target) -> web.StreamResponse:
        """One object, or a ``Table`` of it."""
        obj = view(t.res, self._store.get(t.res.kind_in_store, t.namespace or "", t.name))
        if wants_table(request):
            return json_response(200, self._tables.table(t.res, [obj], None, request.query))
        return json_response(200, obj)

    def list(self, request: web.Request, t: Target) -> web.StreamResponse:
        query = request.query
        items, rv = select(self._store, t.res, t.namespace, parse_filter(query))
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
        if wants_table(request):
            return json_response(200, self._tables.table(t.res, page, meta, query))
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": meta,
            "items": page,
        }
        return json_response(200, body)

    async def watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        query = request.query
        flt = parse_filter(query)
        rv_text = query.get("resourceVersion", "")
        since: int | None = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise bad_request(f"invalid resourceVersion {rv_text!r}") from exc
        timeout = float(int_param(query, "timeoutSeconds") or self._watch_timeout)
        bookmarks = truthy(query.get("allowWatchBookmarks"))
        table = wants_table(request)
        response = web.StreamResponse(status=200)
        response.content_type = JSON
        response.enable_chunked_encoding()
        await response.prepare(request)
        shape = WatchShape(t.res, flt, self._tables if table else None, query)
        if since is not None and not flt.everything:
            shape.seen.update(matching_at(self._store, t.res, t.namespace, flt, since))
        with anyio.CancelScope() as scope:
            self._watches.add(scope)
            try:
                with anyio.move_on_after(timeout):
                    events = self._store.watch(
                        t.res.kind_in_store,
                        namespace=t.namespace,
                        resource_version=since,
                        bookmark_interval=self._bookmark_interval if bookmarks else None,
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
