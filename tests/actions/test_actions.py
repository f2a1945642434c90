"""Tests of the enqueue, allocate and backfill actions, run on sessions built through the
cache as the loop builds them, with the default plugins."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api import reasons
from scheduler.api.holds import Hold, HoldKind, QueueView
from scheduler.api.job import PodGroupPhase
from scheduler.api.reasons import Reason, ReasonCode
from scheduler.api.task import TaskStatus
from scheduler.config import SchedulerConfiguration, parse_configuration
from scheduler.framework.effects import Bind, SetPhase
from scheduler.framework.session import Session
from tests.builders import cache_with, cached_session, node, pod, pod_group, queue, taint, task_of

Obj = dict[str, Any]


def configuration(**fields: Any) -> SchedulerConfiguration:
    """The defaults, with the actions of issue 2 only (no preemption) unless told."""
    fields.setdefault("actions", ["enqueue", "allocate", "backfill"])
    return parse_configuration(
        {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", **fields}
    )


CORE = configuration()


def run(
    objects: list[Obj], config: SchedulerConfiguration = CORE, gated: frozenset[str] = frozenset()
) -> Session:
    """Open a session through the cache with ``config`` and run its actions once, as one
    cycle of the loop does."""
    session = cached_session(objects, config=config)
    if gated:
        session.snapshot.queue = QueueView({j: Hold(HoldKind.EVICTIONS) for j in gated})
    for action in session.resolved.actions:
        session.run_action(action)
    return session


def binds(session: Session) -> dict[str, str]:
    return {e.task.key: e.node for e in session.effects if isinstance(e, Bind)}


def reason(session: Session, name: str) -> str:
    task = task_of(session, name)
    told = session.task_reasons.get(task.uid) or session.job_reasons.get(task.job_id)
    return told.message if told is not None else ""


def gang(
    name: str,
    n: int,
    cpu: str = "1",
    roles: list[str] | None = None,
    memory: str | None = None,
    **group: Any,
) -> list[Obj]:
    pods = [
        pod(f"{name}-{i}", cpu=cpu, memory=memory, group=name, role=roles[i] if roles else None)
        for i in range(n)
    ]
    return [pod_group(name, **group), *pods]


NODES_2x2 = [node("n1", cpu="2", memory="8Gi"), node("n2", cpu="2", memory="8Gi")]


# Allocate -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "bound", "phase"),
    [
        (gang("g", 3, min_member=3), 3, "Inqueue"),
        (gang("g", 5, min_member=3), 4, "Inqueue"),
        (gang("g", 5, min_member=5), 0, "Inqueue"),
        (gang("g", 3, min_member=3, min_resources={"cpu": "5"}), 0, "Pending"),
        (gang("g", 3, min_member=3, min_resources={"cpu": "3"}), 3, "Inqueue"),
    ],
    ids=[
        "fits",
        "extra-members-fill-room",
        "too-big",
        "min-resources-exceed-cluster",
        "min-resources-fit",
    ],
)
def test_gang_in_full_or_not_at_all(objects: list[Obj], bound: int, phase: str) -> None:
    session = run([*NODES_2x2, *objects])
    assert len(binds(session)) == bound
    job = session.jobs["default/g"]
    assert job.phase.value == phase
    phases = [e.phase for e in session.effects if isinstance(e, SetPhase)]
    assert phases == ([PodGroupPhase.INQUEUE] if phase == "Inqueue" else [])
    if bound == 0:
        assert all(t.status is TaskStatus.PENDING for t in job.tasks.values())
        assert session.job_reasons["default/g"]


def test_gang_that_does_not_fit_says_why() -> None:
    """3 pods of 1500m ask 4.5 CPU in all, more than the 4 CPU free: the gang fails fast,
    without a search. With pods of 1200m (3.6 CPU in all, but one per node) the search
    runs and says which pod found no node."""
    session = run([*NODES_2x2, *gang("g", 3, cpu="1500m", min_member=3)])
    fast = (
        "the cluster has 4 CPU free in all, 4500m CPU needed: too little for 3 pods of "
        "1500m CPU, the least this gang can start with"
    )
    assert session.job_reasons["default/g"] == Reason(ReasonCode.GANG_TOO_LARGE, fast)
    assert reason(session, "g-0") == fast
    session = run([*NODES_2x2, *gang("g", 3, cpu="1200m", min_member=3)])
    assert session.job_reasons["default/g"].message == (
        "2/3 tasks of gang default/g can be placed, minMember is 3; "
        "default/g-2: 0/2 nodes are available: 2 Insufficient cpu."
    )
    assert reason(session, "g-2") == "0/2 nodes are available: 2 Insufficient cpu."
    assert reason(session, "g-0").startswith("2/3 tasks of gang default/g can be placed")


@pytest.mark.parametrize(
    ("nodes", "pods", "said"),
    [
        pytest.param(
            [node("n1", cpu="3", memory="64Gi")],
            [pod("busy", cpu="3", memory="12Gi", node="n1")],
            "the cluster has 0 CPU free in all, 9 CPU needed: too little for 3 pods of "
            "3 CPU, 1Gi memory",
            id="cpu-none-free-memory-plenty",
        ),
        pytest.param(
            [node("n1", cpu="16", memory="2Gi")],
            [],
            "the cluster has 2Gi memory free in all, 3Gi memory needed: too little for 3 pods "
            "of 3 CPU, 1Gi memory",
            id="memory-short-cpu-plenty",
        ),
        pytest.param(
            [node("n1", cpu="4", memory="2Gi")],
            [],
            "the cluster has 4 CPU free in all, 9 CPU needed and 2Gi memory free in all, "
            "3Gi memory needed: too little for 3 pods of 3 CPU, 1Gi memory",
            id="both-short",
        ),
    ],
)
def test_a_gang_too_large_for_the_free_room_names_what_is_short(
    nodes: list[Obj], pods: list[Obj], said: str
) -> None:
    """Issue 38 point 3: the live page's example said "the cluster has 52Gi memory free in
    all, too little for 3 pods of 3 CPU, 1Gi memory" when CPU was what was short (none
    free, so left out of the sum). The reason names each resource the gang lacks, with
    what is free and what it needs, zero included, and nothing it does not lack."""
    session = run([*nodes, *pods, *gang("g", 3, cpu="3", memory="1Gi", min_member=3)])
    told = session.job_reasons["default/g"]
    assert told.code is ReasonCode.GANG_TOO_LARGE
    assert told.message == f"{said}, the least this gang can start with"


@pytest.mark.parametrize(
    ("roles", "ps_cpu", "bound", "why"),
    [
        (["ps", "worker", "worker"], "1", 3, ""),
        (
            ["worker", "worker", "worker"],
            "1",
            0,
            "has 0 pod(s) of role 'ps', fewer than its minTaskMember 1",
        ),
        (["ps", "worker", "worker"], "3", 0, "too little for 3 pods"),
    ],
    ids=["roles-met", "no-ps-pod", "ps-does-not-fit"],
)
def test_min_task_member(roles: list[str], ps_cpu: str, bound: int, why: str) -> None:
    objects = gang("g", 3, roles=roles, min_member=3, min_task_member={"ps": 1, "worker": 2})
    for raw in objects[1:]:
        if raw["metadata"]["labels"].get(L.TASK_ROLE_LABEL) == "ps":
            raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = ps_cpu
    session = run([*NODES_2x2, *objects])
    assert len(binds(session)) == bound
    if why:
        assert why in session.job_reasons["default/g"].message


def test_enough_workers_but_role_short_is_not_bound() -> None:
    # minMember 2 is met by workers alone, but minTaskMember asks for one ps, which cannot fit
    objects = gang(
        "g", 3, roles=["worker", "worker", "ps"], min_member=2, min_task_member={"ps": 1}
    )
    objects[3]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    session = run([*NODES_2x2, *objects])
    assert binds(session) == {}


def lone(name: str, q: str, cpu: str = "1", **kw: Any) -> Obj:
    return pod(name, cpu=cpu, memory=None, labels={L.QUEUE_LABEL: q}, **kw)


def test_queue_capability_caps_allocation() -> None:
    pods = [lone(f"p{i}", "capped") for i in range(4)]
    session = run([*NODES_2x2, queue("capped", capability={"cpu": "2"}), *pods])
    assert len(binds(session)) == 2
    assert reason(session, "p3") == "queue 'capped' has no room left within its share"


def test_weights_split_a_contended_cluster() -> None:
    nodes = [node(f"n{i}", cpu="2", memory="8Gi") for i in range(3)]
    pods = [lone(f"a{i}", "a") for i in range(6)] + [lone(f"b{i}", "b") for i in range(6)]
    session = run([*nodes, queue("a", weight=2), queue("b", weight=1), *pods])
    per_queue = Counter(key.split("/")[1][0] for key in binds(session))
    assert per_queue == {"a": 4, "b": 2}


def test_no_node_fits_reason() -> None:
    session = run([*NODES_2x2, pod("big", cpu="3", memory=None)])
    assert binds(session) == {}
    assert reason(session, "big") == "0/2 nodes are available: 2 Insufficient cpu."


@pytest.mark.parametrize(
    ("extra", "bound"),
    [
        ({}, {}),
        (
            {
                "tolerations": [
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "gpu",
                        "effect": "NoSchedule",
                    }
                ]
            },
            {"default/p": "n1"},
        ),
        ({"tolerations": [{"operator": "Exists"}]}, {"default/p": "n1"}),
    ],
    ids=["untolerated", "tolerated", "tolerates-everything"],
)
def test_taints(extra: Obj, bound: dict[str, str]) -> None:
    nodes = [node("n1", taints=["dedicated=gpu:NoSchedule"])]
    session = run([*nodes, pod("p", **extra)])
    assert binds(session) == bound
    if not bound:
        assert reason(session, "p") == "0/1 nodes are available: 1 node(s) had untolerated taint."


def test_backfill_places_best_effort_pods_on_a_full_cluster() -> None:
    full = [pod(f"r{i}", cpu="2", memory=None, node=f"n{i + 1}") for i in range(2)]
    session = run(
        [*NODES_2x2, *full, pod("be", cpu=None, memory=None), pod("needy", cpu="1", memory=None)]
    )
    assert set(binds(session)) == {"default/be"}
    assert "Insufficient cpu" in reason(session, "needy")


def test_allocate_alone_leaves_best_effort_pods() -> None:
    session = run(
        [*NODES_2x2, pod("be", cpu=None, memory=None)],
        configuration(actions=["enqueue", "allocate"]),
    )
    assert binds(session) == {}


@pytest.mark.parametrize(
    ("objects", "why"),
    [
        ([pod("orphan", group="missing")], "pod group default/missing does not exist"),
        ([lone("p", "nowhere")], "queue 'nowhere' does not exist"),
        ([queue("shut", state="Closed"), lone("p", "shut")], "queue 'shut' is Closed"),
    ],
    ids=["missing-pod-group", "missing-queue", "closed-queue"],
)
def test_jobs_that_cannot_be_tried_say_why(objects: list[Obj], why: str) -> None:
    session = run([*NODES_2x2, *objects])
    assert binds(session) == {}
    assert why in [r.message for r in session.job_reasons.values()]


def test_gated_jobs_are_skipped_and_say_what_they_wait_for() -> None:
    session = run([*NODES_2x2, pod("p")], gated=frozenset({"default/p"}))
    assert binds(session) == {}
    assert session.job_reasons == {"default/p": reasons.waiting_for_preemption()}
    assert set(session.task_reasons.values()) == {reasons.waiting_for_job_preemption()}
    assert session.job_reasons["default/p"].code is ReasonCode.WAITING_FOR_PREEMPTION


def test_nominated_node_is_tried_first() -> None:
    nominee = pod("p")
    nominee["status"]["nominatedNodeName"] = "n2"
    session = run([*NODES_2x2, nominee])
    assert binds(session) == {"default/p": "n2"}


def test_pending_pod_group_is_not_allocated_without_enqueue() -> None:
    config = configuration(actions=["allocate"])
    session = run([*NODES_2x2, *gang("g", 2, min_member=2)], config)
    assert binds(session) == {}
    session = run([*NODES_2x2, *gang("g", 2, min_member=2, phase="Inqueue")], config)
    assert len(binds(session)) == 2


def test_enqueue_admits_most_important_gang_when_room_is_short() -> None:
    objects = [
        *NODES_2x2,
        *gang("low", 1, min_member=1, min_resources={"cpu": "3"}),
        *gang("high", 1, min_member=1, min_resources={"cpu": "3"}, priorityClassName="hi"),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "hi"},
            "value": 100,
        },
    ]
    session = run(objects)
    assert session.jobs["default/high"].phase is PodGroupPhase.INQUEUE
    assert session.jobs["default/low"].phase is PodGroupPhase.PENDING
    told = session.job_reasons["default/low"]
    assert "exceed the cluster's idle resources (cpu)" in told.message
    assert told.code is ReasonCode.MIN_RESOURCES_EXCEED_IDLE


def test_binpack_and_spread() -> None:
    pods = [pod(f"p{i}", cpu="500m", memory=None) for i in range(3)]
    nodes = [node("n1", cpu="4", memory="8Gi"), node("n2", cpu="4", memory="8Gi")]
    spread = Counter(binds(run([*nodes, *pods])).values())
    assert sorted(spread.values()) == [1, 2]
    binpack = configuration(
        tiers=[
            {"plugins": [{"name": "priority"}, {"name": "gang"}]},
            {
                "plugins": [
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {
                        "name": "nodeorder",
                        "arguments": {"mostAllocatedWeight": 1, "leastAllocatedWeight": 0},
                    },
                ]
            },
        ],
    )
    packed = Counter(binds(run([*nodes, *pods], binpack)).values())
    assert list(packed.values()) == [3]


def test_a_cycle_decides_nothing_twice() -> None:
    """After the cache assumes a cycle's binds, the next cycle binds nothing more."""
    objects = [*NODES_2x2, *gang("g", 3, min_member=3), pod("p")]
    cache = cache_with(*sorted(objects, key=lambda o: o["kind"] != "Node"))
    from scheduler.app import resolve
    from scheduler.framework.session import open_session

    resolved = resolve(CORE)
    first = open_session(cache.snapshot(), resolved)
    for action in resolved.actions:
        action.execute(first)
    for effect in first.effects:
        if isinstance(effect, Bind):
            cache.ledger.assume_bind(effect.task.uid, effect.node)
        elif isinstance(effect, SetPhase):
            cache.ledger.assume_phase(effect.job.uid, effect.phase)
    assert len(binds(first)) == 4
    second = open_session(cache.snapshot(), resolved)
    for action in resolved.actions:
        action.execute(second)
    assert second.effects == []


