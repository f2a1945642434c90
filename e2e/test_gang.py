"""A gang is bound in full or not at all, and what is left of a broken one is dissolved."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from conftest import SCHEDULER_NAME
from harness import Cluster, NodeSpec, condition, hold_for, wait_for

pytestmark = pytest.mark.anyio


async def test_gang_waits_for_room_for_all_members(cluster: Cluster, start_scheduler) -> None:
    # Room for 2 pods of 1 cpu; the gang needs 3.
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    await start_scheduler()
    await cluster.create_pod_group("gang", min_member=3)
    members = [f"gang-{i}" for i in range(3)]
    await cluster.create_pods(members, cpu="1", group="gang")

    async def unschedulable() -> bool:
        pg = await cluster.get_pod_group("gang")
        conds = {c.get("type"): c for c in ((pg or {}).get("status") or {}).get("conditions") or ()}
        return conds.get("Unschedulable", {}).get("status") == "True"

    # The scheduler has considered the gang (and said why it waits) ...
    await wait_for(unschedulable, timeout=30, what="PodGroup gang Unschedulable")
    # ... and none of its members is bound, over several cycles.
    await hold_for(
        lambda: not cluster.bound(members), seconds=3.0, what="no member of the gang bound"
    )
    for m in members:
        pod = cluster.pod(m)
        assert pod is not None
        scheduled = condition(pod, "PodScheduled")
        assert scheduled and scheduled["status"] == "False", cluster.describe_pods(members)

    await cluster.create_node("n2", NodeSpec(cpu="1"))
    bound = await wait_for(
        lambda: cluster.all_bound(members) and cluster.bound(members),
        timeout=30,
        what="the whole gang bound once a third node exists",
        detail=lambda: cluster.describe_pods(members),
    )
    assert len(set(bound.values())) == 3  # one member per node: 1 cpu each
    assert cluster.recorder.violations == []


async def test_a_gang_left_below_its_minimum_is_dissolved(
    cluster: Cluster, start_scheduler, tmp_path: Path
) -> None:
    """A member of a running gang is deleted and nothing takes its place: after the
    grace (3 s here), the members left are evicted, each marked DisruptionTarget and
    told why in a Dissolved event (the soak's finding of issue 26)."""
    config = tmp_path / "dissolve.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "SchedulerConfiguration",
                "schedulerName": SCHEDULER_NAME,
                "actionArguments": {"dissolve": {"graceSeconds": 3}},
            }
        )
    )
    await cluster.create_nodes(3, NodeSpec(cpu="1"))
    await start_scheduler(config=config)
    await cluster.create_pod_group("broken", min_member=3)
    members = [f"broken-{i}" for i in range(3)]
    await cluster.create_pods(members, cpu="1", group="broken")
    await wait_for(
        lambda: cluster.all_bound(members),
        timeout=30,
        what="the gang bound",
        detail=lambda: cluster.describe_pods(members),
    )
    left = members[:2]
    deleted = time.monotonic()
    await cluster.delete_pod(members[2], grace=0)
    await wait_for(
        lambda: all(cluster.pod(m) is None for m in left),
        timeout=30,
        what="what is left of the gang evicted",
        detail=lambda: cluster.describe_pods(members),
    )
    assert time.monotonic() - deleted >= 3.0, "not before the grace"
    for m in left:
        history = cluster.recorder.history(m)
        assert history is not None
        assert history.saw("DisruptionTarget", "True", "PreemptionByScheduler"), history

    async def told() -> bool:
        events = await cluster.events()
        named = {
            e["regarding"]["name"]
            for e in events
            if e.get("reason") == "Dissolved" and "ran below its minimum" in e.get("note", "")
        }
        return set(left) <= named

    await wait_for(told, timeout=30, what="a Dissolved event on each member left")
    assert cluster.recorder.violations == []
