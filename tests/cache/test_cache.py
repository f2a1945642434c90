"""Tests of scheduler.cache: events in any order, assume/forget, rejected objects, relists,
and snapshots that the session may change freely."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.job import PodGroupPhase
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.framework.effects import Bind
from tests.builders import cache_with, node, pod, pod_group, queue

Obj = dict[str, Any]
Mi = 2**20
ONE = Resource({"cpu": 1000, "memory": Mi, "pods": 1})


def used(cache: SchedulerCache, name: str = "n1") -> Resource:
    return cache.nodes[name].used


def bound(name: str = "p", node_name: str = "n1", phase: str = "Running", **kw: Any) -> Obj:
    return pod(name, cpu="1", memory="1Mi", node=node_name, phase=phase, **kw)


def pending(name: str = "p", **kw: Any) -> Obj:
    return pod(name, cpu="1", memory="1Mi", **kw)


def deleted(raw: Obj) -> Obj:
    out = copy.deepcopy(raw)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out


# Events in any order -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "order",
    [
        ["node", "pod"],
        ["pod", "node"],
    ],
    ids=["node-first", "pod-first"],
)
def test_pod_and_node_in_any_order(order: list[str]) -> None:
    objects = {"node": ("Node", node("n1", cpu="4")), "pod": ("Pod", bound())}
    cache = SchedulerCache()
    for key in order:
        kind, obj = objects[key]
        cache.handle(kind, "ADDED", obj)
    assert used(cache) == ONE
    assert "default/p" in cache.nodes["n1"].tasks
    snap = cache.snapshot()
    assert snap.nodes["n1"].used == ONE
    assert snap.jobs["default/p"].tasks["default/p"].status is TaskStatus.RUNNING


def test_pod_group_after_its_pods() -> None:
    cache = cache_with(node("n1"), pending("w-0", group="g"), pending("w-1", group="g"))
    before = cache.snapshot().jobs["default/g"]
    assert before.problem == "pod group default/g does not exist"
    cache.handle("PodGroup", "ADDED", pod_group("g", min_member=2))
    job = cache.snapshot().jobs["default/g"]
    assert (job.problem, job.min_member, sorted(job.tasks)) == (
        "",
        2,
        ["default/w-0", "default/w-1"],
    )


def test_priority_class_after_its_pod_group() -> None:
    cache = cache_with(pod_group("g", priorityClassName="hi"), pending("w", group="g"))
    assert "PodGroup default/g" in cache.rejected
    cache.handle(
        "PriorityClass", "ADDED", {"kind": "PriorityClass", "metadata": {"name": "hi"}, "value": 50}
    )
    assert cache.snapshot().jobs["default/g"].priority == 50


@pytest.mark.parametrize("times", [1, 2, 3], ids=["once", "twice", "thrice"])
def test_repeated_events_are_idempotent(times: int) -> None:
    cache = cache_with(node("n1"))
    for _ in range(times):
        cache.handle("Pod", "ADDED", bound())
        cache.handle("Pod", "MODIFIED", bound())
    assert used(cache) == ONE
    for _ in range(times):
        cache.handle("Pod", "DELETED", bound())
    assert used(cache) == Resource()
    assert cache.tasks == {}


def test_node_update_keeps_its_pods_and_node_delete_and_return() -> None:
    cache = cache_with(node("n1", cpu="4"), bound())
    cache.handle("Node", "MODIFIED", node("n1", cpu="8", labels={"zone": "a"}))
    n = cache.nodes["n1"]
    assert n.allocatable["cpu"] == 8000 and n.labels["zone"] == "a"
    assert n.used == ONE and "default/p" in n.tasks
    cache.handle("Node", "DELETED", node("n1"))
    assert "n1" not in cache.snapshot().nodes
    cache.handle("Node", "ADDED", node("n1"))
    assert used(cache) == ONE


@pytest.mark.parametrize(
    ("first", "event", "second", "status", "node_used"),
    [
        (pending(), "MODIFIED", bound(phase="Pending"), TaskStatus.BOUND, ONE),
        (bound(phase="Pending"), "MODIFIED", bound(), TaskStatus.RUNNING, ONE),
        (bound(), "MODIFIED", bound(phase="Succeeded"), TaskStatus.SUCCEEDED, Resource()),
        (bound(), "MODIFIED", bound(phase="Failed"), TaskStatus.FAILED, Resource()),
        (bound(), "MODIFIED", deleted(bound()), TaskStatus.RELEASING, ONE),
        (bound(), "DELETED", bound(), None, Resource()),
        (deleted(bound()), "DELETED", deleted(bound()), None, Resource()),
    ],
    ids=[
        "bound",
        "started",
        "succeeded-frees",
        "failed-frees",
        "terminating-still-holds",
        "deleted-frees",
        "terminating-deleted",
    ],
)
def test_pod_lifecycle(
    first: Obj, event: str, second: Obj, status: TaskStatus | None, node_used: Resource
) -> None:
    cache = cache_with(node("n1"), first)
    cache.handle("Pod", event, second)
    task = cache.tasks.get("default/p")
    assert (task.status if task else None) is status
    assert used(cache) == node_used


def test_other_schedulers_pods_use_capacity_but_are_not_scheduled() -> None:
    foreign = pod("f", cpu="1", memory="1Mi", node="n1", scheduler="default-scheduler")
    cache = cache_with(node("n1"), foreign, pod("waiting", scheduler="default-scheduler"))
    snap = cache.snapshot()
    assert snap.nodes["n1"].used == ONE
    assert snap.jobs == {}
    done = copy.deepcopy(foreign)
    done["status"]["phase"] = "Succeeded"
    cache.handle("Pod", "MODIFIED", done)
    assert "default/f" not in cache.tasks and used(cache) == Resource()


def test_lone_pod_joins_the_queue_of_its_label() -> None:
    cache = cache_with(
        queue("research"),
        node("n1"),
        pending("p", labels={L.QUEUE_LABEL: "research"}),
        pending("q"),
    )
    jobs = cache.snapshot().jobs
    assert (jobs["default/p"].queue, jobs["default/q"].queue) == ("research", "default")
    assert jobs["default/p"].has_pod_group is False


def test_pod_group_priority_defaults_to_its_highest_pod() -> None:
    cache = cache_with(
        pod_group("g"), pending("a", group="g", priority=3), pending("b", group="g", priority=7)
    )
    assert cache.snapshot().jobs["default/g"].priority == 7


# Assume and forget ----------------------------------------------------------------------------


def test_assume_bind_then_the_bound_event() -> None:
    cache = cache_with(node("n1"), pending())
    woken: list[int] = []
    cache.on_change = lambda: woken.append(1)
    cache.ledger.assume_bind("default/p", "n1")
    assert cache.tasks["default/p"].status is TaskStatus.BINDING
    assert used(cache) == ONE  # counted at once
    cache.handle("Pod", "MODIFIED", pending())  # an older event, still without nodeName
    assert cache.tasks["default/p"].status is TaskStatus.BINDING
    assert used(cache) == ONE
    cache.handle("Pod", "MODIFIED", bound(phase="Pending"))
    assert cache.tasks["default/p"].status is TaskStatus.BOUND
    assert used(cache) == ONE  # not twice
    cache.ledger.forget_bind("default/p")  # too late to forget: the pod is bound
    assert cache.tasks["default/p"].status is TaskStatus.BOUND


def test_forget_after_a_failed_bind_returns_the_pod_to_pending() -> None:
    cache = cache_with(node("n1"), pending())
    woken: list[int] = []
    cache.on_change = lambda: woken.append(1)
    cache.ledger.assume_bind("default/p", "n1")
    generation = cache.generation
    cache.ledger.forget_bind("default/p")
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name) == (TaskStatus.PENDING, "")
    assert used(cache) == Resource()
    assert woken  # the loop is woken to retry
    assert cache.generation > generation  # its room is news for the parked jobs
    generation = cache.generation
    cache.ledger.forget_bind("default/p")  # idempotent: nothing freed the second time
    assert cache.generation == generation
    job = cache.snapshot().jobs["default/p"]
    assert [t.status for t in job.tasks.values()] == [TaskStatus.PENDING]


def test_a_bind_decided_before_the_events_showed_the_pod_bound_does_not_move_it() -> None:
    """Another replica bound p to n2; the event came after this cycle's snapshot, which
    decided p on n1. Assuming that Bind must not move p off n2 (the events know
    better), nor its forgetting (the bind's 409) leave p pending with n2's room free."""
    cache = cache_with(node("n1"), node("n2"), pending())
    stale = cache.tasks["default/p"].clone()
    cache.handle("Pod", "MODIFIED", bound(node_name="n2"))
    effect = Bind(stale, "n1", {"x": "1"})
    cache.assume(effect)
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name, task.annotations) == (TaskStatus.RUNNING, "n2", {})
    assert used(cache, "n1") == Resource() and used(cache, "n2") == ONE
    cache.forget(effect)
    cache.bound_elsewhere(effect, "n2")
    assert (task.status, task.node_name) == (TaskStatus.RUNNING, "n2")
    assert used(cache, "n1") == Resource() and used(cache, "n2") == ONE


@pytest.mark.parametrize(
    ("event", "status"),
    [
        (bound(node_name="n2"), TaskStatus.RUNNING),
        (deleted(bound(node_name="n2")), TaskStatus.RELEASING),
        (None, None),
    ],
    ids=["then-the-bound-event", "then-its-deletion-begins", "then-it-is-deleted"],
)
def test_a_pod_bound_elsewhere_holds_its_room_there_until_the_events_show_it(
    event: Obj | None, status: TaskStatus | None
) -> None:
    """A 409 named n2 as p's node, not n1 as chosen: p is held on n2 (assumed, not
    pending: not tried again), n1's room is free again (news for the parked jobs), and
    events that do not show p on a node yet keep it so."""
    cache = cache_with(node("n1"), node("n2"), pending())
    effect = Bind(cache.tasks["default/p"].clone(), "n1", {"x": "1"})
    cache.assume(effect)
    generation = cache.generation
    cache.bound_elsewhere(effect, "n2")
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name) == (TaskStatus.BINDING, "n2")
    assert task.annotations == {}  # written with the bind to n1: not on the pod
    assert used(cache, "n1") == Resource() and used(cache, "n2") == ONE
    assert cache.generation > generation
    cache.bound_elsewhere(effect, "n2")  # idempotent
    cache.handle("Pod", "MODIFIED", pending())  # an older event, still without nodeName
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name) == (TaskStatus.BINDING, "n2")
    assert used(cache, "n1") == Resource() and used(cache, "n2") == ONE
    job = cache.snapshot().jobs["default/p"]
    assert [t.status for t in job.tasks.values()] == [TaskStatus.BINDING]
    if event is None:
        cache.handle("Pod", "DELETED", pending())
        assert "default/p" not in cache.tasks and used(cache, "n2") == Resource()
        return
    cache.handle("Pod", "MODIFIED", event)
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name) == (status, "n2")
    assert used(cache, "n1") == Resource() and used(cache, "n2") == ONE


def test_assume_and_forget_unknown_pods_are_ignored() -> None:
    cache = cache_with(node("n1"))
    for call in (cache.ledger.assume_bind, cache.ledger.assume_nomination):
        call("nobody", "n1")
    for forget in (
        cache.ledger.forget_bind,
        cache.ledger.assume_evict,
        cache.ledger.forget_evict,
        cache.ledger.forget_nomination,
    ):
        forget("nobody")
    cache.ledger.assume_phase("default/none", PodGroupPhase.RUNNING)
    assert cache.tasks == {} and used(cache) == Resource()


def test_assume_evict_then_deleted() -> None:
    cache = cache_with(node("n1"), bound())
    cache.ledger.assume_evict("default/p")
    assert cache.tasks["default/p"].status is TaskStatus.RELEASING
    assert cache.nodes["n1"].releasing == ONE and used(cache) == ONE
    cache.handle("Pod", "DELETED", bound())
    assert used(cache) == Resource() and cache.nodes["n1"].releasing == Resource()


def test_forget_evict_holds_the_room_again() -> None:
    cache = cache_with(node("n1"), bound())
    cache.ledger.assume_evict("default/p")
    cache.ledger.forget_evict("default/p")
    assert cache.tasks["default/p"].status is TaskStatus.RUNNING
    assert cache.nodes["n1"].releasing == Resource() and used(cache) == ONE


def test_assume_nomination_and_forget() -> None:
    cache = cache_with(node("n1"), pending())
    cache.ledger.assume_nomination("default/p", "n1")
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name, task.nominated_node) == (TaskStatus.PIPELINED, "n1", "n1")
    assert cache.nodes["n1"].nominated == ONE and used(cache) == Resource()
    cache.ledger.forget_nomination("default/p")
    assert (task.status, task.node_name) == (TaskStatus.PENDING, "")
    assert cache.nodes["n1"].nominated == Resource()


def test_pod_with_a_nominated_node_is_pipelined_there() -> None:
    raw = pending()
    raw["status"]["nominatedNodeName"] = "n1"
    cache = cache_with(node("n1"), raw)
    assert cache.tasks["default/p"].status is TaskStatus.PIPELINED
    assert cache.nodes["n1"].nominated == ONE


def test_assume_phase() -> None:
    cache = cache_with(pod_group("g"))
    cache.ledger.assume_phase("default/g", PodGroupPhase.INQUEUE)
    assert cache.snapshot().jobs["default/g"].phase is PodGroupPhase.INQUEUE


# Rejected objects ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "obj", "key", "message"),
    [
        (
            "Pod",
            pod("p", cpu="1..5"),
            "Pod default/p",
            "Pod default/p: spec.containers[0].resources.requests.cpu: malformed quantity '1..5'",
        ),
        (
            "Pod",
            pod("p", priority="high"),
            "Pod default/p",
            "Pod default/p: spec.priority: must be an integer",
        ),
        (
            "Node",
            {**node("n2"), "status": {"allocatable": {"cpu": "lots"}}},
            "Node n2",
            "Node n2: status.allocatable.cpu: malformed quantity 'lots'",
        ),
        (
            "Queue",
            queue("q", capability={"cpu": "-1"}),
            "Queue q",
            "Queue q: spec.capability.cpu: must not be negative",
        ),
        (
            "PodGroup",
            pod_group("g", priorityClassName="missing"),
            "PodGroup default/g",
            "no PriorityClass named 'missing'",
        ),
        (
            "PriorityClass",
            {"kind": "PriorityClass", "metadata": {"name": "pc"}, "value": "x"},
            "PriorityClass pc",
            "value: must be an integer",
        ),
        (
            "Pod",
            {"kind": "Pod", "metadata": {"namespace": "default"}},
            "Pod default/?",
            "malformed object",
        ),
    ],
    ids=[
        "pod-quantity",
        "pod-priority",
        "node-quantity",
        "queue-negative",
        "podgroup-priority-class",
        "priority-class-value",
        "pod-without-name",
    ],
)
def test_malformed_objects_are_rejected_without_raising(
    kind: str, obj: Obj, key: str, message: str
) -> None:
    cache = cache_with(node("n1"))
    cache.handle(kind, "ADDED", obj)
    assert key in cache.rejected
    assert message in cache.rejected[key]
    cache.snapshot()  # still usable


def test_a_corrected_object_leaves_rejected() -> None:
    cache = cache_with(node("n1"))
    cache.handle("Pod", "ADDED", pod("p", cpu="1..5"))
    assert "Pod default/p" in cache.rejected
    cache.handle("Pod", "MODIFIED", pending())
    assert cache.rejected == {}
    assert "default/p" in cache.tasks


def test_rejected_and_adjusted_objects_are_told_once_each() -> None:
    """What the loop logs: an object set aside, and a node whose absurd allocatable was
    capped, each once per reason; a corrected object is told no more."""
    cache = cache_with(node("n1"))
    cache.take_notices()
    cache.handle("Pod", "ADDED", pod("p", cpu="1..5"))
    cache.handle("Pod", "MODIFIED", pod("p", cpu="1..5"))
    cache.handle("Node", "ADDED", node("huge", memory="1000Ei"))
    cache.handle("Node", "MODIFIED", node("huge", memory="1000Ei"))
    notices = cache.take_notices()
    assert [(n.what, n.object) for n in notices] == [
        ("rejected", "Pod default/p"),
        ("adjusted", "Node huge"),
    ]
    assert "status.allocatable of memory above" in notices[1].reason
    assert cache.nodes["huge"].capped == ("memory",)
    cache.handle("Pod", "MODIFIED", pending())
    cache.handle("Node", "MODIFIED", node("huge", memory="64Gi"))
    assert cache.take_notices() == []
    assert cache.rejected == {} and cache.adjusted == {}
    cache.handle("Node", "MODIFIED", node("huge", memory="1000Ei"))
    assert [n.object for n in cache.take_notices()] == ["Node huge"]  # told again: news


def test_unknown_kinds_are_ignored() -> None:
    cache = cache_with(node("n1"))
    cache.handle("Deployment", "ADDED", {"metadata": {"name": "x"}})
    assert cache.rejected == {}
    assert set(cache.kinds) >= {"Pod", "Node", "PodGroup", "Queue", "PriorityClass"}


# Relist --------------------------------------------------------------------------------------


def test_replace_after_a_relist_removes_stale_objects() -> None:
    cache = cache_with(
        node("n1"), node("n2"), bound("a"), bound("b", "n2"), queue("old"), pod_group("g")
    )
    cache.replace("Pod", [bound("a")])
    assert sorted(cache.tasks) == ["default/a"]
    assert used(cache, "n2") == Resource()
    cache.replace("Node", [node("n1")])
    assert sorted(cache.nodes) == ["n1"]
    cache.replace("Queue", [queue("default")])
    assert sorted(cache.queues) == ["default"]
    cache.replace("PodGroup", [])
    assert cache.pod_groups == {}


def test_replace_removes_a_pod_recreated_under_the_same_name() -> None:
    cache = cache_with(node("n1"), bound("p"))
    fresh = pending("p")
    fresh["metadata"]["uid"] = "uid-2"
    cache.replace("Pod", [fresh])
    assert sorted(cache.tasks) == ["uid-2"]
    assert used(cache) == Resource()


# Labels changing on a live pod ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "read", "expected"),
    [
        ({L.PREEMPTABLE_LABEL: "false"}, lambda t: t.preemptable, False),
        ({L.TASK_ROLE_LABEL: "ps"}, lambda t: t.role, "ps"),
    ],
    ids=["preemptable", "role"],
)
def test_label_changes_are_seen(
    labels: dict[str, str], read: Callable[[Any], Any], expected: Any
) -> None:
    cache = cache_with(node("n1"), bound())
    cache.handle("Pod", "MODIFIED", bound(labels=labels))
    assert read(cache.tasks["default/p"]) == expected


# Snapshots -----------------------------------------------------------------------------------


def test_snapshot_isolation() -> None:
    cache = cache_with(
        queue("q"),
        node("n1"),
        node("n2"),
        bound("r"),
        pending("p"),
        pod_group("g", min_member=1),
        pending("w", group="g"),
    )

    def state() -> Any:
        return (
            {
                n: (x.used.to_dict(), x.nominated.to_dict(), sorted(x.tasks))
                for n, x in cache.nodes.items()
            },
            {u: (t.status, t.node_name) for u, t in cache.tasks.items()},
            {u: (j.phase, j.min_member, len(j.tasks)) for u, j in cache.pod_groups.items()},
            {q: (x.weight, x.state) for q, x in cache.queues.items()},
        )

    before = state()
    snap = cache.snapshot()
    p = snap.jobs["default/p"].tasks["default/p"]
    p.status, p.node_name = TaskStatus.ALLOCATED, "n2"
    snap.nodes["n2"].add_task(p)
    r = snap.nodes["n1"].tasks["default/r"]
    snap.nodes["n1"].remove_task(r)
    r.status = TaskStatus.RELEASING
    snap.jobs["default/g"].phase = PodGroupPhase.RUNNING
    snap.jobs["default/g"].min_member = 9
    snap.jobs["default/g"].tasks.clear()
    snap.queues["q"].weight = 7
    snap.nodes.pop("n1")
    # what changed tasks and nodes of a snapshot records them, as Session.move does
    snap.touched_tasks |= {p.uid, r.uid}
    snap.touched_nodes |= {"n1", "n2"}
    assert state() == before
    again = cache.snapshot()
    assert again.nodes["n2"].used == Resource()
    assert again.jobs["default/p"].tasks["default/p"].status is TaskStatus.PENDING


def test_snapshot_shares_task_objects_between_nodes_and_jobs() -> None:
    cache = cache_with(node("n1"), bound("r"))
    snap = cache.snapshot()
    assert snap.nodes["n1"].tasks["default/r"] is snap.jobs["default/r"].tasks["default/r"]
    assert list(snap.nodes) == sorted(snap.nodes)


@pytest.mark.parametrize(
    "spec",
    [{"tolerations": ["a"]}, {"nodeSelector": ["a"]}, {"containers": ["c"]}],
    ids=["toleration-not-map", "nodeSelector-not-map", "container-not-map"],
)
def test_malformed_shapes_are_rejected_without_raising(spec: Obj) -> None:
    cache = cache_with(node("n1"))
    cache.handle("Pod", "ADDED", pod("p", **spec))
    assert "Pod default/p" in cache.rejected


def _nominated_in_api(name: str, node_name: str) -> Obj:
    obj = pending(name)
    obj["status"]["nominatedNodeName"] = node_name
    return obj


@pytest.mark.parametrize(
    ("steps", "status", "node_name"),
    [
        # nominated, then the node goes: pending, on no node
        ([("assume", "n1"), ("delete-node", "n1")], TaskStatus.PENDING, ""),
        # nominated to a node that is not there: nothing held
        ([("delete-node", "n1"), ("assume", "n1")], TaskStatus.PENDING, ""),
        # the API says nominated to a node that is gone
        ([("delete-node", "n1"), ("api", "n1")], TaskStatus.PENDING, ""),
        # ... and to one that is there
        ([("api", "n2")], TaskStatus.PIPELINED, "n2"),
        # another node going changes nothing
        ([("assume", "n1"), ("delete-node", "n2")], TaskStatus.PIPELINED, "n1"),
    ],
)
def test_a_nomination_to_a_node_that_is_gone_holds_nothing(
    steps: list[tuple[str, str]], status: TaskStatus, node_name: str
) -> None:
    cache = cache_with(node("n1"), node("n2"), pending("p"))
    for step, arg in steps:
        if step == "assume":
            cache.ledger.assume_nomination("default/p", arg)
        elif step == "delete-node":
            cache.handle("Node", "DELETED", {"metadata": {"name": arg}})
        else:
            cache.handle("Pod", "MODIFIED", _nominated_in_api("p", arg))
    task = cache.tasks["default/p"]
    assert (task.status, task.node_name) == (status, node_name)
    assert all("default/p" not in n.tasks for n in cache.nodes.values()) or node_name
    cache.snapshot()  # a session can be opened on it: every nominated node exists


# What wakes the loop, and what it is news for --------------------------------------------

GATE = [{"name": "kueue.x-k8s.io/admission"}]
TWO_GATES = [*GATE, {"name": "example.com/quota"}]


@pytest.mark.parametrize(
    ("before", "event", "woke", "generation", "fresh"),
    [
        (None, pending("p"), True, False, {"default/p"}),
        (None, pending("p", schedulingGates=GATE), False, False, set()),
        (pending("p", schedulingGates=GATE), pending("p"), True, False, {"default/p"}),
        (pending("p", schedulingGates=TWO_GATES), pending("p", schedulingGates=GATE),
         False, False, set()),
        (pending("p", schedulingGates=GATE, group="g"), pending("p", group="g"),
         True, False, {"default/g"}),
        (None, pending("p", scheduler="default-scheduler"), True, True, set()),
        (pending("p", scheduler="default-scheduler", schedulingGates=GATE),
         pending("p", scheduler="default-scheduler"), False, False, set()),
    ],
    ids=[
        "new-pending-pod", "new-gated-pod", "last-gate-removed", "one-gate-of-two-removed",
        "gang-member-ungated", "other-schedulers-pod", "other-schedulers-pod-ungated",
    ],
)  # fmt: skip
def test_pod_events_wake_the_loop_and_make_jobs_fresh(
    before: Obj | None, event: Obj, woke: bool, generation: bool, fresh: set[str]
) -> None:
    """A pod becoming schedulable (new, or its last scheduling gate removed) wakes the loop
    and is news for its own job only (a parked gang may now be whole); a gated pod is no
    news at all."""
    cache = cache_with(node("n1", cpu="4"))
    if before is not None:
        cache.handle("Pod", "ADDED", before)
    cache.take_fresh_jobs()
    start = cache.generation
    wakes: list[bool] = []
    cache.on_change = lambda: wakes.append(True)
    cache.handle("Pod", "MODIFIED" if before is not None else "ADDED", event)
    assert bool(wakes) is woke
    assert (cache.generation != start) is generation
    assert cache.take_fresh_jobs() == fresh