def test_taint_builder_sanity() -> None:
    assert taint("a=b:NoSchedule") == {"key": "a", "value": "b", "effect": "NoSchedule"}


def test_role_short_reason_names_the_role() -> None:
    objects = gang(
        "g",
        4,
        roles=["ps", "worker", "worker", "worker"],
        min_member=3,
        min_task_member={"ps": 1, "worker": 2},
    )
    objects[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    session = run([*NODES_2x2, *objects])
    assert binds(session) == {}
    assert "ps" in session.job_reasons["default/g"].message
    assert "minTaskMember" in session.job_reasons["default/g"].message


def test_queue_reason_survives_the_default_actions() -> None:
    pods = [lone(f"p{i}", "capped") for i in range(3)]
    session = run(
        [*NODES_2x2, queue("capped", capability={"cpu": "2"}), *pods], SchedulerConfiguration()
    )
    assert len(binds(session)) == 2
    assert "queue 'capped'" in reason(session, "p2")


def test_a_single_free_gpu_is_used_by_one_of_two_queues() -> None:
    gpu = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    objects = [
        node("n1", cpu="8", memory="8Gi", gpus=1),
        queue("a"),
        queue("b"),
        pod("pa", labels={L.QUEUE_LABEL: "a"}, **gpu),
        pod("pb", labels={L.QUEUE_LABEL: "b"}, **gpu),
    ]
    assert len(binds(run(objects))) == 1
