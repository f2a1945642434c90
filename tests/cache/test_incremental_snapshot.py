"""The cache's snapshot reuses the copies of what did not change: it must equal a full copy.

``SchedulerCache.snapshot`` copies only the tasks and nodes that changed since the last
snapshot, in the cluster (watch events, assumptions) or in the session that used it
(``Snapshot.touched_*``). The property: after any sequence of cluster events, cache
assumptions and whole cycles (a session running every default action on the snapshot and
the cache assuming its binds), every snapshot equals :meth:`full_snapshot`, field by
field, and a node's tasks are the very objects its jobs hold. A copy changed by a session
and reused unmarked, or a change in the cluster that is not seen, makes it fail.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.task_states import TO_PLACE
from scheduler.app import builtin_registry
from scheduler.cache import SchedulerCache
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Bind, Evict, EvictReason, Nominate, parts
from scheduler.framework.session import open_session
from tests.builders import cache_with, node, pod

Obj = dict[str, Any]
NODES = ("n1", "n2", "n3")
PODS = tuple(f"p{i}" for i in range(6))
RESOLVED = builtin_registry().resolve(SchedulerConfiguration())


def _task_fields(t: Any) -> tuple[Any, ...]:
    return (
        t.uid,
        t.namespace,
        t.name,
        t.job_id,
        id(t.spec),
        t.priority,
        t.creation,
        t.role,
        t.labels,
        t.annotations,
        t.status,
        t.node_name,
        t.nominated_node,
        t.preemptable,
        t.preemption_policy,
        t.priority_class,
        t.start_time,
        t.terminating,
        t.sluice,
    )


def dump(snap: Snapshot) -> dict[str, Any]:
    """Everything a session reads from ``snap``, by value; checks that each node's tasks
    are the objects the jobs hold (one copy per task per snapshot)."""
    held = {uid: t for job in snap.jobs.values() for uid, t in job.tasks.items()}
    nodes = {}
    for name, n in snap.nodes.items():
        for uid, t in n.tasks.items():
            if uid in held:
                assert t is held[uid], f"node {name} holds another copy of {uid}"
        nodes[name] = (
            n.allocatable,
            n.used,
            n.releasing,
            n.nominated,
            dict(n.held),
            {uid: _task_fields(t) for uid, t in sorted(n.tasks.items())},
        )
    jobs = {
        uid: (
            j.queue,
            j.priority,
            j.phase,
            j.min_member,
            j.has_pod_group,
            j.problem,
            {u: _task_fields(t) for u, t in sorted(j.tasks.items())},
        )
        for uid, j in snap.jobs.items()
    }
    return {"nodes": nodes, "jobs": jobs, "order": list(snap.nodes)}


def _to_place(snap: Snapshot) -> set[str]:
    return {
        uid
        for uid, job in snap.jobs.items()
        if any(t.sluice and t.status in TO_PLACE for t in job.tasks.values())
    }


def _pod(name: str, where: str | None, priority: int, cpu: int) -> Obj:
    obj = pod(name, cpu=f"{cpu}00m", node=where, priority=priority)
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


ops = st.one_of(
    st.tuples(
        st.just("pod"),
        st.sampled_from(PODS),
        st.sampled_from((None, *NODES)),
        st.integers(0, 3),
        st.integers(1, 9),
    ),
    st.tuples(st.just("delete-pod"), st.sampled_from(PODS)),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.integers(1, 4)),
    st.tuples(st.just("delete-node"), st.sampled_from(NODES)),
    st.tuples(st.just("assume"), st.sampled_from(PODS), st.sampled_from(NODES)),
    st.tuples(st.just("forget"), st.sampled_from(PODS)),
    st.tuples(st.just("evict"), st.sampled_from(PODS)),
    st.tuples(st.just("forget-evict"), st.sampled_from(PODS)),
    st.tuples(st.just("nominate"), st.sampled_from(PODS), st.sampled_from(NODES)),
    st.tuples(st.just("forget-nomination"), st.sampled_from(PODS)),
    st.tuples(st.just("cycle"), st.booleans()),
)


def _apply(cache: SchedulerCache, op: tuple[Any, ...]) -> None:
    kind = op[0]
    uid = f"uid-{op[1]}" if kind not in ("node", "delete-node", "cycle") else ""
    if kind == "pod":
        _, name, where, priority, cpu = op
        cache.handle("Pod", "MODIFIED", _pod(name, where, priority, cpu))
    elif kind == "delete-pod":
        cache.handle(
            "Pod", "DELETED", {"metadata": {"name": op[1], "namespace": "default", "uid": uid}}
        )
    elif kind == "node":
        cache.handle("Node", "MODIFIED", node(op[1], cpu=str(op[2])))
    elif kind == "delete-node":
        cache.handle("Node", "DELETED", {"metadata": {"name": op[1]}})
    elif kind == "assume":
        cache.ledger.assume_bind(uid, op[2], {"x": "1"})
    elif kind == "forget":
        cache.ledger.forget_bind(uid)
    elif kind == "evict":
        cache.ledger.assume_evict(uid)
    elif kind == "forget-evict":
        cache.ledger.forget_evict(uid)
    elif kind == "nominate":
        cache.ledger.assume_nomination(uid, op[2])
    elif kind == "forget-nomination":
        cache.ledger.forget_nomination(uid)


def _cycle(cache: SchedulerCache, commit: bool) -> None:
    """One cycle as the loop runs it: snapshot (checked), session, actions, assumptions."""
    snap = cache.snapshot()
    assert dump(snap) == dump(cache.full_snapshot())
    opening = _to_place(snap)
    assert snap.to_place == opening  # the builder's index equals a walk of the jobs
    session = open_session(snap, RESOLVED)
    for action in RESOLVED.actions:
        session.run_action(action)
    assert _to_place(snap) <= opening  # within a cycle a job only leaves it
    if not commit:
        return
    for e in parts(session.effects):
        if isinstance(e, Bind):
            cache.ledger.assume_bind(e.task.uid, e.node, e.annotations)
        elif isinstance(e, Evict):
            cache.ledger.assume_evict(e.task.uid)
        elif isinstance(e, Nominate):
            cache.ledger.assume_nomination(e.task.uid, e.node)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(ops, max_size=40))
def test_every_snapshot_equals_a_full_copy(steps: list[tuple[Any, ...]]) -> None:
    cache = cache_with(*(node(n, cpu="2") for n in NODES))
    for op in steps:
        if op[0] == "cycle":
            _cycle(cache, op[1])
        else:
            _apply(cache, op)
    _cycle(cache, True)
    _cycle(cache, False)


def test_unchanged_copies_are_shared_and_changed_ones_are_not() -> None:
    cache = cache_with(
        node("n1", cpu="2"), node("n2", cpu="2"), _pod("a", "n1", 0, 5), _pod("b", "n2", 0, 5)
    )
    first = cache.snapshot()
    a1, b1 = first.nodes["n1"].tasks["uid-a"], first.nodes["n2"].tasks["uid-b"]
    cache.handle("Pod", "MODIFIED", _pod("a", "n1", 0, 6))  # a changes in the cluster
    second = cache.snapshot()
    assert second.nodes["n2"] is first.nodes["n2"]
    assert second.nodes["n2"].tasks["uid-b"] is b1
    assert second.nodes["n1"] is not first.nodes["n1"]
    assert second.nodes["n1"].tasks["uid-a"] is not a1
    # a pod's gang of one goes with its task: reused when it is, rebuilt when not
    assert second.jobs["default/b"] is first.jobs["default/b"]
    assert second.jobs["default/a"] is not first.jobs["default/a"]
    # a session moves b: its copy and its node are not reused
    session = open_session(second, RESOLVED)
    with session.statement() as stmt:
        stmt.evict(second.nodes["n2"].tasks["uid-b"], EvictReason.DISSOLVED)
        stmt.commit()
    third = cache.snapshot()
    assert third.nodes["n2"] is not second.nodes["n2"]
    assert third.nodes["n2"].tasks["uid-b"] is not b1
    assert third.nodes["n1"] is second.nodes["n1"]
    assert dump(third) == dump(cache.full_snapshot())
