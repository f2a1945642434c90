"""The lines of one watch of the Kubernetes API emulator (layer 4).

The store's watch yields every event of a kind (and namespace); a watch of the API also
has selectors and may ask for Tables. :class:`WatchShape` turns each store event into
the line the client gets: the object in its served view (:mod:`.emulator_views`), as a
one-row Table when asked; with selectors, an object that stops matching is sent as
``DELETED`` and one that starts matching as ``ADDED``, and other objects are not sent;
bookmarks pass unchanged (not in Tables). A watch that resumes from a resourceVersion
primes :attr:`WatchShape.seen` with :func:`matching_at`, the objects that matched then,
so that its first events are classified as the API server would (an object whose state
then the history no longer knows counts as matching: a spurious ``DELETED`` rather
than a missed one). The HTTP streaming, timeouts and 410 errors are the handler's
(:mod:`.emulator`).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.errors import GoneError
from scheduler.sim.emulator.list_selectors import Filter, object_key, select
from scheduler.sim.emulator.resource_catalog import ResourceInfo
from scheduler.sim.emulator.responses import dumps
from scheduler.sim.emulator.tables import TablePrinter
from scheduler.sim.emulator.views import view
from scheduler.sim.store import ApiObject, ObjectStore, WatchEvent

__all__ = ["WatchShape", "matching_at"]


class WatchShape:
    """Turns the store's events into the lines of one watch: the served view, the
    selectors (an object leaving them is DELETED, one entering them ADDED), Tables (when
    a ``printer`` is given). ``seen`` holds the keys of the objects the client has as
    matching."""

    def __init__(
        self,
        res: ResourceInfo,
        flt: Filter,
        printer: TablePrinter | None,
        query: Mapping[str, str],
    ) -> None:
        self.res = res
        self.flt = flt
        self.printer = printer
        self.query = query
        self.seen: set[tuple[str, str]] = set()

    def line(self, ev: WatchEvent) -> bytes | None:
        res = self.res
        if ev.type == "BOOKMARK":
            if self.printer is not None:
                return None
            obj: ApiObject = {"apiVersion": res.api_version, "kind": res.kind, **ev.obj}
            return dumps({"type": "BOOKMARK", "object": obj}) + b"\n"
        obj = view(res, ev.obj)
        kind = ev.type
        if not self.flt.everything:
            key = object_key(obj)
            if self.flt.matches(obj):
                if kind == "DELETED":
                    self.seen.discard(key)
                else:
                    if kind == "MODIFIED" and key not in self.seen:
                        kind = "ADDED"
                    self.seen.add(key)
            elif key in self.seen:
                self.seen.discard(key)
                kind = "DELETED"
            else:
                return None
        if self.printer is not None:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            obj = self.printer.table(res, [obj], meta, self.query)
        return dumps({"type": kind, "object": obj}) + b"\n"


def matching_at(
    store: ObjectStore, res: ResourceInfo, namespace: str | None, flt: Filter, since: int
) -> set[tuple[str, str]]:
    """The objects that matched ``flt`` at revision ``since``, from the current state and
    the history; an object whose state then is no longer known counts as matching (a
    watch then sends a spurious DELETED rather than miss one)."""
    kind = res.kind_in_store
    try:
        after = store.events_since(kind, since, namespace)
    except GoneError:
        return set()  # the watch itself answers 410
    first: dict[tuple[str, str], str] = {}
    for ev in after:
        first.setdefault(object_key(ev.obj), ev.type)
    seen = {k for o in select(store, res, namespace, flt)[0] if (k := object_key(o)) not in first}
    unsure = {k for k, type_ in first.items() if type_ != "ADDED"}
    if not unsure:
        return seen
    try:
        history = store.events_since(kind, 0, namespace)
    except GoneError:
        return seen | unsure
    before: dict[tuple[str, str], WatchEvent] = {}
    for ev in history:
        if ev.resource_version > since:
            break
        before[object_key(ev.obj)] = ev
    for k in unsure:
        last = before.get(k)
        if last is None or (last.type != "DELETED" and flt.matches(view(res, last.obj))):
            seen.add(k)
    return seen
