"""The event recorder (layer 4, kube): ``events.k8s.io/v1`` Events, aggregated into
series, written by a background writer on a client of its own.

Job: turn the loop's :class:`~scheduler.ports.Event` values into Event objects on the API
server, as kube-scheduler's event broadcaster does, without ever delaying a bind:

* :meth:`KubeEventRecorder.record` is synchronous, O(1), never blocks and never raises.
* The writer (:meth:`KubeEventRecorder.run`, ``settings.workers`` tasks in the owner's
  task group) sends through a client of its own, made from the process' client by
  :meth:`scheduler.kube.client.KubeClient.sibling` when it starts and closed when it
  ends: its rate limit (``settings.qps``/``burst``: ``--event-qps``, ``--event-burst``)
  and its connection pool are not the binds'. Waiting for a token keeps the event
  queued; it never drops it.
* A repeat of an event (same regarding object, type, reason and message) within
  ``series_window`` of the previous one is not a new Event: it raises the ``series.count``
  of the existing one. The first repeat is written at once, later ones at most every
  ``series_interval`` per series, with every repeat counted.
* New events are written before series updates, so that a backlog of repeated
  ``FailedScheduling`` counts never holds back a ``Scheduled`` event.
* A new event is dropped, and counted (:attr:`KubeEventRecorder.dropped`, and
  ``on_drop(reason)``, which feeds ``scheduler_events_dropped_total{reason}``), when its
  object went over ``per_object_burst``/``per_object_per_minute`` (reason ``limit``: a
  spam filter per object, as client-go's) or when ``max_pending`` new events wait already
  (reason ``queue_full``).
* A write that failed for a reason that may pass (a 5xx, a timeout or a connection lost
  before the reply, a 429, the API server unreachable) is tried again later, up to
  ``max_tries`` times in all, ``retry_delay`` doubling (capped at 30 s, jittered), as
  client-go's event broadcaster retries. A create retried after an ambiguous failure that
  meets ``AlreadyExists`` took effect the first time: it is not written again under
  another name. Any other failure, or the last try, is logged and counted
  (:attr:`KubeEventRecorder.failed`, and ``on_drop("write_failed")`` for an Event that
  was never created); a 404 on a series update (the Event expired)
  starts a new Event.
* An Event whose namespace is gone (a 404 on its create) or being deleted (the
  namespace's admission refused it: :class:`~scheduler.api.errors.NamespaceTerminatingError`)
  is dropped quietly, never tried again: logged at ``-v 4`` and counted as dropped (reason
  ``namespace_gone``), not as failed; what it told of goes with the namespace. client-go's
  broadcaster does not retry these either.

Event names are ``<regarding name>.<hex nanoseconds>`` in the regarding object's
namespace (``default`` for cluster-scoped objects). Used from one event loop.
"""

from __future__ import annotations

import heapq
import math
import random
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus

