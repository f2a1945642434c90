"""scheduler.kube.informers against the API emulator, feeding a real SchedulerCache."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from kube_support import Cluster, FakeClock, node, pod, running_cluster, wait_until

from scheduler.api.errors import AmbiguousError, GoneError, ServerError
from scheduler.api.task import TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.kube import Backoff, Informer, InformerSet, InformerSettings
from scheduler.kube.resource_paths import NODES, PODS, Resource

pytestmark = pytest.mark.anyio

FAST = InformerSettings(
    page_size=2,  # several pages even for small lists
    watch_timeout=5,
    backoff_initial=0.05,
    backoff_max=0.2,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recorder:
    """A sink that remembers every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.replaced: list[tuple[str, list[str]]] = []

    def handle(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        self.calls.append((kind, event, obj["metadata"]["name"]))

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        self.replaced.append((kind, sorted(o["metadata"]["name"] for o in objects)))


def pod_names(cache: SchedulerCache) -> set[str]:
    return {t.name for t in cache.tasks.values()}


def store_pod_names(cluster: Cluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.store.list("Pod")[0]}


# --------------------------------------------------------------------------- list + watch


async def test_list_then_watch_reaches_the_cache(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        store = cluster.store
        store.create(node("n1"))
        for name in ("a", "b", "c"):
            store.create(pod(name))
        cache = SchedulerCache()
        informers = InformerSet(cluster.client, cache, settings=FAST)
        await tg.start(informers.run)  # returns once every kind is listed
        assert informers.synced() and informers.ready.is_set()
        assert pod_names(cache) == {"a", "b", "c"} and set(cache.nodes) == {"n1"}
        assert informers.informers["Pod"].stats.lists == 1

        created = store.create(pod("d"))
        await wait_until(lambda: "d" in pod_names(cache), what="ADDED")
        store.bind("default", "d", "n1")
        uid = created["metadata"]["uid"]
        await wait_until(lambda: cache.tasks[uid].node_name == "n1", what="MODIFIED")
        assert cache.tasks[uid].status is not TaskStatus.PENDING
        store.delete("Pod", "default", "a", grace_period_seconds=0)
        await wait_until(lambda: "a" not in pod_names(cache), what="DELETED")
        assert informers.informers["Pod"].stats.relists == 0
        tg.cancel_scope.cancel()


async def test_a_first_list_of_several_pages_is_handed_on_page_by_page(tmp_path: Path) -> None:
    """The first list of a kind with several pages reaches the sink as ADDED events, page
    by page (each next page asked for before this one is decoded); a relist replaces the
    kind's state; a list of one page replaces it too."""
    async with running_cluster(tmp_path) as cluster:
        store = cluster.store
        for name in ("a", "b", "c", "d", "e"):
            store.create(pod(name))
        sink = Recorder()
        informer = Informer(cluster.client, PODS, sink, settings=FAST)
        await informer._list()
        assert sink.calls == [("Pod", "ADDED", n) for n in ("a", "b", "c", "d", "e")]
        assert sink.replaced == []
        store.delete("Pod", "default", "c", grace_period_seconds=0)
        await informer._list()
        assert sink.replaced == [("Pod", ["a", "b", "d", "e"])]
        one_page = Recorder()
        await Informer(cluster.client, NODES, one_page, settings=FAST)._list()
        assert one_page.replaced == [("Node", [])] and not one_page.calls


class PausingSink(Recorder):
    """A Recorder that, at its ``at``-th call, runs ``then()`` (a change in the store
    while the list is still being read)."""

    def __init__(self, at: int, then: Any) -> None:
        super().__init__()
        self.at, self.then = at, then
        self.schedulable_at: int | None = None

    def handle(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        super().handle(kind, event, obj)
        if len(self.calls) == self.at:
            self.then()


async def test_the_first_list_of_pods_reads_the_bound_ones_first(tmp_path: Path) -> None:
    """Bound pods reach the sink before pending ones (whatever their names); the informer
    is schedulable after the first page of pending pods, synced after the last; the watch
    resumes from the first list, so a bound pod deleted and a pending one bound after it
    reach the sink, in order, though the second list no longer shows either change."""
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        store = cluster.store
        for name in ("a", "c", "e", "g", "i"):
            store.create(pod(name))  # pending
        for name in ("b", "d", "f"):
            store.create(pod(name, node="n1"))

        def meanwhile() -> None:  # after the bound pods' list, before the pending pods
            store.delete("Pod", "default", "b", grace_period_seconds=0)
            store.bind("default", "g", "n2")

        informer: Informer | None = None
        sink = PausingSink(3, meanwhile)
        original = sink.handle

        def handle(kind: str, event: str, obj: Mapping[str, Any]) -> None:
            original(kind, event, obj)
            if informer is not None and informer.schedulable.is_set() and not sink.schedulable_at:
                sink.schedulable_at = len(sink.calls)

        sink.handle = handle  # type: ignore[method-assign]
        informer = Informer(cluster.client, PODS, sink, settings=FAST, split_assigned=True)
        tg.start_soon(informer.run)
        await informer.synced.wait()
        listed = len(sink.calls)
        names = [n for _, _, n in sink.calls]
        assert names[:listed] == ["b", "d", "f", "a", "c", "e", "i"]  # g: bound before
        assert all(event == "ADDED" for _, event, _ in sink.calls[:listed])
        assert sink.schedulable_at == 6  # set after the first page of two pending pods
        assert sink.replaced == []
        await wait_until(lambda: ("Pod", "DELETED", "b") in sink.calls, what="b's deletion")
        await wait_until(lambda: ("Pod", "MODIFIED", "g") in sink.calls, what="g bound")
        replayed = sink.calls[listed:]
        assert replayed.index(("Pod", "DELETED", "b")) < replayed.index(("Pod", "MODIFIED", "g"))
        assert informer.stats.lists == 1 and informer.stats.relists == 0
        tg.cancel_scope.cancel()


async def test_a_set_is_schedulable_before_the_pending_pods_are_all_read(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        for i in range(6):
            cluster.store.create(pod(f"p{i}"))
        cluster.store.create(node("n1"))
        seen: list[bool] = []
        informers: InformerSet | None = None

        class Sink(Recorder):
            def handle(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
                super().handle(kind, event, obj)
                if informers is not None and kind == "Pod":
                    seen.append(informers.schedulable.is_set())

        informers = InformerSet(cluster.client, Sink(), resources=(PODS, NODES), settings=FAST)
        tg.start_soon(informers.run)
        await informers.ready.wait()
        assert informers.schedulable.is_set()
        assert seen[:2] == [False, False] and seen[-1] is True  # pods came after it was set
        tg.cancel_scope.cancel()


async def test_events_of_a_kind_arrive_in_order(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        store = cluster.store
        store.create(node("n1"))  # an empty store lists at resourceVersion "0" ("any")
        sink = Recorder()
        informer = Informer(cluster.client, PODS, sink, settings=FAST)
        tg.start_soon(informer.run)
        await informer.synced.wait()
        store.create(pod("x"))
        store.patch("Pod", "default", "x", {"metadata": {"labels": {"k": "v"}}})
        store.create(pod("y"))
        store.delete("Pod", "default", "x", grace_period_seconds=0)
        await wait_until(lambda: len(sink.calls) == 4, what="four events")
        assert sink.calls == [
            ("Pod", "ADDED", "x"),
            ("Pod", "MODIFIED", "x"),
            ("Pod", "ADDED", "y"),
            ("Pod", "DELETED", "x"),
        ]
        assert sink.replaced == [("Pod", [])]
        assert informer.resource_version == str(store.resource_version)
        tg.cancel_scope.cancel()


async def test_custom_resources_are_listed_and_watched(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        cluster.store.create(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": "team-a"},
                "spec": {"weight": 2},
            }
        )
        cache = SchedulerCache()
        await tg.start(InformerSet(cluster.client, cache, settings=FAST).run)
        assert "team-a" in cache.queues
        cluster.store.create(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"minMember": 2, "queue": "team-a"},
            }
        )
        await wait_until(lambda: any("g" in key for key in cache.pod_groups), what="PodGroup")
        tg.cancel_scope.cancel()


async def test_bookmarks_move_the_resource_version(tmp_path: Path) -> None:
    async with (
        running_cluster(tmp_path, bookmark_interval=0.1) as cluster,
        anyio.create_task_group() as tg,
    ):
        cluster.store.create(node("first"))
        sink = Recorder()
        informer = Informer(cluster.client, PODS, sink, settings=FAST)
        tg.start_soon(informer.run)
        await informer.synced.wait()
        listed = int(informer.resource_version)
        for i in range(3):  # writes of another kind: no Pod event, only bookmarks
            cluster.store.create(node(f"n{i}"))
        target = cluster.store.resource_version
        await wait_until(lambda: int(informer.resource_version) >= target, what="a bookmark")
        assert int(informer.resource_version) > listed
        assert informer.stats.bookmarks >= 1 and sink.calls == []
        tg.cancel_scope.cancel()


# --------------------------------------------------------------------------- failures


async def test_a_cut_watch_resumes_from_the_kept_resource_version(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        cluster.store.create(node("n0"))
        cache = SchedulerCache()
        informer = Informer(cluster.client, PODS, cache, settings=FAST)
        tg.start_soon(informer.run)
        await informer.synced.wait()
        cluster.store.create(pod("before"))
        await wait_until(lambda: "before" in pod_names(cache))
        await cluster.cut()
        cluster.store.create(pod("during"))
        cluster.store.delete("Pod", "default", "before", grace_period_seconds=0)
        await wait_until(lambda: informer.stats.errors >= 1, what="a failed reconnect")
        await cluster.resume()
        await wait_until(lambda: pod_names(cache) == {"during"}, what="convergence")
        assert informer.stats.relists == 0 and informer.stats.gone == 0  # no relist needed
        tg.cancel_scope.cancel()


async def test_a_410_relists_and_the_cache_converges(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, history=5) as cluster, anyio.create_task_group() as tg:
        store = cluster.store
        for name in ("keep", "drop"):
            store.create(pod(name))
        cache = SchedulerCache()
        informer = Informer(cluster.client, PODS, cache, settings=FAST)
        tg.start_soon(informer.run)
        await informer.synced.wait()
        assert pod_names(cache) == {"keep", "drop"}
        await cluster.cut()
        # more writes than the history holds: the kept resourceVersion expires
        store.delete("Pod", "default", "drop", grace_period_seconds=0)
        for i in range(8):
            store.create(pod(f"new-{i}"))
        store.patch("Pod", "default", "keep", {"metadata": {"labels": {"seen": "yes"}}})
        await cluster.resume()
        await wait_until(lambda: informer.stats.gone >= 1, what="a 410")
        await wait_until(lambda: pod_names(cache) == store_pod_names(cluster), what="relist")
        assert informer.stats.relists >= 1 and informer.stats.lists >= 2
        keep = next(t for t in cache.tasks.values() if t.name == "keep")
        assert keep.uid == store.get("Pod", "default", "keep")["metadata"]["uid"]
        # and it watches again from the relist
        store.create(pod("after"))
        await wait_until(lambda: "after" in pod_names(cache), what="the watch after a relist")
        tg.cancel_scope.cancel()


class CuttingClient:
    """A client whose list is empty and whose every watch delivers ``events`` pods over
    ``lasts`` seconds of ``clock``, then breaks (the connection lost mid-stream)."""

    def __init__(self, clock: FakeClock, *, events: int, lasts: float) -> None:
        self.clock = clock
        self.events = events
        self.lasts = lasts
        self.watches = 0
        self.version = 1

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": str(self.version)}, "items": []}

    async def request_bytes(self, method: str, path: str, **_: Any) -> bytes:
        return json.dumps(await self.request(method, path)).encode()

    @contextlib.asynccontextmanager
    async def stream(self, path: str, **_: Any) -> AsyncIterator[Any]:
        self.watches += 1
        yield self._Reader(self)

    class _Reader:
        def __init__(self, client: CuttingClient) -> None:
            self.client = client
            self.left = client.events

        async def read(self) -> dict[str, Any] | None:
            await anyio.lowlevel.checkpoint()
            c = self.client
            c.clock.advance(c.lasts / (c.events + 1))
            if self.left == 0:
                raise AmbiguousError("the connection was lost before the reply", kind="Pod")
            self.left -= 1
            c.version += 1
            obj = pod(f"p{c.version}")
            obj["metadata"]["resourceVersion"] = str(c.version)
            return {"type": "ADDED", "object": obj}


@pytest.mark.parametrize(
    ("events", "lasts", "backs_off"),
    [
        pytest.param(1, 0.1, False, id="delivered-then-cut"),
        pytest.param(0, 5.0, False, id="quiet-for-5s-then-cut"),
        pytest.param(0, 0.1, True, id="cut-at-once"),
    ],
)
async def test_a_broken_stream_ends_a_healthy_watch_without_backoff(
    events: int, lasts: float, backs_off: bool
) -> None:
    """A watch that delivered something, or lasted a second, then broke, resumes at once
    from the kept resourceVersion (client-go's reflector does the same); a watch that
    breaks at once is a failure, and the delays before the next ones grow."""
    clock = FakeClock()
    client = CuttingClient(clock, events=events, lasts=lasts)
    informer = Informer(client, PODS, Recorder(), settings=FAST, clock=clock)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(informer.run)
        await wait_until(lambda: client.watches >= 6, what="six watches")
        tg.cancel_scope.cancel()
    if backs_off:
        assert informer.stats.errors >= 5 and informer.stats.cuts == 0
        assert len(clock.slept) >= 5 and clock.slept[4] > FAST.backoff_initial
    else:
        assert informer.stats.cuts >= 5 and informer.stats.errors == 0
        assert clock.slept == []
        assert informer.resource_version == str(client.version)


def test_an_error_event_with_410_raises_gone_and_others_raise_their_error() -> None:
    informer = Informer(None, PODS, Recorder())  # type: ignore[arg-type]
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    with pytest.raises(GoneError):
        informer._apply({"type": "ERROR", "object": gone})
    with pytest.raises(ServerError):
        informer._apply({"type": "ERROR", "object": {"code": 500, "message": "boom"}})
    with pytest.raises(ServerError, match="malformed"):
        informer._apply({"type": "ADDED"})


async def test_readiness_waits_for_every_kind(tmp_path: Path) -> None:
    missing = Resource("Widget", "example.com", "v1", "widgets", False)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        informers = InformerSet(
            cluster.client, Recorder(), resources=(PODS, NODES, missing), settings=FAST
        )
        tg.start_soon(informers.run)
        await informers.informers["Pod"].synced.wait()
        await informers.informers["Node"].synced.wait()
        await wait_until(lambda: informers.informers["Widget"].stats.errors >= 2)
        assert not informers.synced() and not informers.ready.is_set()
        tg.cancel_scope.cancel()


def test_one_informer_per_kind() -> None:
    with pytest.raises(ValueError, match="one informer per kind"):
        InformerSet(None, Recorder(), resources=(PODS, PODS))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- backoff


def test_backoff_grows_is_capped_and_jittered() -> None:
    clock = FakeClock()
    backoff = Backoff(0.8, 30.0, jitter=0.5, clock=clock, rng=random.Random(7))
    delays = [backoff.next() for _ in range(10)]
    bases = [min(30.0, 0.8 * 2**i) for i in range(10)]
    for delay, base in zip(delays, bases, strict=True):
        assert base * 0.5 <= delay <= base
    assert max(delays) <= 30.0
    backoff.reset()
    assert backoff.next() <= 0.8


def test_backoff_forgets_old_failures() -> None:
    clock = FakeClock()
    backoff = Backoff(1.0, 60.0, jitter=0.0, reset_after=120.0, clock=clock)
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    clock.advance(121.0)
    assert backoff.next() == 1.0


def test_informer_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        InformerSettings(jitter=2.0)
    with pytest.raises(ValueError):
        InformerSettings(watch_timeout=0)
