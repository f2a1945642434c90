"""Informers: the cluster's state streamed into the scheduler cache (layer 4, kube).

Job: one :class:`Informer` per kind lists the kind, then watches it from the list's
resourceVersion, and feeds every change to a :class:`CacheSink` (the
:class:`~scheduler.cache.SchedulerCache`); :class:`InformerSet` runs them all and knows
when every kind has been listed once. Contracts:

* **Raw JSON**: lists and watch lines are decoded with ``json.loads`` and handed on as
  dicts (``kind`` and ``apiVersion`` filled in on list items, which the API server
  leaves out); the client's model objects are never built.
* **Order**: one task per kind calls the sink, so the events of a kind reach
  ``sink.handle`` in the order of the watch. Calls happen on the event loop's thread.
  Kinds are independent of each other, as in Kubernetes.
* **List then watch**: a list (paged by ``limit``/``continue``) replaces the kind's state
  in the sink (``sink.replace(kind, items)``: the first list and every relist); the watch
  asks for bookmarks (``allowWatchBookmarks=true``) and a server-side
  ``timeoutSeconds`` (randomised between one and two times the setting, as client-go
  does, so that watches do not all end together). Every event and bookmark moves the
  kept resourceVersion; when the server ends a watch, the next one resumes from it.
* **Failures**: a ``410 Gone`` (as an HTTP reply or a watch ``ERROR`` event with code
  410) relists after a backoff; any other error (connection refused or cut, timeout,
  5xx, another ``ERROR``) reconnects the watch from the kept resourceVersion after a
  backoff (or retries the list, if the list failed). The backoff is exponential,
  capped and jittered, and starts again after a success. A watch whose stream breaks
  after it was answered is not a failure if it delivered something or lasted a second
  (:data:`SHORT_WATCH`): it resumes at once, as client-go's reflector does. Every
  request has a timeout.
* **Readiness**: :attr:`Informer.synced` / :attr:`InformerSet.ready` are set once the
  first full list of each kind has reached the sink, and stay set afterwards.
* **Assigned pods first** (``split_assigned``, the pods' informer of
  :class:`InformerSet`): the first list of pods is two, the pods bound to a node
  (``spec.nodeName!=``) and then the others (``spec.nodeName=``), and the watch resumes
  from the first one's resourceVersion (what changed while the second was read is
  replayed, in order). :attr:`Informer.schedulable` is set once every bound pod is
  known and the first page of the others has reached the sink: a first cycle may start
  then, and never places a pod on a node whose pods are not all known yet. Pending pods
  still being read are news for later cycles, as new pods are.

Exceptions raised by the sink are bugs: they end the informer and its set.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiohttp
import anyio
from anyio.abc import TaskStatus

from scheduler.api.errors import ApiError, GoneError, ServerError
from scheduler.kube.api_errors import error_from_status
from scheduler.kube.client import KubeClient
from scheduler.kube.decode import decode_event, decode_list, list_continue
from scheduler.kube.informer_backoff import Backoff
from scheduler.kube.resource_paths import (
    CSI_DRIVERS,
    CSI_NODES,
    CSI_STORAGE_CAPACITIES,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICES,
    STATEFUL_SETS,
    STORAGE_CLASSES,
    TOPOLOGIES,
    Resource,
)
from scheduler.logging import get_logger
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock

#: A watch that ends sooner than this (seconds) having delivered nothing is a failure to
#: back off from (client-go's reflector: a "very short watch", under a second).
SHORT_WATCH: Final = 1.0

__all__ = [
    "SCHEDULER_RESOURCES",
    "Backoff",
    "CacheSink",
    "Informer",
    "InformerSet",
    "InformerSettings",
    "InformerStats",
]

log = get_logger("sluice.kube.informers")

#: The kinds the scheduler watches (DESIGN section 1).
SCHEDULER_RESOURCES: Final[tuple[Resource, ...]] = (
    PODS,
    NODES,
    POD_GROUPS,
    QUEUES,
    TOPOLOGIES,
    PRIORITY_CLASSES,
    POD_DISRUPTION_BUDGETS,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    CSI_NODES,
    CSI_DRIVERS,
    CSI_STORAGE_CAPACITIES,
    NAMESPACES,
    SERVICES,
    REPLICATION_CONTROLLERS,
    REPLICA_SETS,
    STATEFUL_SETS,
)

_WATCH_EVENTS: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})


class CacheSink(Protocol):
    """Where informers deliver state; :class:`~scheduler.cache.SchedulerCache` is one.

    Both methods are synchronous, called on the event loop's thread, one task per kind.
    """

    def handle(self, kind: str, event: str, obj: Mapping[str, Any], /) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of ``kind``."""
        ...

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]], /) -> None:
        """Make the state of ``kind`` exactly ``objects`` (after a list)."""
        ...


