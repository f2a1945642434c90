"""scheduler.kube.backend: the ports against the API emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_support import Cluster, condition, node, pdb, pod, running_cluster

from scheduler.api.errors import ConflictError, NotFoundError, TooManyRequestsError
from scheduler.kube import KubeBackend, KubeEventRecorder
from scheduler.ports import Binder, EventRecorder, Evictor, ObjectRef, StatusWriter

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
    backend = KubeBackend(None, events=KubeEventRecorder(None))  # type: ignore[arg-type]
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
