"""A shard's cache (scheduler/cache/shard_view.py): the nodes of its pool only, the pods
and PodGroups of its pool to schedule, the others using room where they run; gangs of a
pool no shard serves said so by the first shard; borders follow label changes."""

from __future__ import annotations

from typing import Any

from scheduler import app
from scheduler.api.reasons import ReasonCode
from scheduler.api.shards import POOL_LABEL, Sharding, ShardSpec
from scheduler.framework.effects import Bind
from scheduler.framework.session import open_session
from tests.builders import cache_with, node, pod, pod_group, queue

Obj = dict[str, Any]
A, B = ShardSpec("a", "pool-a"), ShardSpec("b", "pool-b")
SHARD_A = Sharding(POOL_LABEL, (A, B), A)
SHARD_B = Sharding(POOL_LABEL, (A, B), B)


def labelled(obj: Obj, pool: str) -> Obj:
    obj["metadata"].setdefault("labels", {})[POOL_LABEL] = pool
    return obj


CLUSTER = [
    labelled(node("a1", cpu="4"), "pool-a"),
    labelled(node("b1", cpu="8"), "pool-b"),
    node("x1", cpu="4"),
    labelled(pod("lone-a", cpu="1"), "pool-a"),
    pod("lone-b", cpu="1", nodeSelector={POOL_LABEL: "pool-b"}),
    labelled(pod_group("gang-b", min_member=2, phase="Inqueue"), "pool-b"),
    *(pod(f"gang-b-{i}", cpu="1", group="gang-b") for i in range(2)),
    labelled(pod("stray", cpu="1"), "pool-z"),
    pod("running-b", cpu="2", node="b1", scheduler="default-scheduler"),
]


def scheduled(cache: Any) -> set[str]:
    return {t.name for t in cache.tasks.values() if t.sluice}


def test_each_shard_takes_its_pool() -> None:
    a, b = cache_with(*CLUSTER, sharding=SHARD_A), cache_with(*CLUSTER, sharding=SHARD_B)
    assert set(a.nodes) == {"a1"} and set(b.nodes) == {"b1"}
    assert scheduled(a) == {"lone-a", "stray"}  # the first shard says why stray waits
    assert scheduled(b) == {"lone-b", "gang-b-0", "gang-b-1"}
    assert b.nodes["b1"].used.to_quantities()["cpu"] == "2"  # another scheduler's pod
    assert "default/gang-b" not in a.snapshot().jobs
    assert set(b.snapshot().jobs) >= {"default/gang-b", "default/lone-b"}


def test_no_pod_is_placed_by_two_shards_nor_on_another_pool() -> None:
    placed: dict[str, str] = {}
    for sharding in (SHARD_A, SHARD_B):
        cache = cache_with(*CLUSTER, sharding=sharding)
        session = open_session(cache.snapshot(), app.resolve())
        for action in session.resolved.actions:
            session.run_action(action)
        for e in session.effects:
            if isinstance(e, Bind):
                assert e.task.name not in placed
                placed[e.task.name] = e.node
    assert placed == {"lone-a": "a1", "lone-b": "b1", "gang-b-0": "b1", "gang-b-1": "b1"}


def test_a_pool_no_shard_serves_is_said_by_the_first_shard_only() -> None:
    a = cache_with(*CLUSTER, sharding=SHARD_A)
    session = open_session(a.snapshot(), app.resolve())
    for action in session.resolved.actions:
        session.run_action(action)
    told = session.job_reasons["default/stray"]
    assert told.code is ReasonCode.JOB_UNRESOLVED
    reason = told.message
    assert "node pool 'pool-z'" in reason and "no shard of this scheduler serves" in reason
    b = cache_with(*CLUSTER, sharding=SHARD_B)
    assert "stray" not in scheduled(b) and "default/stray" not in b.snapshot().jobs


def test_borders_follow_label_changes() -> None:
    """A PodGroup relabelled moves its pods with it; a queue's label moves the pods of no
    PodGroup that name it; a node relabelled leaves the shard."""
    b = cache_with(*CLUSTER, queue("team"), sharding=SHARD_B)
    b.handle("PodGroup", "MODIFIED", labelled(pod_group("gang-b", min_member=2), "pool-a"))
    assert scheduled(b) == {"lone-b"}
    team = pod("teamed", cpu="1", labels={"scheduling.sluice.dev/queue": "team"})
    b.handle("Pod", "ADDED", team)
    assert "teamed" not in scheduled(b)  # no pool: the nodes without the label (no shard)
    b.handle("Queue", "MODIFIED", labelled(queue("team"), "pool-b"))
    assert "teamed" in scheduled(b)
    b.handle("Node", "MODIFIED", labelled(node("b1", cpu="4"), "pool-a"))
    assert not b.nodes