@dataclass(frozen=True, slots=True)
class InformerSettings:
    """How informers talk to the API server. Times are in seconds."""

    page_size: int = 500
    """Objects per list page (``limit``); 0 lists in one request."""
    list_timeout: float = 60.0
    """``_request_timeout`` of each list page."""
    watch_timeout: float = 300.0
    """Base of a watch's server-side ``timeoutSeconds`` (randomised up to twice this)."""
    watch_slack: float = 30.0
    """How long after ``timeoutSeconds`` the client gives up on a watch the server left
    open (a half-open connection)."""
    connect_timeout: float = 10.0
    """Connection timeout of a watch request."""
    backoff_initial: float = 0.8
    """First delay after a failure (client-go's reflector: 800 ms)."""
    backoff_max: float = 30.0
    """Cap of the delay."""
    backoff_reset: float = 120.0
    """A failure this long after the previous one starts from the first delay again."""
    jitter: float = 0.5
    """Fraction of a delay that is random: a delay ``d`` becomes ``d * (1 - jitter * r)``."""

    def __post_init__(self) -> None:
        if self.page_size < 0 or self.watch_timeout < 1 or self.list_timeout <= 0:
            raise ValueError("page_size >= 0, watch_timeout >= 1 and list_timeout > 0")
        if not 0 <= self.jitter <= 1 or self.backoff_initial <= 0:
            raise ValueError("jitter must be in [0, 1] and backoff_initial positive")


@dataclass(slots=True)
class InformerStats:
    """Counters of one informer, for tests, logs and metrics."""

    lists: int = 0
    """Completed lists (the first one and every relist)."""
    relists: int = 0
    """Lists after the first one (after a 410, or a list that failed)."""
    watches: int = 0
    """Watch requests that were answered with 200."""
    events: int = 0
    bookmarks: int = 0
    gone: int = 0
    """410 Gone seen (reply or ERROR event)."""
    errors: int = 0
    """Other failures (connection, timeout, 5xx, ERROR events)."""
    cuts: int = 0
    """Healthy watches whose stream broke (resumed at once, without a backoff)."""
    last_error: str = ""


