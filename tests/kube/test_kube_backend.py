"""scheduler.kube.backend: the ports against the API emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from kube_support import Cluster, FakeClock, condition, node, pdb, pod, running_cluster, wait_until

from scheduler.api.errors import ConflictError, NotFoundError, TooManyRequestsError
from scheduler.kube import EventSettings, KubeBackend, KubeEventRecorder
from scheduler.ports import Binder, Event, EventRecorder, Evictor, ObjectRef, StatusWriter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    meta = obj["metadata"]
    return ObjectRef(obj["kind"], meta.get("namespace", ""), meta["name"], meta["uid"])


def events_of(cluster: Cluster, namespace: str = "default") -> list[dict[str, Any]]:
    return cluster.store.list("Event", namespace)[0]


def test_the_backend_implements_the_ports(tmp_path: Path) -> None:
    backend = KubeBackend(None)  # type: ignore[arg-type]
    ports = backend.ports()
    assert isinstance(ports.binder, KubeBackend)
    checks: list[tuple[object, type[Any]]] = [
        (backend, Binder),
        (backend, Evictor),
        (backend, StatusWriter),
        (backend, EventRecorder),
    ]
    for obj, protocol in checks:  # structural: every method of the protocol exists
        for name in dir(protocol):
            if not name.startswith("_"):
                assert callable(getattr(obj, name))
    with pytest.raises(ValueError, match="eviction_mode"):
        KubeBackend(None, eviction_mode="drain")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Binder


async def test_bind_then_a_second_bind_conflicts(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        cluster.store.create(node("n1"))
        created = cluster.store.create(pod("a"))
        backend = KubeBackend(cluster.client)
        await backend.bind(ref_of(created), "n1", {})
        bound = cluster.store.get("Pod", "default", "a")
        assert bound["spec"]["nodeName"] == "n1"
        assert (condition(bound, "PodScheduled") or {}).get("status") == "True"
        with pytest.raises(ConflictError):
            await backend.bind(ref_of(created), "n1", {})


async def test_bind_writes_annotations_first(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        created = cluster.store.create(pod("a"))
        await KubeBackend(cluster.client).bind(ref_of(created), "n1", {"sluice/why": "gang g"})
        bound = cluster.store.get("Pod", "default", "a")
        assert bound["metadata"]["annotations"] == {"sluice/why": "gang g"}
        assert bound["spec"]["nodeName"] == "n1"


async def test_bind_of_a_missing_or_replaced_pod_fails(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        backend = KubeBackend(cluster.client)
        with pytest.raises(NotFoundError):
            await backend.bind(ObjectRef("Pod", "default", "ghost", "u1"), "n1", {})
        cluster.store.create(pod("a"))
        with pytest.raises(ConflictError):  # same name, another pod
            await backend.bind(ObjectRef("Pod", "default", "a", "not-its-uid"), "n1", {})
        assert "nodeName" not in cluster.store.get("Pod", "default", "a")["spec"]


# --------------------------------------------------------------------------- Evictor


async def test_evict_by_delete_is_guarded_by_uid(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        created = cluster.store.create(pod("a"))
        backend = KubeBackend(cluster.client)
        with pytest.raises(ConflictError):
            await backend.evict(ObjectRef("Pod", "default", "a", "not-its-uid"))
        await backend.evict(ref_of(created), grace_period_seconds=0)
        assert cluster.store.try_get("Pod", "default", "a") is None
        with pytest.raises(NotFoundError):
            await backend.evict(ref_of(created))


async def test_evict_through_the_eviction_api_honours_budgets(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        store = cluster.store
        store.create(pdb("keep-two", {"app": "db"}, 2))
        guarded = [
            store.create(pod(f"db-{i}", node="n1", labels={"app": "db"}, running=True))
            for i in range(2)
        ]
        free = store.create(pod("web", node="n1", labels={"app": "web"}, running=True))
        backend = KubeBackend(cluster.client, eviction_mode="evict")
        with pytest.raises(TooManyRequestsError):
            await backend.evict(ref_of(guarded[0]))
        assert store.get("Pod", "default", "db-0")["metadata"].get("deletionTimestamp") is None
        await backend.evict(ref_of(free))
        web = store.try_get("Pod", "default", "web")
        assert web is None or web["metadata"].get("deletionTimestamp")
        if web is not None:
            assert (condition(web, "DisruptionTarget") or {}).get("reason") == (
                "EvictionByEvictionAPI"
            )


# --------------------------------------------------------------------------- StatusWriter


async def test_pod_status_patch_keeps_the_other_conditions(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        created = cluster.store.create(
            pod(
                "a",
                conditions=[
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                    {"type": "Custom", "status": "True"},
                ],
            )
        )
        backend = KubeBackend(cluster.client)
        target = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
        }
        await backend.patch_pod_status(
            ref_of(created), {"conditions": [target], "nominatedNodeName": "n2"}
        )
        after = cluster.store.get("Pod", "default", "a")
        types = [c["type"] for c in after["status"]["conditions"]]
        assert sorted(types) == ["Custom", "DisruptionTarget", "PodScheduled"]
        assert after["status"]["nominatedNodeName"] == "n2"
        # a whole-object patch ({"status": ...}) is accepted too, and is idempotent
        await backend.patch_pod_status(ref_of(created), {"status": {"nominatedNodeName": "n3"}})
        await backend.patch_pod_status(ref_of(created), {"status": {"nominatedNodeName": "n3"}})
        again = cluster.store.get("Pod", "default", "a")
        assert again["status"]["nominatedNodeName"] == "n3"
        assert len(again["status"]["conditions"]) == 3


async def test_custom_status_is_merge_patched(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        store = cluster.store
        group = store.create(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"minMember": 2},
            }
        )
        backend = KubeBackend(cluster.client)
        await backend.patch_status(ref_of(group), {"phase": "Pending", "running": 0})
        await backend.patch_status(ref_of(group), {"phase": "Running", "running": 2})
        await backend.patch_status(ref_of(group), {"succeeded": 1})
        status = store.get("PodGroup", "default", "g")["status"]
        assert status == {"phase": "Running", "running": 2, "succeeded": 1}
        queue = store.create(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": "q"},
                "spec": {"weight": 1},
            }
        )
        await backend.patch_status(ref_of(queue), {"state": "Open"})
        assert store.get("Queue", "", "q")["status"]["state"] == "Open"
        with pytest.raises(NotFoundError):
            await backend.patch_status(ObjectRef("Queue", "", "absent"), {"state": "Open"})
        with pytest.raises(ValueError, match="kind"):
            await backend.patch_status(ObjectRef("Widget", "", "w"), {})


# --------------------------------------------------------------------------- events


def failed_scheduling(name: str, message: str = "0/3 nodes are available") -> Event:
    return Event(
        ObjectRef("Pod", "default", name, f"uid-{name}"), "Warning", "FailedScheduling", message
    )


async def test_the_same_event_twice_is_one_event_with_a_series(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        backend = KubeBackend(cluster.client)
        await tg.start(backend.run)
        backend.record(failed_scheduling("a"))
        await wait_until(lambda: len(events_of(cluster)) == 1, what="the first event")
        backend.record(failed_scheduling("a"))
        await wait_until(
            lambda: (events_of(cluster)[0].get("series") or {}).get("count") == 2,
            what="a series count of 2",
        )
        event = events_of(cluster)[0]
        assert event["apiVersion"] == "events.k8s.io/v1"
        assert event["regarding"] == {
            "kind": "Pod",
            "namespace": "default",
            "name": "a",
            "uid": "uid-a",
        }
        assert event["reason"] == "FailedScheduling" and event["type"] == "Warning"
        assert event["note"] == "0/3 nodes are available"
        assert event["reportingController"] == "sluice" and event["reportingInstance"]
        assert event["eventTime"].endswith("Z") and len(event["eventTime"].split(".")[1]) == 7
        backend.record(failed_scheduling("a", "another message"))
        backend.record(Event(ObjectRef("Node", "", "n1"), "Normal", "Cordoned", "by the test"))
        # another message is another Event; a cluster-scoped object's go to "default"
        await wait_until(lambda: len(events_of(cluster)) == 3, what="two more events")
        assert backend.events.aggregated == 1 and backend.events.dropped == 0
        names = sorted(e["metadata"]["name"].split(".")[0] for e in events_of(cluster))
        assert names == ["a", "a", "n1"]
        tg.cancel_scope.cancel()


async def test_repeats_while_a_create_is_queued_go_into_it(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client)
        for _ in range(3):  # before the sender runs at all
            recorder.record(failed_scheduling("a"))
        await tg.start(recorder.run)
        await wait_until(lambda: recorder.pending == 0 and recorder.written == 1)
        (event,) = events_of(cluster)
        assert event["series"]["count"] == 3
        tg.cancel_scope.cancel()


async def test_later_repeats_are_written_at_most_every_series_interval(tmp_path: Path) -> None:
    settings = EventSettings(series_interval=0.3)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=settings)
        await tg.start(recorder.run)

        def count() -> int | None:
            series: dict[str, Any] = events_of(cluster)[0].get("series") or {}
            return series.get("count")

        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.written == 1)
        recorder.record(failed_scheduling("a"))  # the first repeat: at once
        await wait_until(lambda: count() == 2)
        for _ in range(5):
            recorder.record(failed_scheduling("a"))
        await anyio.sleep(0.1)
        assert count() == 2 and recorder.pending == 1  # held back
        await wait_until(lambda: count() == 7, timeout=2.0, what="the deferred update")
        assert recorder.written == 3
        tg.cancel_scope.cancel()


async def test_events_beyond_the_rate_limits_are_dropped_and_counted(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = EventSettings(per_object_burst=3, per_object_per_minute=60, burst=5, qps=1)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=settings, clock=clock)
        for i in range(5):  # one object, five different messages: 3 pass
            recorder.record(failed_scheduling("a", f"message {i}"))
        assert recorder.dropped == 2
        for name in ("b", "c", "d"):  # 2 more fit in the overall burst of 5
            recorder.record(failed_scheduling(name))
        assert recorder.dropped == 3
        clock.advance(1.0)  # one more token a second overall, one a second for "a"
        recorder.record(failed_scheduling("a", "message 9"))
        assert recorder.dropped == 3 and recorder.recorded == 9
        tg.start_soon(recorder.run)
        await wait_until(lambda: len(events_of(cluster)) == 6, what="six events written")
        tg.cancel_scope.cancel()


async def test_record_never_raises_nor_blocks(tmp_path: Path) -> None:
    recorder = KubeEventRecorder(None, settings=EventSettings(max_pending=2))  # type: ignore[arg-type]
    for name in ("a", "b", "c", "d"):
        recorder.record(failed_scheduling(name))  # no sender: they queue, then drop
    assert recorder.pending == 2 and recorder.dropped == 2
    recorder.record(None)  # type: ignore[arg-type]
    assert recorder.dropped == 3


async def test_failed_event_writes_are_counted_not_retried(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client)
        await tg.start(recorder.run)
        await cluster.cut()
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.failed == 1, what="a failed write")
        await cluster.resume()
        recorder.record(failed_scheduling("a"))  # starts a new Event
        await wait_until(lambda: len(events_of(cluster)) == 1)
        tg.cancel_scope.cancel()