from scheduler.api.errors import (
    AlreadyExistsError,
    AmbiguousError,
    ApiError,
    NamespaceTerminatingError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.kube.client import KubeClient
from scheduler.kube.ratelimit import TokenBucket
from scheduler.kube.resource_paths import EVENTS, MERGE_PATCH
from scheduler.kube.timestamps import format_micro_time
from scheduler.logging import get_logger, v
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock, Event, ObjectRef

__all__ = [
    "DROP_LIMIT",
    "DROP_NAMESPACE_GONE",
    "DROP_QUEUE_FULL",
    "DROP_WRITE_FAILED",
    "EventSettings",
    "KubeEventRecorder",
]

log = get_logger("sluice.kube.events")

_NOTE_LIMIT: Final[int] = 1024  # events.k8s.io/v1 validation: note is at most 1 kB
#: The ``reason`` label of ``scheduler_events_dropped_total``.
DROP_LIMIT: Final = "limit"
DROP_QUEUE_FULL: Final = "queue_full"
DROP_WRITE_FAILED: Final = "write_failed"
DROP_NAMESPACE_GONE: Final = "namespace_gone"


@dataclass(frozen=True, slots=True)
class EventSettings:
    """Rate limits, aggregation and queue sizes of :class:`KubeEventRecorder`. Seconds."""

    qps: float = 50.0
    """Writes a second of the event client (``--event-qps``; 0: no limit). kube-scheduler's
    event client has the same rate as its API client, 50 by default..."""
    burst: int = 100
    """...and the same burst (``--event-burst``)."""
    per_object_burst: int = 25
    """New events one object may get at once..."""
    per_object_per_minute: float = 25.0
    """...and how many more a minute after that (repeats joining a series are free)."""
    series_window: float = 360.0
    """A repeat within this long of the last one joins its series (client-go: 6 min)."""
    series_interval: float = 30.0
    """The first repeat of an event is written at once; later ones at most this often
    per series (their count is kept meanwhile)."""
    max_pending: int = 20_000
    """New events waiting to be written; beyond this they are dropped (``queue_full``).
    Large enough for one ``FailedScheduling`` per pod of a 10,000-pod burst that finds no
    room, plus their ``Scheduled`` events later."""
    max_tracked: int = 50_000
    """Series remembered for aggregation (least recently seen forgotten first; those
    still to be written are kept)."""
    workers: int = 16
    """Writes in flight at once. The binds have 64: with 4 here, a Scheduled event
    was written for 300 of 4,000 pods by the time the last was bound through a real API
    server, and the last event came 3.6 s after the last bind (with 16: 1,137, 1.8 s)."""
    timeout: float = 10.0
    """``_request_timeout`` of each event write."""
    max_tries: int = 12
    """Attempts of one write whose failures may pass (client-go: 12)..."""
    retry_delay: float = 1.0
    """...the first retry this long after the failure, doubling up to 30 s."""


@dataclass(slots=True)
class _Series:
    """One Event object and the repeats recorded for it."""

    event: Event
    namespace: str
    name: str
    first_wall: float
    last_wall: float
    last_seen: float
    count: int = 1
    written: int = 0  # the count the server has (0: not created yet)
    next_patch: float = 0.0  # clock time before which no series update is sent
    tries: int = 0  # failed attempts of the write in hand (reset when one succeeds)
    maybe_created: bool = False  # a create failed ambiguously: it may exist already


_Key = tuple[str, str, str, str, str, str, str]


def _key_of(event: Event) -> _Key:
    r = event.regarding
    return (r.kind, r.namespace, r.name, r.uid, event.type, event.reason, event.message)


def _ref_json(ref: ObjectRef) -> dict[str, str]:
    out = {"kind": ref.kind, "name": ref.name}
    if ref.api_version:
        out["apiVersion"] = ref.api_version
    if ref.namespace:
        out["namespace"] = ref.namespace
    if ref.uid:
        out["uid"] = ref.uid
    return out


def _may_pass(exc: ApiError) -> bool:
    """Whether a failed write is worth trying again: a 5xx, a timeout or a connection lost
    (AmbiguousError), the API server unreachable (a ServerError of code 500), a 429.
    Not a 4xx such as 403 or 422, whose answer would not change."""
    if isinstance(exc, AmbiguousError | TooManyRequestsError):
        return True
    return type(exc) is ServerError and exc.code >= 500


def _note(message: str) -> str:
    data = message.encode()
    if len(data) <= _NOTE_LIMIT:
        return message
    return data[: _NOTE_LIMIT - 3].decode("utf-8", "ignore") + "..."


class KubeEventRecorder:
    """``events.k8s.io/v1`` Events, aggregated, spam-filtered per object, written in the
    background (see the module docstring for the contract).

    ``client`` is the process' client; :meth:`run` writes on a sibling of it. ``on_drop
    (reason)`` is called for every dropped event.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        reporting_controller: str = "sluice",
        reporting_instance: str | None = None,
        settings: EventSettings | None = None,
        clock: Clock | None = None,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self._writes: KubeClient | None = None  # the sibling, while run() runs
        self.controller = reporting_controller
        self.instance = reporting_instance or f"{reporting_controller}-{socket.gethostname()}"
        self.settings = settings or EventSettings()
        self.clock: Clock = clock or SystemClock()
        self.on_drop = on_drop
        self._per_object: OrderedDict[tuple[str, str, str, str], TokenBucket] = OrderedDict()
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._new: deque[_Key] = deque()  # series not created yet
        self._updates: deque[_Key] = deque()  # series updates due now
        self._queued: set[_Key] = set()  # in _new or _updates
        self._writing: set[_Key] = set()
        self._later: list[tuple[float, _Key]] = []  # heap of (due, key) series updates
        self._later_keys: set[_Key] = set()
        self._work = anyio.Event()  # set when a write is queued (wakes idle writers)
        self._timer = anyio.Event()  # set when a deferred update is added
        self._idle = anyio.Event()
        self._last_name_ns = 0
        self.recorded = 0
        """Events given to :meth:`record` (repeats included)."""
        self.aggregated = 0
        """Repeats folded into an existing series."""
        self.dropped = 0
        """New events dropped by the per-object limit or a full queue."""
        self.written = 0
        """Successful writes (creates and series updates)."""
        self.failed = 0
        """Writes that failed for good (not retried, or out of tries)."""
        self.retried = 0
        """Writes tried again after a failure that may pass."""

    # ----------------------------------------------------------------- recording

    def record(self, event: Event) -> None:
        """Queue ``event`` for writing. Never blocks and never raises."""
        try:
            self._record(event)
        except Exception:  # best effort: an event must never break scheduling
            self._drop(DROP_QUEUE_FULL)
            log.exception("event dropped", dropped=repr(event)[:200])

    def _drop(self, reason: str) -> None:
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop(reason)

    def _record(self, event: Event) -> None:
        self.recorded += 1
        now = self.clock.now()
        wall = self.clock.wall()
        key = _key_of(event)
        series = self._series.get(key)
        if series is not None and now - series.last_seen <= self.settings.series_window:
            series.count += 1
            series.last_seen = now
            series.last_wall = wall
            self._series.move_to_end(key)
            self.aggregated += 1
            if series.written:
                self._schedule_update(key, series)
            return  # not created yet: the create will carry the count
        if len(self._new) >= self.settings.max_pending:
            self._drop(DROP_QUEUE_FULL)
            return
        if not self._admit(event):
            self._drop(DROP_LIMIT)
            return
        namespace = event.regarding.namespace or "default"
        self._series[key] = _Series(event, namespace, self._name(event), wall, wall, now)
        self._series.move_to_end(key)
        self._forget_old()
        self._enqueue(key, new=True)

    def _admit(self, event: Event) -> bool:
        """The per-object spam filter: a token of the object's own bucket."""
        r = event.regarding
        obj = (r.kind, r.namespace, r.name, r.uid)
        bucket = self._per_object.get(obj)
        if bucket is None:
            s = self.settings
            bucket = TokenBucket(
                s.per_object_per_minute / 60.0, s.per_object_burst, clock=self.clock
            )
            self._per_object[obj] = bucket
            if len(self._per_object) > self.settings.max_tracked:
                self._per_object.popitem(last=False)
        self._per_object.move_to_end(obj)
        return bucket.try_acquire()

    def _name(self, event: Event) -> str:
        stamp = max(time.time_ns(), self._last_name_ns + 1)
        self._last_name_ns = stamp
        return f"{event.regarding.name}.{stamp:x}"

    def _forget_old(self) -> None:
        while len(self._series) > self.settings.max_tracked:
            old_key = next(iter(self._series))
            if old_key in self._queued or old_key in self._later_keys or old_key in self._writing:
                break  # still to be written: keep it (and the others) for now
            self._series.popitem(last=False)

    def _enqueue(self, key: _Key, *, new: bool) -> None:
        if key not in self._queued:
            self._queued.add(key)
            (self._new if new else self._updates).append(key)
            self._work.set()

    def _schedule_update(self, key: _Key, series: _Series) -> None:
        """A series update is due: now, or at ``series.next_patch``. One at a time per
        series: while it is queued, waiting or being written, nothing more is scheduled
        (the write in flight reschedules when it ends)."""
        if key in self._queued or key in self._later_keys or key in self._writing:
            return
        if series.next_patch <= self.clock.now():
            self._enqueue(key, new=False)
        else:
            self._later_keys.add(key)
            heapq.heappush(self._later, (series.next_patch, key))
            self._timer.set()

    @property
    def pending(self) -> int:
        """Writes not done yet (new events and series updates, due, later or in flight)."""
        return len(self._new) + len(self._updates) + len(self._later) + len(self._writing)

    async def drained(self) -> None:
        """Return when nothing is due to be written now (updates due later may remain).
        For a clean stop: the owner waits on this, with a deadline, before cancelling."""
        while self._new or self._updates or self._writing:
            self._idle = anyio.Event()
            await self._idle.wait()

    # ----------------------------------------------------------------- writing

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write queued events until cancelled. Start it once, in the owner's task group;
        it runs ``settings.workers`` writers and a timer for deferred series updates."""
        writes = self.client.sibling(qps=self.settings.qps, burst=self.settings.burst)
        self._writes = writes
        try:
            await self._run(task_status)
        finally:
            self._writes = None
            with anyio.CancelScope(shield=True):
                await writes.close()

    async def _run(self, task_status: TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(max(1, self.settings.workers)):
                tg.start_soon(self._writer, name=f"event writer {i}")
            task_status.started()
            while True:
                self._promote_due()
                self._timer = anyio.Event()
                delay = self._later[0][0] - self.clock.now() if self._later else math.inf
                with anyio.move_on_after(max(0.0, delay)):
                    await self._timer.wait()

    def _promote_due(self) -> None:
        now = self.clock.now()
        while self._later and self._later[0][0] <= now:
            _, key = heapq.heappop(self._later)
            self._later_keys.discard(key)
            self._enqueue(key, new=False)

    def _next(self) -> _Key | None:
        queue = self._new or self._updates
        if not queue:
            return None
        key = queue.popleft()
        self._queued.discard(key)
        return key

    async def _writer(self) -> None:
        while True:
            key = self._next()
            if key is None:
                # Nothing awaits between finding the queues empty and waiting: a write
                # queued later sets the event waited on.
                self._idle.set()
                if self._work.is_set():
                    self._work = anyio.Event()
                await self._work.wait()
                continue
            series = self._series.get(key)
            if series is None:
                continue
            if series.written and series.next_patch > self.clock.now():
                self._schedule_update(key, series)  # queued during the previous write
                continue
            self._writing.add(key)
            try:
                await self._write(key, series)
            finally:
                self._writing.discard(key)
            if key in self._series and (series.tries or series.count > series.written > 0):
                self._schedule_update(key, series)  # a retry, or repeats to write

    async def _write(self, key: _Key, series: _Series) -> None:
        count = series.count
        try:
            if not series.written:
                await self._create(series, count)
            elif count > series.written:
                await self._patch(series, count)
            else:
                return
        except NotFoundError:
            if series.written:
                # the Event expired (the API server keeps them about an hour): start again
                series.written = 0
                series.name = self._name(series.event)
                self._enqueue(key, new=True)
                return
            self._namespace_gone(key, series, "deleted")  # a create: no namespace to hold it
            return
        except NamespaceTerminatingError:
            self._namespace_gone(key, series, "being deleted")
            return
        except ApiError as exc:
            if _may_pass(exc) and series.tries + 1 < self.settings.max_tries:
                self._retry_later(series, exc)
                return
            self.failed += 1
            log.warning(
                "event write failed",
                reason=series.event.reason,
                regarding=series.event.regarding.key,
                error=str(exc),
                tries=series.tries + 1,
            )
            series.tries = 0
            if not series.written:
                self._series.pop(key, None)  # a later repeat starts a new Event
                if self.on_drop is not None:
                    self.on_drop(DROP_WRITE_FAILED)  # the event is lost
            else:  # the series' count is written again no sooner than its interval
                series.next_patch = self.clock.now() + self.settings.series_interval
            return
        self.written += 1
        series.tries = 0
        series.maybe_created = False
        series.written = count
        # a lone Event's first repeat goes out at once; later repeats wait their turn
        series.next_patch = self.clock.now() + (
            0.0 if count == 1 else self.settings.series_interval
        )

    def _namespace_gone(self, key: _Key, series: _Series, state: str) -> None:
        """Drop ``series``, whose namespace is ``state`` (its create met a 404, or the
        namespace's admission refused it): nothing written there can be read, and another
        try would meet the same answer."""
        self._series.pop(key, None)
        if v(4):
            log.info(
                "event dropped: its namespace is gone",
                namespace=state,
                v=4,
                reason=series.event.reason,
                regarding=series.event.regarding.key,
            )
        self._drop(DROP_NAMESPACE_GONE)

    def _body(self, series: _Series, count: int) -> dict[str, Any]:
        event = series.event
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": series.namespace},
            "eventTime": format_micro_time(series.first_wall),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": event.action,
            "reason": event.reason,
            "note": _note(event.message),
            "type": event.type,
            "regarding": _ref_json(event.regarding),
        }
        if event.related is not None:
            body["related"] = _ref_json(event.related)
        if count > 1:
            body["series"] = {
                "count": count,
                "lastObservedTime": format_micro_time(series.last_wall),
            }
        return body

    def _retry_later(self, series: _Series, exc: ApiError) -> None:
        """Mark this series to be written again after a delay (see
        :class:`EventSettings`); the writer schedules it once the write in hand ends."""
        series.tries += 1
        if not series.written and isinstance(exc, AmbiguousError):
            series.maybe_created = True
        self.retried += 1
        delay = min(30.0, self.settings.retry_delay * 2.0 ** (series.tries - 1))
        series.next_patch = self.clock.now() + delay * (1.0 - 0.25 * random.random())
        if v(4):
            log.info(
                "event write failed, retrying",
                v=4,
                reason=series.event.reason,
                regarding=series.event.regarding.key,
                error=str(exc),
                tries=series.tries,
            )

    async def _create(self, series: _Series, count: int) -> None:
        try:
            await self._post(series, count)
        except AlreadyExistsError:
            if series.maybe_created:
                return  # the earlier try whose reply was lost created it
            series.name = self._name(series.event)  # a clash of names: one more try
            await self._post(series, count)

    @property
    def _client(self) -> KubeClient:
        if self._writes is None:
            raise RuntimeError("events are written only while run() runs")
        return self._writes

    async def _post(self, series: _Series, count: int) -> None:
        await self._client.request(
            "POST",
            EVENTS.path(series.namespace),
            body=self._body(series, count),
            timeout=self.settings.timeout,
            kind="Event",
            name=series.name,
            decode=False,
        )

    async def _patch(self, series: _Series, count: int) -> None:
        patch = {
            "series": {"count": count, "lastObservedTime": format_micro_time(series.last_wall)}
        }
        await self._client.request(
            "PATCH",
            EVENTS.path(series.namespace, series.name),
            body=patch,
            content_type=MERGE_PATCH,
            timeout=self.settings.timeout,
            kind="Event",
            name=series.name,
            decode=False,
        )