class Informer:
    """List+watch of one kind into a sink. Run :meth:`run` in a task; it never returns.

    ``resource_version`` is the last resourceVersion seen (list, event or bookmark).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        sink: CacheSink,
        *,
        settings: InformerSettings | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        field_selector: str = "",
        label_selector: str = "",
        split_assigned: bool = False,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.field_selector = field_selector
        """Lists and watches only the objects it selects (``metadata.name=x``)."""
        self.split_assigned = split_assigned
        """Pods only: the first list reads the pods bound to a node first (see the
        module's docstring)."""
        self.label_selector = label_selector
        """Lists and watches only the objects whose labels it selects (``pool=a``)."""
        self._touched = False
        """Objects of this informer reached the sink (a list after that replaces)."""
        self.settings = settings or InformerSettings()
        self.clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        s = self.settings
        self._backoff = Backoff(
            s.backoff_initial,
            s.backoff_max,
            jitter=s.jitter,
            reset_after=s.backoff_reset,
            clock=self.clock,
            rng=self._rng,
        )
        self.resource_version = ""
        self.synced = anyio.Event()
        self.schedulable = anyio.Event()
        """Set once a first cycle may use this kind: when it is synced, or, with
        ``split_assigned``, once the bound pods are and a first page of the others."""
        self.stats = InformerStats()

    @property
    def kind(self) -> str:
        """The kind key the sink gets its objects under (``PodGroup.scheduling.volcano.sh``)."""
        return self.resource.key

    @property
    def has_synced(self) -> bool:
        return self.synced.is_set()

    async def run(self) -> None:
        """List, then watch, forever; relist on 410 and reconnect on errors (with backoff)."""
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                if not await self._watch():
                    await self.clock.sleep(self._backoff.next())
            except GoneError as exc:
                must_list = True
                self.stats.gone += 1
                self.stats.last_error = str(exc)
                delay = self._backoff.next()
                log.info(
                    "watch expired, relisting",
                    kind=self.kind,
                    resource_version=self.resource_version,
                    delay=round(delay, 3),
                )
                await self.clock.sleep(delay)
            except ApiError as exc:
                self.stats.errors += 1
                self.stats.last_error = str(exc)
                delay = self._backoff.next()
                log.warning(
                    "list or watch failed, retrying",
                    kind=self.kind,
                    listing=must_list,
                    error=str(exc),
                    delay=round(delay, 3),
                )
                await self.clock.sleep(delay)

    async def _list(self) -> None:
        """One full (paged) list; its objects reach the sink and the resourceVersion is
        set. The first list of a ``split_assigned`` informer is two
        (:meth:`_list_split`)."""
        if self.split_assigned and not self._touched:
            await self._list_split()
            return
        await self._list_whole()

    async def _list_split(self) -> None:
        """The first list of pods as two lists: the pods bound to a node, then the others,
        each handed on page by page (the sink holds no pod yet). The watch resumes from
        the first list's resourceVersion, so that what changed while the second was read
        is replayed, in order, after it. :attr:`schedulable` is set after the first page
        of the second list; :attr:`synced` at its end."""
        res = self.resource
        assigned, version, _ = await self._pages("spec.nodeName!=", incremental=True)
        log.info("bound pods listed", kind=res.key, objects=assigned)
        pending, _, _ = await self._pages(
            "spec.nodeName=", incremental=True, first_page=self.schedulable.set
        )
        self._synced(version, assigned + pending)

    async def _list_whole(self) -> None:
        """One list of every object of the kind (see :meth:`_pages`); a list of one page,
        and every relist, replaces the kind's state in the sink."""
        incremental = not self._touched
        count, version, items = await self._pages("", incremental=incremental)
        if items is not None:
            self.sink.replace(self.resource.key, items)
        self._synced(version, count)

    def _synced(self, version: str, count: int) -> None:
        self._touched = True
        self.resource_version = version
        if self.stats.lists:
            self.stats.relists += 1
        self.stats.lists += 1
        self._backoff.reset()
        if not self.synced.is_set():
            log.info("informer synced", kind=self.resource.key, objects=count)
            self.synced.set()
        self.schedulable.set()

    async def _pages(
        self,
        selector: str,
        *,
        incremental: bool,
        first_page: Callable[[], None] | None = None,
    ) -> tuple[int, str, list[dict[str, Any]] | None]:
        """Read one paged list (of the objects ``selector`` also selects): the number of
        objects, the list's resourceVersion, and its items when they are to replace the
        kind's state (None when they were handed on as ``ADDED`` events).

        Pages are asked for one after the other (``limit``/``continue``), the next one
        before this one is decoded (:func:`~scheduler.kube.decode.decode_list`), so the
        server makes it meanwhile. A list of one page replaces the kind's state in the
        sink (``sink.replace``: what is gone is deleted), and so does every relist. But the
        first list of a kind, when it has several pages (a large kind: pods, nodes), hands
        each page on as it comes (``handle(kind, "ADDED", obj)``), so that its objects are
        converted while the server makes the next page; the sink holds nothing of the
        kind yet. A first list that fails midway is followed by a replacing one.
        ``first_page()`` is called once the first page reached the sink."""
        res = self.resource
        items: list[dict[str, Any]] = []
        version = ""
        count = 0
        failed: ApiError | None = None
        async with anyio.create_task_group() as tg:  # the page asked for ahead runs here
            first = _PageFetch(self, "", selector)
            tg.start_soon(first.run)
            fetch: _PageFetch | None = first
            try:
                while fetch is not None:
                    data = await fetch.result()
                    token = list_continue(data)
                    fetch = None
                    if token:
                        fetch = _PageFetch(self, token, selector)
                        tg.start_soon(fetch.run)
                        await anyio.sleep(0)  # let it send its request before decoding this
                    page, meta = decode_list(data, res.kind)
                    if token is None and meta.get("continue"):
                        fetch = _PageFetch(self, str(meta["continue"]), selector)
                        tg.start_soon(fetch.run)
                    version = version or str(meta.get("resourceVersion") or "")
                    count += len(page)
                    for item in page:
                        item.setdefault("apiVersion", res.api_version)
                        item.setdefault("kind", res.kind)
                    if incremental and (fetch is not None or self._touched or selector):
                        self._touched = True  # a first list of several pages: page by page
                        for item in page:
                            self.sink.handle(res.key, "ADDED", item)
                    else:
                        items.extend(page)
                        incremental = False
                    if first_page is not None:
                        first_page()
                        first_page = None
            except ApiError as exc:  # raised out of the task group, not in a group of one
                failed = exc
                tg.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return count, version, (None if incremental else items)

    async def _fetch_page(self, token: str, selector: str = "") -> bytes:
        """The bytes of one list page (``token``: its ``continue``; "" for the first) of the
        objects that ``selector`` selects too."""
        res = self.resource
        query: list[tuple[str, str]] = []
        if self.settings.page_size:
            query.append(("limit", str(self.settings.page_size)))
        if token:
            query.append(("continue", token))
        fields = ",".join(f for f in (self.field_selector, selector) if f)
        if fields:
            query.append(("fieldSelector", fields))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        return await self.client.request_bytes(
            "GET", res.path(), query=query, timeout=self.settings.list_timeout, kind=res.kind
        )

    async def _watch(self) -> bool:
        """One watch from :attr:`resource_version` until the server ends it, or its
        stream breaks.

        Returns whether the watch was healthy: it delivered something or lasted at
        least :data:`SHORT_WATCH` seconds. A healthy watch resets the backoff, so the
        next one starts at once; a silent watch that ends at once is retried after a
        backoff rather than in a tight loop. A stream that breaks once the watch was
        answered (the connection cut mid-stream, as a proxy, a load balancer or an API
        server restart does) ends the watch as the server's end would: client-go's
        reflector treats it so, and backing off after every cut would leave the cache
        stale for up to ``backoff_max`` under a flaky network. Raises GoneError to
        relist, and any error of opening the watch (or of a short one) to back off.
        """
        res = self.resource
        s = self.settings
        seconds = int(s.watch_timeout * (1.0 + self._rng.random()))
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", str(seconds)),
        ]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        timeout = aiohttp.ClientTimeout(
            total=seconds + s.watch_slack, sock_connect=s.connect_timeout
        )
        received = False
        broken: ApiError | None = None
        async with self.client.stream(
            res.path(), query=query, timeout=timeout, kind=res.kind, decode=self._decode_event
        ) as reader:
            opened_at = self.clock.now()
            self.stats.watches += 1
            while True:
                try:
                    line = await reader.read()
                except ApiError as exc:  # the stream broke (ERROR events come as lines)
                    broken = exc
                    break
                if line is None:
                    break
                if not received:
                    received = True
                    self._backoff.reset()
                self._apply(line)
        healthy = received or self.clock.now() - opened_at >= SHORT_WATCH
        if broken is not None:
            if not healthy:
                raise broken
            self.stats.cuts += 1
            log.info(
                "watch stream broken, resuming",
                kind=res.kind,
                resource_version=self.resource_version,
                error=str(broken),
            )
        if healthy:
            self._backoff.reset()
        return healthy

    def _decode_event(self, line: bytes) -> dict[str, Any]:
        return decode_event(line, self.resource.kind)

    def _apply(self, line: Mapping[str, Any]) -> None:
        res = self.resource
        event = line.get("type")
        obj = line.get("object")
        if not isinstance(obj, dict) or not isinstance(event, str):
            raise ServerError(f"malformed watch event {str(line)[:200]}", kind=res.kind)
        if event == "ERROR":
            code = obj.get("code")
            raise error_from_status(int(code) if isinstance(code, int) else 500, obj, kind=res.kind)
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if event == "BOOKMARK":
            self.stats.bookmarks += 1
            if version:
                self.resource_version = version
            return
        if event not in _WATCH_EVENTS:
            log.warning("unknown watch event type ignored", kind=res.kind, type=event)
            return
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        self.stats.events += 1
        self.sink.handle(res.key, event, obj)
        if version:
            self.resource_version = version


