"""scheduler/api/shards.py: which shard owns a node, a gang, a queue's status."""

from __future__ import annotations

import pytest

from scheduler.api.shards import POOL_LABEL, Pool, Sharding, ShardSpec

A, B, REST = ShardSpec("a", "pool-a"), ShardSpec("b", "pool-b"), ShardSpec("rest", "")


def sharding(mine: ShardSpec = A, *shards: ShardSpec) -> Sharding:
    return Sharding(POOL_LABEL, shards or (A, B), mine)


def pool(value: str) -> dict[str, str]:
    return {POOL_LABEL: value}


@pytest.mark.parametrize(
    ("group", "pod", "selector", "queue", "expected"),
    [
        pytest.param(
            pool("pool-b"),
            pool("pool-a"),
            None,
            pool("pool-a"),
            "pool-b",
            id="the PodGroup's label wins over its pods' and its queue's",
        ),
        pytest.param(
            {},
            pool("pool-a"),
            pool("pool-a"),
            pool("pool-b"),
            "pool-b",
            id="a PodGroup without it: its queue's, never its pods'",
        ),
        pytest.param({}, pool("pool-a"), None, None, "", id="a PodGroup of no pool: none"),
        pytest.param(
            None,
            pool("pool-a"),
            pool("pool-b"),
            pool("pool-b"),
            "pool-a",
            id="a pod of no PodGroup: its own label first",
        ),
        pytest.param(
            None, {}, pool("pool-b"), pool("pool-a"), "pool-b", id="then its nodeSelector"
        ),
        pytest.param(None, {}, None, pool("pool-a"), "pool-a", id="then its queue"),
        pytest.param(None, {}, None, None, "", id="else the nodes without the label"),
    ],
)
def test_the_pool_of_a_gang(
    group: dict[str, str] | None,
    pod: dict[str, str],
    selector: dict[str, str] | None,
    queue: dict[str, str] | None,
    expected: str,
) -> None:
    found = sharding().gang_pool(
        group_labels=group, pod_labels=pod, node_selector=selector, queue="q", queue_labels=queue
    )
    assert found.value == expected


@pytest.mark.parametrize(
    ("mine", "labels", "owns", "selector"),
    [
        pytest.param(A, pool("pool-a"), True, f"{POOL_LABEL}=pool-a", id="its pool"),
        pytest.param(A, pool("pool-b"), False, f"{POOL_LABEL}=pool-a", id="another pool"),
        pytest.param(A, {}, False, f"{POOL_LABEL}=pool-a", id="no pool"),
        pytest.param(REST, {}, True, f"!{POOL_LABEL}", id="the shard of no pool: unlabelled"),
        pytest.param(REST, pool("pool-a"), False, f"!{POOL_LABEL}", id="not a labelled one"),
    ],
)
def test_nodes_are_partitioned(
    mine: ShardSpec, labels: dict[str, str], owns: bool, selector: str
) -> None:
    s = sharding(mine, A, B, REST)
    assert s.owns_node(labels) is owns
    assert s.node_selector() == selector


@pytest.mark.parametrize(
    ("mine", "labels", "writes"),
    [
        pytest.param(A, pool("pool-a"), True, id="a queue of its pool"),
        pytest.param(B, pool("pool-a"), False, id="another shard's queue"),
        pytest.param(A, {}, True, id="a queue of no pool: the first shard"),
        pytest.param(B, {}, False, id="a queue of no pool: not the others"),
    ],
)
def test_one_shard_writes_a_queue_s_status(
    mine: ShardSpec, labels: dict[str, str], writes: bool
) -> None:
    assert sharding(mine).writes_queue(labels) is writes


def test_pods_of_a_pool_no_shard_serves_are_reported_by_the_first_shard_only() -> None:
    first, second = sharding(A), sharding(B)
    assert first.reports_orphans and not second.reports_orphans
    alone = Sharding(POOL_LABEL, (A,), A, listed=False)  # knows no other shard
    assert not alone.reports_orphans and not alone.writes_queue({})
    assert alone.writes_queue(pool("pool-a"))
    assert first.serving("pool-z") is None
    reason = first.orphan_reason(Pool("pool-z", f"its label {POOL_LABEL}"))
    assert "node pool 'pool-z'" in reason and "a (pool-a), b (pool-b)" in reason


def test_its_own_shard_must_be_listed() -> None:
    with pytest.raises(ValueError, match="not one of the shards"):
        Sharding(POOL_LABEL, (A,), B)
