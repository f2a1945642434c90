"""Tests of scheduler.plugins.proportion: water-filling, deserved shares, queue order,
allocatable, overused and enqueueable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api import labels as L
from scheduler.api.resource import Resource
from scheduler.config import PluginConfig
from scheduler.framework.extension_points import Vote
from scheduler.framework.session import Session
from scheduler.plugins.proportion import ProportionPlugin, water_fill
from tests.builders import (
    cached_session,
    node,
    pod,
    pod_group,
    queue,
    session_with,
    task_of,
)

Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("total", "demands", "weights", "floors", "expected"),
    [
        (10, {"a": 10, "b": 10}, {"a": 1, "b": 1}, {}, {"a": 5, "b": 5}),
        (9, {"a": 10, "b": 10}, {"a": 2, "b": 1}, {}, {"a": 6, "b": 3}),
        (10, {"a": 2, "b": 10}, {"a": 1, "b": 1}, {}, {"a": 2, "b": 8}),
        (10, {"a": 2, "b": 3}, {"a": 1, "b": 1}, {}, {"a": 2, "b": 3}),
        # the unit that cannot be split by weight still goes to someone (ties by name)
        (10, {"a": 10, "b": 10, "c": 10}, {"a": 1, "b": 1, "c": 1}, {}, {"a": 4, "b": 3, "c": 3}),
        (10, {"a": 10, "b": 10}, {"a": 1, "b": 1}, {"a": 6}, {"a": 8, "b": 2}),
        (10, {"a": 3, "b": 10}, {"a": 1, "b": 1}, {"a": 6}, {"a": 3, "b": 7}),
        (10, {"a": 10, "b": 10}, {"a": 0, "b": 1}, {"a": 4}, {"a": 4, "b": 6}),
        (10, {"a": 10, "b": 10}, {"a": 0, "b": 0}, {}, {"a": 0, "b": 0}),
        (0, {"a": 10}, {"a": 1}, {}, {"a": 0}),
        (7, {}, {}, {}, {}),
        (100, {"b": 60, "a": 60}, {"a": 1, "b": 3}, {}, {"a": 40, "b": 60}),
    ],
    ids=[
        "equal",
        "weights-2-1",
        "demand-caps",
        "everyone-satisfied",
        "indivisible-rest",
        "floor-first",
        "floor-capped-by-demand",
        "weight-zero-keeps-floor",
        "all-weight-zero",
        "nothing-to-share",
        "no-queues",
        "redistributes-what-a-capped-queue-leaves",
    ],
)
def test_water_fill(
    total: int,
    demands: dict[str, int],
    weights: dict[str, int],
    floors: dict[str, int],
    expected: dict[str, int],
) -> None:
    assert water_fill(total, demands, weights, floors) == expected


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(0, 10_000),
    queues=st.lists(
        st.tuples(st.integers(0, 5_000), st.integers(0, 5), st.integers(0, 3_000)),
        min_size=1,
        max_size=6,
    ),
)
def test_water_fill_properties(total: int, queues: list[tuple[int, int, int]]) -> None:
    names = [f"q{i}" for i in range(len(queues))]
    demands = {n: d for n, (d, _, _) in zip(names, queues, strict=True)}
    weights = {n: w for n, (_, w, _) in zip(names, queues, strict=True)}
    floors = {n: f for n, (_, _, f) in zip(names, queues, strict=True)}
    got = water_fill(total, demands, weights, floors)
    assert got == water_fill(total, demands, weights, floors)  # deterministic
    given_floors = sum(min(floors[n], demands[n]) for n in names)
    assert sum(got.values()) <= max(total, given_floors)
    for n in names:
        assert min(floors[n], demands[n]) <= got[n] <= demands[n]
    left = total - sum(got.values())
    hungry = [n for n in names if got[n] < demands[n] and weights[n] > 0]
    if left > 0 and hungry:
        # stops only when no hungry queue would get a whole unit in another round
        weight = sum(weights[n] for n in hungry)
        assert all(left * weights[n] < weight for n in hungry)


# Deserved shares in a session -------------------------------------------------------------


def plugin(session: Session) -> ProportionPlugin:
    found = next(p for _, p in session.plugins if p.name == "proportion")
    assert isinstance(found, ProportionPlugin)
    return found


def pods_in(q: str, n: int, cpu: str = "1", prefix: str = "", **kw: Any) -> list[Obj]:
    """``n`` lone pods ``<q>-<prefix><i>`` in queue ``q``."""
    return [
        pod(f"{q}-{prefix}{i}", cpu=cpu, memory=None, labels={L.QUEUE_LABEL: q}, **kw)
        for i in range(n)
    ]


def open_(nodes: Sequence[Obj], pods: Sequence[Obj], queues: Sequence[Obj], **kw: Any) -> Session:
    return session_with(
        nodes, pods, [PluginConfig("gang"), PluginConfig("proportion")], queues=queues, **kw
    )


CLUSTER = [node("n1", cpu="3", memory="8Gi", pods=50), node("n2", cpu="3", memory="8Gi", pods=50)]


@pytest.mark.parametrize(
    ("queues", "pods", "cpu"),
    [
        (
            [queue("a", weight=2), queue("b", weight=1)],
            pods_in("a", 10) + pods_in("b", 10),
            {"a": 4000, "b": 2000, "default": 0},
        ),
        (
            [queue("a", weight=1, capability={"cpu": "1"}), queue("b")],
            pods_in("a", 10) + pods_in("b", 10),
            {"a": 1000, "b": 5000, "default": 0},
        ),
        (
            [queue("a", guarantee={"cpu": "4"}), queue("b", weight=3)],
            pods_in("a", 10) + pods_in("b", 10),
            {"a": 4500, "b": 1500, "default": 0},
        ),
        (
            [queue("a"), queue("b")],
            pods_in("a", 1) + pods_in("b", 10),
            {"a": 1000, "b": 5000, "default": 0},
        ),
        (
            [queue("a", deserved={"cpu": "2"}), queue("b")],
            pods_in("a", 10) + pods_in("b", 10),
            {"a": 2000, "b": 4000, "default": 0},
        ),
        (
            [queue("a", deserved={"cpu": "2"}), queue("b")],
            pods_in("a", 1) + pods_in("b", 10),
            {"a": 1000, "b": 5000, "default": 0},
        ),
        (
            [queue("a"), queue("b")],
            pods_in("a", 2, node="n1") + pods_in("b", 10),
            {"a": 2000, "b": 4000, "default": 0},
        ),
    ],
    ids=[
        "weights-2-1-contended",
        "capability-caps",
        "guarantee-honoured",
        "demand-caps",
        "explicit-deserved",
        "explicit-deserved-capped-by-demand",
        "running-pods-are-demand",
    ],
)
def test_deserved_cpu(queues: list[Obj], pods: list[Obj], cpu: dict[str, int]) -> None:
    p = plugin(open_(CLUSTER, pods, queues))
    assert {q: p.deserved(q)["cpu"] for q in cpu} == cpu


def test_capacity_excludes_unready_nodes_and_other_schedulers_pods() -> None:
    nodes = [
        *CLUSTER,
        node("n3", cpu="100", ready=False),
        node("n4", cpu="100", unschedulable=True),
    ]
    pods = [
        pod("foreign", cpu="2", memory=None, node="n1", scheduler="default-scheduler"),
        *pods_in("a", 10),
    ]
    # through the cache: pods of other schedulers use capacity but belong to no queue
    session = cached_session(
        [*nodes, *pods, queue("a")], [PluginConfig("gang"), PluginConfig("proportion")]
    )
    p = plugin(session)
    assert p.total["cpu"] == 4000
    assert p.deserved("a")["cpu"] == 4000


def test_a_single_gpu_is_deserved_by_someone() -> None:
    nodes = [node("n1", cpu="8", memory="8Gi", gpus=1)]
    gpu = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    pods = [
        pod("pa", labels={L.QUEUE_LABEL: "a"}, **gpu),
        pod("pb", labels={L.QUEUE_LABEL: "b"}, **gpu),
    ]
    session = open_(nodes, pods, [queue("a"), queue("b")])
    p = plugin(session)
    assert p.deserved("a")["nvidia.com/gpu"] + p.deserved("b")["nvidia.com/gpu"] == 1
    assert any(
        session.queue_allocatable(session.queues[q], task_of(session, f"p{q}")) for q in ("a", "b")
    )


def test_queue_order_by_priority_then_dominant_share() -> None:
    queues = [queue("a"), queue("b"), queue("c", priority=5)]
    pods = (
        pods_in("a", 2, prefix="r", node="n1")
        + pods_in("a", 5)
        + pods_in("b", 5)
        + pods_in("c", 1, prefix="r", node="n2")
        + pods_in("c", 5)
    )
    session = open_(CLUSTER, pods, queues)
    p = plugin(session)
    shares = {q: p.attrs[q].share() for q in ("a", "b", "c")}
    assert shares["b"] == 0.0 and shares["a"] > shares["c"] > 0.0
    order = sorted(session.queues.values(), key=session.queue_key)
    # "default" deserves nothing and holds nothing: at its share (1, as "a" is), after the
    # queues below theirs (Volcano's best-effort queues: capacity's updateQueueAttrShare)
    assert [q.name for q in order] == ["c", "b", "a", "default"]


def test_allocatable_and_overused_follow_the_deserved_share() -> None:
    big = [node("n1", cpu="6", memory="8Gi"), node("n2", cpu="6", memory="8Gi")]
    session = open_(
        big, pods_in("a", 20) + pods_in("b", 3, cpu="2"), [queue("a", weight=2), queue("b")]
    )
    a, b = session.queues["a"], session.queues["b"]
    p = plugin(session)
    assert (p.deserved("a")["cpu"], p.deserved("b")["cpu"]) == (8000, 4000)
    assert not session.queue_overused(b)
    with session.statement() as stmt:
        assert session.queue_allocatable(b, task_of(session, "b-0"))
        stmt.allocate(task_of(session, "b-0"), "n1")
        assert session.queue_allocatable(b, task_of(session, "b-1"))
        stmt.allocate(task_of(session, "b-1"), "n1")
        assert p.allocated("b")["cpu"] == 4000
        assert not session.queue_allocatable(b, task_of(session, "b-2"))
        assert session.queue_allocatable(a, task_of(session, "a-0"))
        # overused only once every dimension of the share is used (pods included)
        assert p.deserved("b")["pods"] == 3
        assert not session.queue_overused(b)
        stmt.allocate(task_of(session, "b-2"), "n2")  # the action would not; the session may
        assert session.queue_overused(b)
        assert not session.queue_overused(a)
    assert p.allocated("b")["cpu"] == 0  # discarded


def test_a_queue_with_no_demand_is_never_overused_nor_allocatable() -> None:
    session = open_(CLUSTER, pods_in("a", 1), [queue("a"), queue("idle")])
    idle = session.queues["idle"]
    assert plugin(session).deserved("idle") == Resource()
    assert not session.queue_overused(idle)
    assert not session.queue_allocatable(idle, task_of(session, "a-0"))


@pytest.mark.parametrize(
    ("queues", "groups", "pods", "vote"),
    [
        ([queue("a")], [pod_group("g", queue="a")], [], Vote.PERMIT),
        ([queue("a", state="Closed")], [pod_group("g", queue="a")], [], Vote.REJECT),
        ([queue("a")], [pod_group("g", queue="a", min_resources={"cpu": "6"})], [], Vote.PERMIT),
        ([queue("a")], [pod_group("g", queue="a", min_resources={"cpu": "7"})], [], Vote.REJECT),
        (
            [queue("a", capability={"cpu": "2"})],
            [pod_group("g", queue="a", min_resources={"cpu": "3"})],
            [],
            Vote.REJECT,
        ),
        (
            [queue("a"), queue("b", guarantee={"cpu": "4"})],
            [pod_group("g", queue="a", min_resources={"cpu": "3"})],
            [],
            Vote.REJECT,
        ),
        (
            [queue("a")],
            [
                pod_group("g", queue="a", min_resources={"cpu": "4"}),
                pod_group("h", queue="a", min_resources={"cpu": "3"}, phase="Inqueue"),
            ],
            [],
            Vote.REJECT,
        ),
        (
            [queue("a")],
            [pod_group("g", queue="a", min_resources={"cpu": "3"})],
            pods_in("a", 3, node="n1"),
            Vote.PERMIT,
        ),
        (
            [queue("a")],
            [pod_group("g", queue="a", min_resources={"cpu": "4"})],
            pods_in("a", 3, node="n1"),
            Vote.REJECT,
        ),
        ([queue("a")], [pod_group("g", queue="nowhere")], [], Vote.REJECT),
    ],
    ids=[
        "no-min-resources",
        "closed-queue",
        "fits-cluster",
        "exceeds-cluster",
        "exceeds-capability",
        "others-guarantee-reserved",
        "inqueue-gang-reserves",
        "fits-beside-allocated",
        "allocated-leaves-too-little",
        "unknown-queue",
    ],
)
def test_enqueueable(queues: list[Obj], groups: list[Obj], pods: list[Obj], vote: Vote) -> None:
    session = open_(CLUSTER, pods, queues, pod_groups=groups)
    job = session.jobs["default/g"]
    assert plugin(session).enqueueable(job) is vote


def test_enqueued_gang_reserves_its_min_resources() -> None:
    groups = [
        pod_group("g", queue="a", min_resources={"cpu": "4"}),
        pod_group("h", queue="a", min_resources={"cpu": "4"}),
    ]
    session = open_(CLUSTER, [], [queue("a")], pod_groups=groups)
    p = plugin(session)
    g, h = session.jobs["default/g"], session.jobs["default/h"]
    assert p.enqueueable(h) is Vote.PERMIT
    session.job_enqueued(g)
    assert p.attrs["a"].reserved["cpu"] == 4000
    assert p.enqueueable(h) is Vote.REJECT