class _PageFetch:
    """One list page asked for in the background (:meth:`Informer._pages`): its bytes,
    or the error of asking."""

    def __init__(self, informer: Informer, token: str, selector: str = "") -> None:
        self._informer = informer
        self._token = token
        self._selector = selector
        self._done = anyio.Event()
        self._data = b""
        self._error: BaseException | None = None

    async def run(self) -> None:
        try:
            self._data = await self._informer._fetch_page(self._token, self._selector)
        except ApiError as exc:
            self._error = exc
        finally:
            self._done.set()

    async def result(self) -> bytes:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._data


@dataclass
class InformerSet:
    """One informer per resource, all feeding ``sink``; run them with :meth:`run`.

    ``ready`` is set (and ``synced()`` is true) once every kind has been listed once.
    """

    client: KubeClient
    sink: CacheSink
    resources: Sequence[Resource] = SCHEDULER_RESOURCES
    settings: InformerSettings = field(default_factory=InformerSettings)
    clock: Clock | None = None
    label_selectors: Mapping[str, str] = field(default_factory=dict)
    """A label selector per kind key (a shard's nodes: ``pool=a``); the others: all."""
    informers: dict[str, Informer] = field(init=False)
    ready: anyio.Event = field(init=False, default_factory=anyio.Event)
    schedulable: anyio.Event = field(init=False, default_factory=anyio.Event)
    """Set once every kind is :attr:`Informer.schedulable`: every kind listed but the
    pending pods, of which a first page is in (a first cycle may start)."""

    def __post_init__(self) -> None:
        kinds = [r.key for r in self.resources]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"one informer per kind: {kinds}")
        self.informers = {
            r.key: Informer(
                self.client,
                r,
                self.sink,
                settings=self.settings,
                clock=self.clock,
                label_selector=self.label_selectors.get(r.key, ""),
                split_assigned=r is PODS,
            )
            for r in self.resources
        }

    def synced(self) -> bool:
        """True once the first full list of every kind has reached the sink."""
        return all(i.has_synced for i in self.informers.values())

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every informer until cancelled, in one task group.

        ``task_status.started()`` is called (and :attr:`ready` set) once all kinds are
        synced, so ``await tg.start(informers.run)`` is kube-scheduler's
        ``WaitForCacheSync``; :attr:`schedulable` is set before, once a first cycle may
        start (the pending pods still being read). It waits as long as a kind cannot be
        listed (a missing CRD, no permission): use ``start_soon`` and :attr:`ready` to
        watch that from outside.
        """
        async with anyio.create_task_group() as tg:
            for kind, informer in self.informers.items():
                tg.start_soon(informer.run, name=f"informer:{kind}")
            for informer in self.informers.values():
                await informer.schedulable.wait()
            self.schedulable.set()
            for informer in self.informers.values():
                await informer.synced.wait()
            self.ready.set()
            task_status.started()
