"""The scheduler's ports against a real API server (layer 4, kube).

:class:`KubeBackend` is to a Kubernetes API server what :class:`scheduler.sim.backend.
SimBackend` is to the embedded cluster: it implements ``Binder``, ``Evictor``,
``StatusWriter`` and ``EventRecorder`` of :mod:`scheduler.ports`, so the loop cannot tell
them apart. Contracts, besides those of the ports:

* Every call makes one attempt, through the :class:`~scheduler.kube.client.KubeClient`
  (rate limit, timeout), on raw JSON, and raises only ApiError subclasses. Callers own
  retries.
* ``bind``: when ``annotations`` are given, first a strategic-merge patch of the pod's
  metadata (a failure there skips the binding), then a POST of the ``binding``
  subresource, guarded by the pod's uid. 201/200 is success; 409 (already bound, or
  another pod of that name) raises ConflictError, 404 NotFoundError.
* ``evict``: mode ``delete`` deletes the pod with a uid precondition; mode ``evict`` posts
  a ``policy/v1`` Eviction (a PodDisruptionBudget refuses with TooManyRequestsError).
* ``patch_pod_status``: a strategic-merge patch of the ``status`` subresource, so
  conditions merge by type and the others stay. ``patch_status``: a JSON merge patch
  (``application/merge-patch+json``) of a custom object's ``status`` subresource. Both
  carry the object's uid when known, which the API server checks.
* ``record`` (:class:`KubeEventRecorder`) is synchronous and never blocks nor raises: it
  queues; a background task (:meth:`KubeEventRecorder.run`, which the owner of the
  backend runs in its task group) writes ``events.k8s.io/v1`` Events.
"""

from __future__ import annotations

import heapq
import math
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus

from scheduler.api.errors import AlreadyExistsError, ApiError, ConflictError, NotFoundError
from scheduler.kube.client import (
    EVENTS,
    MERGE_PATCH,
    POD_GROUPS,
    PODS,
    QUEUES,
    STRATEGIC_MERGE_PATCH,
    TOPOLOGIES,
    KubeClient,
    Resource,
    SystemClock,
    TokenBucket,
)
from scheduler.kube.timestamps import format_micro_time
from scheduler.logging import get_logger
from scheduler.ports import Clock, ClusterPorts, Event, EvictionMode, ObjectRef

__all__ = ["EventSettings", "EvictionMode", "KubeBackend", "KubeEventRecorder"]

log = get_logger("sluice.kube.backend")


#: Custom kinds whose status :meth:`KubeBackend.patch_status` writes.
STATUS_RESOURCES: Final[Mapping[str, Resource]] = {
    r.kind: r for r in (POD_GROUPS, QUEUES, TOPOLOGIES)
}
_NOTE_LIMIT: Final[int] = 1024  # events.k8s.io/v1 validation: note is at most 1 kB


