"""Faults: the watch cut mid-stream, a 410 on resume, and API calls failing.

These need control of the API server, so they run against the emulator only: the
server is stopped (every watch is cut) and restarted on the same port, with changes
made to its store meanwhile; or it refuses a share of the scheduler's calls.
"""

from __future__ import annotations

import anyio
import pytest
from harness import Cluster, Faults, NodeSpec, condition, node_of, quantity, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.emulator_only]


async def _fill(cluster: Cluster, start_scheduler) -> tuple[dict[str, str], object]:
    """Two nodes of 2 cpu filled by four pods of 1 cpu; returns pod -> node."""
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    sluice = await start_scheduler()
    first = [f"a{i}" for i in range(4)]
    await cluster.create_pods(first, cpu="1")
    await wait_for(lambda: cluster.all_running(first), timeout=30, what="the cluster filled")
    return cluster.bound(first), sluice


async def _outage(cluster: Cluster, placed: dict[str, str], *, churn: int) -> tuple[str, str]:
    """Stop the API server; meanwhile delete a0 and create b0, pinned (by hostname) to
    a0's node, which has room for it only if the scheduler learns that a0 is gone; add a
    Node n2 and b1, pinned to n2; then ``churn`` unrelated writes; then serve again.
    Returns a0's node and n2."""
    server = cluster.emulator
    assert server is not None
    await server.stop()
    await anyio.sleep(1.0)  # the scheduler notices: its watches fail, reconnects fail
    server.store.delete("Pod", cluster.namespace, "a0", grace_period_seconds=0)
    freed, added = placed["a0"], cluster.name("n2")
    host = "kubernetes.io/hostname"
    server.store.create(cluster.pod_manifest("b0", cpu="1", node_selector={host: freed}))
    server.store.create(cluster.node_manifest("n2", NodeSpec(cpu="2")))
    server.store.create(cluster.pod_manifest("b1", cpu="2", node_selector={host: added}))
    server.churn(churn)
    await server.resume()
    return freed, added


async def _converged(cluster: Cluster, freed: str, added: str, what: str) -> None:
    """b0 bound where a0 was (the cache saw a0 go and b0 come), b1 on the new node."""
    await wait_for(
        lambda: (
            node_of(cluster.pod("b0") or {}) == freed and node_of(cluster.pod("b1") or {}) == added
        ),
        timeout=30,
        what=f"b0 bound where a0 was, b1 on the new node ({what})",
        detail=cluster.describe_pods,
    )


async def test_watch_cut_mid_stream(cluster: Cluster, start_scheduler) -> None:
    placed, sluice = await _fill(cluster, start_scheduler)
    freed, added = await _outage(cluster, placed, churn=0)
    # The watches resumed where they were cut: the cache learnt that a0 is gone (else b0
    # would not fit), that b0, b1 and n2 exist.
    await _converged(cluster, freed, added, "after the watches resumed")
    # And it keeps following: delete through the API, the room is reused.
    await cluster.delete_pod("a1")
    await cluster.create_pod("c0", cpu="1")
    await wait_for(
        lambda: node_of(cluster.pod("c0") or {}) == placed["a1"],
        timeout=30,
        what="c0 bound where a1 was",
        detail=cluster.describe_pods,
    )
    logs = sluice.log_records()
    assert any(r.get("event") == "list or watch failed, retrying" for r in logs), sluice.tail()
    assert cluster.recorder.violations == []


@pytest.mark.emulator(history=200)
async def test_watch_resumed_too_late_gets_410_and_relists(
    cluster: Cluster, start_scheduler
) -> None:
    placed, sluice = await _fill(cluster, start_scheduler)
    freed, added = await _outage(cluster, placed, churn=500)
    await _converged(cluster, freed, added, "after a relist")
    relisted = {
        r.get("kind") for r in sluice.log_records() if r.get("event") == "watch expired, relisting"
    }
    assert {"Pod", "Node"} <= relisted, (relisted, sluice.tail())
    await cluster.delete_pod("a1")
    await cluster.create_pod("c0", cpu="1")
    await wait_for(
        lambda: node_of(cluster.pod("c0") or {}) == placed["a1"],
        timeout=30,
        what="c0 bound where a1 was",
    )
    assert cluster.recorder.violations == []


NODES = 30
NODE_CPU = "3"  # 30 pods of 100m each: 900 in all
WAVES = (800, 150, 50)  # low, high, low again: 1,000 pods


@pytest.mark.emulator(fault_rate=0.1, fault_kinds=("bind", "delete", "patch"), seed=7)
async def test_ten_percent_of_calls_failing_across_1000_pods(
    cluster: Cluster, start_scheduler
) -> None:
    """800 low-priority pods fill most of the room, 150 high-priority pods take the rest
    and preempt 50, then 50 more low-priority pods find no room; 10% of the scheduler's
    bind, delete and patch calls fail (refused before they apply) all along."""
    await _run_with_faults(cluster, start_scheduler, nodes=NODES, waves=WAVES)
    faults = _faults(cluster)
    for kind in ("bind", "delete", "patch"):
        assert faults.failed[kind] > 0, (kind, dict(faults.calls), dict(faults.failed))
    total = sum(faults.calls[k] for k in ("bind", "delete", "patch"))
    assert 0.05 < sum(faults.failed.values()) / total < 0.15, (faults.calls, faults.failed)


