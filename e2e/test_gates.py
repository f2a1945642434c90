"""Pods held by scheduling gates (Kueue's admission gate and anyone's ``spec.schedulingGates``)
are never tried: no bind, no preemption, no condition written over the API server's
``SchedulingGated``, no FailedScheduling event. A gang waits while a pod it needs is
gated. When the gates go (Kueue admits the workload, adding a node selector and a
toleration as it does), the pods are scheduled, where the new selector says."""

from __future__ import annotations

import pytest
from harness import Cluster, NodeSpec, condition, hold_for, node_of, wait_for

pytestmark = pytest.mark.anyio

KUEUE = "kueue.x-k8s.io/admission"
POOL = "e2e.sluice.dev/pool"


def _admit(pool: str) -> list[dict[str, object]]:
    """The writes of Kueue's admission: the gate removed, a node selector and a toleration
    added (JSON patch, as a pod update may only add to both while it is gated)."""
    return [
        {"op": "add", "path": f"/spec/nodeSelector/{POOL.replace('/', '~1')}", "value": pool},
        {
            "op": "add",
            "path": "/spec/tolerations",
            "value": [{"key": "e2e.sluice.dev/flavor", "operator": "Exists"}],
        },
        {"op": "remove", "path": "/spec/schedulingGates"},
    ]


async def test_gated_pods_wait_untried_then_go_where_admission_says(
    cluster: Cluster, start_scheduler
) -> None:
    a = await cluster.create_node("a", NodeSpec(cpu="2"), labels={POOL: "a"})
    b = await cluster.create_node("b", NodeSpec(cpu="2"), labels={POOL: "b"})
    await cluster.create_pod_group("gang", min_member=2)
    gated = ["alone", "g-0"]
    await cluster.create_pod("alone", cpu="1", scheduling_gates=[KUEUE])
    await cluster.create_pod("g-0", cpu="500m", group="gang", scheduling_gates=[KUEUE])
    await cluster.create_pod("g-1", cpu="500m", group="gang")
    await start_scheduler()
    await cluster.create_pod("free", cpu="100m")
    await wait_for(lambda: cluster.all_bound(["free"]), timeout=30, what="an ungated pod bound")

    await hold_for(
        lambda: not cluster.bound([*gated, "g-1"]),
        seconds=2.0,
        what="the gated pods, and the gang that needs one of them, left alone",
    )
    for name in gated:
        pod = cluster.pod(name)
        assert pod is not None
        scheduled = condition(pod, "PodScheduled")
        assert scheduled is not None and scheduled["reason"] == "SchedulingGated", scheduled
    failed = [
        e["regarding"].get("name")
        for e in await cluster.events()
        if e.get("reason") == "FailedScheduling"
    ]
    assert not set(failed) & set(gated), failed
    gang = await cluster.get_pod_group("gang")
    assert gang is not None and "held by scheduling gates" in str(gang.get("status")), gang

    await cluster.patch_pod("alone", _admit("b"), json_patch=True)
    await cluster.patch_pod("g-0", _admit("a"), json_patch=True)
    bound = await wait_for(
        lambda: cluster.all_bound([*gated, "g-1"]) and cluster.bound([*gated, "g-1"]),
        timeout=30,
        what="the pods bound once their gates are removed",
        detail=cluster.describe_pods,
    )
    assert bound["alone"] == b, bound
    assert bound["g-0"] == a, bound
    assert node_of(cluster.pod("g-1") or {}) in (a, b)
    assert cluster.recorder.violations == []
