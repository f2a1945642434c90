"""scheduler.kube.optional: other schedulers' kinds watched while the cluster serves them
(their CRD established, or the APIService of the built-in alpha API available), against
the API emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from kube_support import running_cluster, wait_until

from scheduler.api.group_apis import KUBERNETES, VOLCANO
from scheduler.cache import SchedulerCache
from scheduler.kube import InformerSettings
from scheduler.kube.optional import OPTIONAL_KINDS, OptionalInformers, served
from scheduler.kube.resource_paths import API_SERVICES

pytestmark = pytest.mark.anyio

FAST = InformerSettings(watch_timeout=5, backoff_initial=0.05, backoff_max=0.2)
CRD = "CustomResourceDefinition"
VOLCANO_PG = next(k for k in OPTIONAL_KINDS if k.resource.key == VOLCANO.pod_group_key)
KUBERNETES_PG = next(k for k in OPTIONAL_KINDS if k.resource.key == KUBERNETES.pod_group_key)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _crd(established: str = "True", served_version: bool = True) -> dict[str, Any]:
    return {
        "spec": {"versions": [{"name": "v1beta1", "served": served_version}]},
        "status": {"conditions": [{"type": "Established", "status": established}]},
    }


@pytest.mark.parametrize(
    ("kind", "marker", "expected"),
    [
        (VOLCANO_PG, None, False),
        (VOLCANO_PG, _crd(), True),
        (VOLCANO_PG, _crd(established="False"), False),
        (VOLCANO_PG, _crd(served_version=False), False),
        (
            KUBERNETES_PG,
            {"status": {"conditions": [{"type": "Available", "status": "True"}]}},
            True,
        ),
        (
            KUBERNETES_PG,
            {"status": {"conditions": [{"type": "Available", "status": "False"}]}},
            False,
        ),
    ],
    ids=[
        "no-crd",
        "crd-established",
        "crd-not-established",
        "version-not-served",
        "apiservice-available",
        "apiservice-unavailable",
    ],
)
def test_served(kind: Any, marker: dict[str, Any] | None, expected: bool) -> None:
    assert served(kind, marker) is expected


def test_markers_name_the_crd_or_the_api_service() -> None:
    assert VOLCANO_PG.marker_name == "podgroups.scheduling.volcano.sh"
    assert KUBERNETES_PG.marker is API_SERVICES
    assert KUBERNETES_PG.marker_name == "v1alpha2.scheduling.k8s.io"


async def test_a_kind_is_watched_while_its_crd_is_installed(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        store = cluster.store
        group = {
            "apiVersion": VOLCANO.api_version,
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
        }
        store.create(group)
        crd = store.get(CRD, "", VOLCANO_PG.marker_name)
        cache = SchedulerCache()
        optional = OptionalInformers(cluster.client, cache, settings=FAST)
        await tg.start(optional.run)  # the kinds installed at start are listed first
        assert optional.synced() and optional.on(VOLCANO_PG)
        assert "volcano:default/g" in cache.pod_groups

        store.delete(CRD, "", VOLCANO_PG.marker_name)
        await wait_until(lambda: not optional.on(VOLCANO_PG), what="off")
        assert "volcano:default/g" not in cache.pod_groups

        store.create(
            {k: v for k, v in crd.items() if k != "metadata"}
            | {"metadata": {"name": VOLCANO_PG.marker_name}}
        )
        await wait_until(lambda: "volcano:default/g" in cache.pod_groups, what="on again")
        store.create({**group, "metadata": {"name": "h", "namespace": "default"}})
        await wait_until(lambda: "volcano:default/h" in cache.pod_groups, what="watched")
        tg.cancel_scope.cancel()


async def test_nothing_installed_is_ready_and_off(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        for kind in OPTIONAL_KINDS:
            marker = cluster.store.try_get(kind.marker.kind, "", kind.marker_name)
            assert marker is not None  # the emulator serves every one
            cluster.store.delete(kind.marker.kind, "", kind.marker_name)
        optional = OptionalInformers(cluster.client, SchedulerCache(), settings=FAST)
        await tg.start(optional.run)
        assert optional.synced()
        assert not any(optional.on(k) for k in OPTIONAL_KINDS)
        tg.cancel_scope.cancel()