@pytest.mark.emulator(lost_reply_rate=0.1, fault_kinds=("bind", "delete", "patch"), seed=11)
async def test_ten_percent_of_replies_lost_after_the_write(
    cluster: Cluster, start_scheduler
) -> None:
    """The same shape, smaller (340 pods: 20 preempted, 20 left pending), but the calls
    are applied and their replies lost (the scheduler sees a 500 for a bind that
    happened): it must follow the watch, not its own guess."""
    await _run_with_faults(cluster, start_scheduler, nodes=10, waves=(250, 70, 20))
    faults = _faults(cluster)
    assert faults.lost["bind"] > 0, (dict(faults.calls), dict(faults.lost))


def _faults(cluster: Cluster) -> Faults:
    assert cluster.emulator is not None
    return cluster.emulator.faults


async def _run_with_faults(
    cluster: Cluster, start_scheduler, *, nodes: int, waves: tuple[int, int, int]
) -> None:
    """Nodes of 3 cpu (30 pods of 100m each); ``waves``: low-priority pods that fit,
    high-priority pods that need all the free room plus some preemption, and more
    low-priority pods that find no room. Checks that every pod ends bound, or pending
    with PodScheduled=False and a reason; that none is lost (the pods gone were
    preemption victims marked DisruptionTarget); that no pod's node ever changed and no
    node was ever over-allocated; and that pending pods really have no room."""
    await cluster.create_nodes(nodes, NodeSpec(cpu=NODE_CPU, memory="64Gi"))
    low = await cluster.create_priority_class("low", 100)
    high = await cluster.create_priority_class("high", 10_000)
    await start_scheduler()
    n_low, n_high, n_late = waves
    low_pods = [f"low-{i:03d}" for i in range(n_low)]
    high_pods = [f"high-{i:03d}" for i in range(n_high)]
    late_pods = [f"late-{i:03d}" for i in range(n_late)]

    await cluster.create_pods(low_pods, cpu="100m", priority=low)
    await wait_for(
        lambda: cluster.all_bound(low_pods), timeout=90, what=f"the first {n_low} pods bound"
    )
    await cluster.create_pods(high_pods, cpu="100m", priority=high)
    await wait_for(
        lambda: cluster.all_bound(high_pods),
        timeout=90,
        what=f"the {n_high} high-priority pods bound",
        detail=lambda: cluster.describe_pods(n for n in high_pods if not cluster.bound([n])),
    )
    await cluster.create_pods(late_pods, cpu="100m", priority=low)

    def settled() -> bool:
        for pod in cluster.informer.pods.values():
            if node_of(pod):
                continue
            scheduled = condition(pod, "PodScheduled")
            if not (scheduled and scheduled["status"] == "False" and scheduled.get("reason")):
                return False
        return True

    await wait_for(
        settled,
        timeout=90,
        what="every pod bound or pending with a reason",
        detail=lambda: cluster.describe_pods(
            n for n, p in cluster.informer.pods.items() if not node_of(p)
        ),
    )
    await anyio.sleep(2.0)  # a few more cycles: nothing may change any more
    assert settled()

    pods = {p["metadata"]["name"]: p for p in await cluster.list_pods()}
    rec = cluster.recorder
    created = [*low_pods, *high_pods, *late_pods]
    # None lost: every pod exists, or was deleted as a preemption victim.
    for name in created:
        if name in pods:
            continue
        h = rec.history(name)
        assert h is not None and h.deleted, f"{name} disappeared without being seen"
        assert h.saw("DisruptionTarget", "True", "PreemptionByScheduler"), (name, h.conditions)
        assert not name.startswith("high-"), f"high-priority pod {name} was preempted"
    # Every pod that exists is bound, or pending with PodScheduled=False and a reason.
    pending = [n for n, p in pods.items() if not node_of(p)]
    for name in pending:
        cond = condition(pods[name], "PodScheduled")
        assert cond and cond["status"] == "False" and cond.get("reason"), (name, cond)
    assert all(n in pods and node_of(pods[n]) for n in high_pods)
    # No node over-allocated, ever (checked on every watch event), nor at the end;
    # no pod's node ever changed (none bound twice).
    assert rec.violations == [], rec.violations[:10]
    per_node: dict[str, int] = {}
    for p in pods.values():
        if node_of(p):
            per_node[node_of(p)] = per_node.get(node_of(p), 0) + 1
    capacity = int(quantity(NODE_CPU) / quantity("100m"))
    assert max(per_node.values()) <= capacity
    # Converged: the pods left pending have no room anywhere (the cluster is full).
    if pending:
        assert sum(per_node.values()) == nodes * capacity, (len(pending), per_node)
    faults = _faults(cluster)
    print(
        f"calls {dict(faults.calls)} failed {dict(faults.failed)} lost {dict(faults.lost)}; "
        f"{len(pending)} pending, {len(created) - len(pods)} preempted"
    )
