"""The embedded API server's watches: the history of changes and their delivery (layer 4).

The object store (:mod:`scheduler.sim.store`) commits every write, then hands its event to
:class:`WatchHub`, which keeps the bounded history of events (what a watch resumes from;
etcd's compaction: a resourceVersion older than what is kept is 410 Gone), delivers the
event to every subscriber synchronously, in commit order, and streams the events of one
kind to async watchers with bookmarks.

Owned by one :class:`~scheduler.sim.store.ObjectStore`; not thread-safe (one event loop).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import math
from collections import deque
from collections.abc import AsyncGenerator, Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal

from scheduler.api.errors import GoneError

__all__ = ["EventType", "WatchEvent", "WatchHub"]

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
ApiObject = dict[str, Any]
"""An API object: a JSON dict in Kubernetes shape. Read-only once the store returned it."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change, as a watch delivers it.

    ``obj`` is the object after the change; for DELETED, its last state with the
    resourceVersion of the deletion; for BOOKMARK, only ``kind`` and
    ``metadata.resourceVersion``. ``resource_version`` is the revision of the change.
    """

    type: EventType
    kind: str
    obj: ApiObject
    resource_version: int


class _Subscriber:
    __slots__ = ("callback", "kinds")

    def __init__(self, callback: Callable[[WatchEvent], None], kinds: frozenset[str] | None):
        self.callback = callback
        self.kinds = kinds


class _Waker:
    """Wakes one waiting watch generator: a bare asyncio future per wait, optionally with a
    deadline (cheaper than a cancel scope, which matters for watches of busy kinds)."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[None] | None = None

    def set(self) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, deadline: float | None) -> None:
        """Until :meth:`set` or the loop time ``deadline``, whichever comes first."""
        loop = asyncio.get_running_loop()
        future = self.future = loop.create_future()
        handle = loop.call_at(deadline, self.set) if deadline is not None else None
        try:
            await future
        finally:
            self.future = None
            if handle is not None:
                handle.cancel()


class WatchHub:
    """The history of a store's events and their subscribers.

    ``history`` bounds the events kept for :meth:`events_since` and resumed watches.
    """

    def __init__(self, history: int) -> None:
        if history < 0:
            raise ValueError("history must not be negative")
        self._history: deque[WatchEvent] = deque(maxlen=history)
        self._compacted = 0
        self._subscribers: list[_Subscriber] = []
        self._fanout: dict[str, tuple[Callable[[WatchEvent], None], ...]] = {}
        self._queue: deque[WatchEvent] = deque()
        self._dispatching = False

    @property
    def subscribers(self) -> int:
        """How many subscribers (watches included) are listening."""
        return len(self._subscribers)

    def record(self, ev: WatchEvent) -> None:
        """Keep ``ev`` (a committed write's) in the history, dropping the oldest when full,
        and deliver it."""
        history = self._history
        if len(history) == history.maxlen:
            self._compacted = history[0].resource_version if history else ev.resource_version
        history.append(ev)
        self._deliver(ev)

    def subscribe(
        self, callback: Callable[[WatchEvent], None], kinds: Collection[str] | None = None
    ) -> Callable[[], None]:
        """Call ``callback`` with every later event (of ``kinds``, or all); returns the
        unsubscribe function (idempotent).

        Delivery is synchronous, after the write committed, in commit order. A callback
        must not block; it may write to the store (that event is delivered after the
        current one has reached every subscriber). An exception in a callback is logged
        and does not undo the write nor stop delivery to the other subscribers.
        """
        if isinstance(kinds, str):
            kinds = (kinds,)
        sub = _Subscriber(callback, frozenset(kinds) if kinds is not None else None)
        self._subscribers = [*self._subscribers, sub]
        self._fanout = {}

        def unsubscribe() -> None:
            if any(s is sub for s in self._subscribers):
                self._subscribers = [s for s in self._subscribers if s is not sub]
                self._fanout = {}

        return unsubscribe

    def events_since(
        self, kind: str, resource_version: int, namespace: str | None = None
    ) -> builtins.list[WatchEvent]:
        """Events of ``kind`` (in ``namespace``, as the store keys it) with a revision
        above ``resource_version``, oldest first. GoneError if older events were dropped."""
        if resource_version < self._compacted:
            raise GoneError(
                f"too old resource version: {resource_version} ({self._compacted})", kind=kind
            )
        out: builtins.list[WatchEvent] = []
        for ev in reversed(self._history):
            if ev.resource_version <= resource_version:
                break
            if ev.kind == kind and (
                namespace is None or ev.obj["metadata"].get("namespace", "") == namespace
            ):
                out.append(ev)
        out.reverse()
        return out

    async def stream(
        self,
        kind: str,
        namespace: str | None,
        initial: Callable[[], builtins.list[WatchEvent]],
        current_rv: Callable[[], int],
        *,
        bookmark_interval: float | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """The events of ``initial()`` (taken at the first iteration: GoneError then if
        they are too old), then every live event of ``kind`` (in ``namespace``). With
        ``bookmark_interval``, a BOOKMARK carrying ``current_rv()`` is sent every that
        many seconds of the running (asyncio) loop's clock whenever no event is waiting.
        The consumer must close the iterator (``contextlib.aclosing``), or let it be
        garbage collected, to unsubscribe. Buffering is unbounded."""
        buffer: deque[WatchEvent] = deque(initial())
        waker = _Waker()

        def on_event(ev: WatchEvent) -> None:
            if namespace is None or ev.obj["metadata"].get("namespace", "") == namespace:
                buffer.append(ev)
                waker.set()

        unsubscribe = self.subscribe(on_event, (kind,))
        try:
            loop = asyncio.get_running_loop()
            next_bookmark = loop.time() + bookmark_interval if bookmark_interval else math.inf
            while True:
                while buffer:
                    yield buffer.popleft()
                if bookmark_interval and loop.time() >= next_bookmark:
                    now = loop.time()
                    while next_bookmark <= now:
                        next_bookmark += bookmark_interval
                    rv = current_rv()
                    bookmark: dict[str, Any] = {
                        "kind": kind,
                        "metadata": {"resourceVersion": str(rv)},
                    }
                    yield WatchEvent("BOOKMARK", kind, bookmark, rv)
                    continue
                await waker.wait(next_bookmark if bookmark_interval else None)
        finally:
            unsubscribe()

    def _deliver(self, ev: WatchEvent) -> None:
        self._queue.append(ev)
        if self._dispatching:
            return
        self._dispatching = True
        try:
            queue = self._queue
            while queue:
                ev = queue.popleft()
                callbacks = self._fanout.get(ev.kind)
                if callbacks is None:
                    callbacks = tuple(
                        s.callback
                        for s in self._subscribers
                        if s.kinds is None or ev.kind in s.kinds
                    )
                    self._fanout[ev.kind] = callbacks
                for callback in callbacks:
                    try:
                        callback(ev)
                    except Exception:
                        log.exception(
                            "watch subscriber %r failed on %s %s", callback, ev.type, ev.kind
                        )
        finally:
            self._dispatching = False