class KubeBackend:
    """Binder, Evictor, StatusWriter and EventRecorder over the API server.

    ``eviction_mode`` chooses how :meth:`evict` removes a pod (``delete`` or ``evict``).
    ``events`` is the recorder behind :meth:`record` (by default one on the same client);
    run it with :meth:`run` (or its own ``run``). ``timeout`` overrides the client's
    default ``_request_timeout`` for these calls. Used from one event loop.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        eviction_mode: EvictionMode = "delete",
        events: KubeEventRecorder | None = None,
        clock: Clock | None = None,
        timeout: float | None = None,
    ) -> None:
        if eviction_mode not in ("delete", "evict"):
            raise ValueError(f"eviction_mode must be 'delete' or 'evict', not {eviction_mode!r}")
        self.client = client
        self.eviction_mode: EvictionMode = eviction_mode
        self.clock: Clock = clock or SystemClock()
        self.events = events or KubeEventRecorder(client, clock=self.clock)
        self.timeout = timeout

    def ports(self) -> ClusterPorts:
        """The ports for the loop: this backend for each, and its clock."""
        return ClusterPorts(binder=self, evictor=self, status=self, events=self, clock=self.clock)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send recorded events until cancelled (see :meth:`KubeEventRecorder.run`)."""
        await self.events.run(task_status=task_status)

    # ----------------------------------------------------------------- Binder

    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        """Bind ``pod`` to ``node`` after writing ``annotations`` (if any) onto it.

        Not idempotent: ConflictError if the pod is already bound (or its uid changed),
        NotFoundError if it is gone. One attempt.
        """
        if annotations:
            meta: dict[str, Any] = {"annotations": dict(annotations)}
            if pod.uid:
                meta["uid"] = pod.uid
            await self.client.request(
                "PATCH",
                PODS.path(pod.namespace, pod.name),
                body={"metadata": meta},
                content_type=STRATEGIC_MERGE_PATCH,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
        binding_meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
        if pod.uid:
            binding_meta["uid"] = pod.uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": binding_meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.client.request(
                "POST",
                PODS.path(pod.namespace, pod.name, "binding"),
                body=body,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
        except AlreadyExistsError as exc:  # a 409 on a binding is always "already bound"
            raise ConflictError(str(exc), kind="Pod", name=pod.name) from exc

    # ----------------------------------------------------------------- Evictor

    async def evict(self, pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        """Delete (mode ``delete``) or evict (mode ``evict``) ``pod``, guarded by its uid.

        NotFoundError: already gone. TooManyRequestsError: a PodDisruptionBudget refused
        (mode ``evict``). ConflictError: the uid no longer matches (another pod).
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if pod.uid:
            options["preconditions"] = {"uid": pod.uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if self.eviction_mode == "delete":
            await self.client.request(
                "DELETE",
                PODS.path(pod.namespace, pod.name),
                body=options,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
            return
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": options,
        }
        await self.client.request(
            "POST",
            PODS.path(pod.namespace, pod.name, "eviction"),
            body=eviction,
            timeout=self.timeout,
            kind="Pod",
            name=pod.name,
        )

    # ----------------------------------------------------------------- StatusWriter

    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        """Strategic-merge ``patch`` into the pod's status (conditions merge by type).

        ``patch`` is the status content; a mapping whose only key is ``status`` is taken
        as a whole-object patch instead. Idempotent.
        """
        status = patch["status"] if set(patch) == {"status"} else patch
        body: dict[str, Any] = {"status": dict(status)}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        await self.client.request(
            "PATCH",
            PODS.path(pod.namespace, pod.name, "status"),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
            timeout=self.timeout,
            kind="Pod",
            name=pod.name,
        )

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        """Merge-patch ``status`` into the status subresource of the custom object ``ref``
        (a PodGroup, Queue or Topology; ValueError for another kind). Idempotent."""
        resource = STATUS_RESOURCES.get(ref.kind)
        if resource is None:
            raise ValueError(f"no status subresource known for kind {ref.kind!r}")
        body: dict[str, Any] = {"status": dict(status)}
        if ref.uid:
            body["metadata"] = {"uid": ref.uid}
        await self.client.request(
            "PATCH",
            resource.path(ref.namespace or None, ref.name, "status"),
            body=body,
            content_type=MERGE_PATCH,
            timeout=self.timeout,
            kind=ref.kind,
            name=ref.name,
        )

    # ----------------------------------------------------------------- EventRecorder

    def record(self, event: Event) -> None:
        """Queue ``event`` (see :meth:`KubeEventRecorder.record`). Never blocks or raises."""
        self.events.record(event)


# =========================================================================== events


@dataclass(frozen=True, slots=True)
class EventSettings:
    """Aggregation and rate limits of :class:`KubeEventRecorder`. Times in seconds."""

    per_object_burst: int = 25
    """New events one object may get at once..."""
    per_object_per_minute: float = 25.0
    """...and how many more a minute after that."""
    burst: int = 100
    """New events at once, over all objects..."""
    qps: float = 10.0
    """...and how many more a second after that."""
    series_window: float = 360.0
    """A repeat within this long of the last one joins its series (client-go: 6 min)."""
    series_interval: float = 30.0
    """The first repeat of an event is written at once; later ones at most this often
    per series (their count is kept meanwhile)."""
    max_pending: int = 1000
    """New events waiting to be written; beyond this they are dropped."""
    max_tracked: int = 4096
    """Series remembered for aggregation (least recently seen forgotten first)."""
    timeout: float = 10.0
    """``_request_timeout`` of each event write."""


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


_Key = tuple[str, str, str, str, str, str, str]


def _key_of(event: Event) -> _Key:
    r = event.regarding
    return (r.kind, r.namespace, r.name, r.uid, event.type, event.reason, event.message)


def _ref_json(ref: ObjectRef) -> dict[str, str]:
    out = {"kind": ref.kind, "name": ref.name}
    if ref.namespace:
        out["namespace"] = ref.namespace
    if ref.uid:
        out["uid"] = ref.uid
    return out


def _note(message: str) -> str:
    data = message.encode()
    if len(data) <= _NOTE_LIMIT:
        return message
    return data[: _NOTE_LIMIT - 3].decode("utf-8", "ignore") + "..."


class KubeEventRecorder:
    """``events.k8s.io/v1`` Events, aggregated and rate-limited, written in the background.

    :meth:`record` is synchronous, O(1), never blocks and never raises. A repeat of an
    event (same regarding object, type, reason and message) within
    ``settings.series_window`` of the previous one is not a new Event: it raises the
    ``series.count`` of the existing one (the first repeat is written at once, later ones
    at most every ``settings.series_interval``, with every repeat counted). A new event
    is dropped (counted in :attr:`dropped`) when its object exceeded
    ``per_object_burst`` / ``per_object_per_minute``, when all objects together exceeded
    ``burst`` / ``qps``, or when ``max_pending`` events wait already. :meth:`run` writes
    them, one at a time, until cancelled; a failed write is logged and counted in
    :attr:`failed`, never retried. Event names are ``<regarding name>.<hex nanoseconds>``
    in the regarding object's namespace (``default`` for cluster-scoped objects).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        reporting_controller: str = "sluice",
        reporting_instance: str | None = None,
        settings: EventSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.controller = reporting_controller
        self.instance = reporting_instance or f"{reporting_controller}-{socket.gethostname()}"
        self.settings = settings or EventSettings()
        self.clock: Clock = clock or SystemClock()
        s = self.settings
        self._overall = TokenBucket(s.qps, s.burst, clock=self.clock)
        self._per_object: OrderedDict[tuple[str, str, str, str], TokenBucket] = OrderedDict()
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._ready: deque[_Key] = deque()
        self._queued: set[_Key] = set()
        self._later: list[tuple[float, _Key]] = []  # heap of (due, key) series updates
        self._later_keys: set[_Key] = set()
        self._wake: anyio.Event | None = None
        self._last_name_ns = 0
        self.recorded = 0
        """Events given to :meth:`record` (repeats included)."""
        self.aggregated = 0
        """Repeats folded into an existing series."""
        self.dropped = 0
        """New events dropped by the rate limits or a full queue."""
        self.written = 0
        """Successful writes (creates and series updates)."""
        self.failed = 0
        """Writes that failed."""

    # ----------------------------------------------------------------- recording

    def record(self, event: Event) -> None:
        """Queue ``event`` for writing. Never blocks and never raises."""
        try:
            self._record(event)
        except Exception:  # best effort: an event must never break scheduling
            self.dropped += 1
            log.exception("event dropped", dropped=repr(event)[:200])

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
        if not self._admit(event) or len(self._ready) >= self.settings.max_pending:
            self.dropped += 1
            return
        namespace = event.regarding.namespace or "default"
        self._series[key] = _Series(event, namespace, self._name(event), wall, wall, now)
        self._series.move_to_end(key)
        self._forget_old()
        self._enqueue(key)

    def _admit(self, event: Event) -> bool:
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
        return bucket.try_acquire() and self._overall.try_acquire()

    def _name(self, event: Event) -> str:
        stamp = max(time.time_ns(), self._last_name_ns + 1)
        self._last_name_ns = stamp
        return f"{event.regarding.name}.{stamp:x}"

    def _forget_old(self) -> None:
        while len(self._series) > self.settings.max_tracked:
            old_key, _ = next(iter(self._series.items()))
            if old_key in self._queued or old_key in self._later_keys:
                break  # still to be written: keep it (and the others) for now
            self._series.popitem(last=False)

    def _enqueue(self, key: _Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            if self._wake is not None:
                self._wake.set()

    def _schedule_update(self, key: _Key, series: _Series) -> None:
        if key in self._queued or key in self._later_keys:
            return
        if series.next_patch <= self.clock.now():
            self._enqueue(key)
        else:
            self._later_keys.add(key)
            heapq.heappush(self._later, (series.next_patch, key))
            if self._wake is not None:
                self._wake.set()

    @property
    def pending(self) -> int:
        """Writes not done yet (new events and series updates, due or later)."""
        return len(self._ready) + len(self._later)

    # ----------------------------------------------------------------- writing

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write queued events until cancelled. Start it once, in the owner's task group."""
        task_status.started()
        while True:
            self._promote_due()
            if not self._ready:
                self._wake = anyio.Event()
                delay = self._later[0][0] - self.clock.now() if self._later else math.inf
                with anyio.move_on_after(max(0.0, delay)):
                    await self._wake.wait()
                self._wake = None
                continue
            key = self._ready.popleft()
            self._queued.discard(key)
            series = self._series.get(key)
            if series is None:
                continue
            if series.written and series.next_patch > self.clock.now():
                self._schedule_update(key, series)  # queued during the previous write
                continue
            await self._write(key, series)

    def _promote_due(self) -> None:
        now = self.clock.now()
        while self._later and self._later[0][0] <= now:
            _, key = heapq.heappop(self._later)
            self._later_keys.discard(key)
            self._enqueue(key)

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
            # the Event expired (the API server keeps them about an hour): start again
            series.written = 0
            series.name = self._name(series.event)
            self._enqueue(key)
            return
        except ApiError as exc:
            self.failed += 1
            log.warning(
                "event write failed",
                reason=series.event.reason,
                regarding=series.event.regarding.key,
                error=str(exc),
            )
            if not series.written:
                self._series.pop(key, None)  # a later repeat starts a new Event
            return
        self.written += 1
        series.written = count
        # a lone Event's first repeat goes out at once; later repeats wait their turn
        series.next_patch = self.clock.now() + (
            0.0 if count == 1 else self.settings.series_interval
        )
        if series.count > series.written:
            self._schedule_update(key, series)

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

    async def _create(self, series: _Series, count: int) -> None:
        try:
            await self.client.request(
                "POST",
                EVENTS.path(series.namespace),
                body=self._body(series, count),
                timeout=self.settings.timeout,
                kind="Event",
                name=series.name,
            )
        except AlreadyExistsError:
            series.name = self._name(series.event)  # a clash of names: one more try
            await self.client.request(
                "POST",
                EVENTS.path(series.namespace),
                body=self._body(series, count),
                timeout=self.settings.timeout,
                kind="Event",
                name=series.name,
            )

    async def _patch(self, series: _Series, count: int) -> None:
        patch = {
            "series": {"count": count, "lastObservedTime": format_micro_time(series.last_wall)}
        }
        await self.client.request(
            "PATCH",
            EVENTS.path(series.namespace, series.name),
            body=patch,
            content_type=MERGE_PATCH,
            timeout=self.settings.timeout,
            kind="Event",
            name=series.name,
        )
