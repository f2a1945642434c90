"""Hierarchical queues (issue 11 point 1): the tree, shares water-filled down it, closed
queues, leaf queues only, a zero capability, and borrowing idle room (point 2)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.queue import QueueInfo
from scheduler.api.queue_tree import ROOT, queue_tree
from scheduler.config import PluginConfig
from scheduler.framework.effects import Bind
from scheduler.framework.session import Session, open_session
from scheduler.plugins.proportion import ProportionPlugin
from tests.builders import cache_with, node, pod, queue, session_with

Obj = dict[str, Any]


def pods_in(q: str, n: int, cpu: str = "1") -> list[Obj]:
    return [pod(f"{q}-{i}", cpu=cpu, memory=None, labels={L.QUEUE_LABEL: q}) for i in range(n)]


def plugin_of(nodes: list[Obj], pods: list[Obj], queues: list[Obj]) -> ProportionPlugin:
    session = session_with(
        nodes, pods, [PluginConfig("gang"), PluginConfig("proportion")], queues=queues
    )
    found = next(p for _, p in session.plugins if isinstance(p, ProportionPlugin))
    return found


# The tree ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parents", "closed", "children"),
    [
        ({"a": "", "b": "a", "c": "b"}, {}, {ROOT: ("a",), "a": ("b",), "b": ("c",)}),
        (
            {"a": "b", "b": "a", "c": "a", "d": ""},
            {
                "a": "its chain of parents makes a cycle: a -> b -> a",
                "b": "its chain of parents makes a cycle: a -> b -> a",
                "c": "its ancestor 'a' is closed: its chain of parents makes a cycle: a -> b -> a",
            },
            {ROOT: ("d",)},
        ),
        (
            {"a": "zz", "b": "a", "c": "b", "d": ""},
            {
                "a": "its parent queue 'zz' does not exist",
                "b": "its ancestor 'a' is closed: its parent queue 'zz' does not exist",
                "c": "its ancestor 'a' is closed: its parent queue 'zz' does not exist",
            },
            {ROOT: ("d",)},
        ),
        ({"a": "a"}, {"a": "its chain of parents makes a cycle: a -> a"}, {ROOT: ()}),
    ],
    ids=["chain", "cycle-and-below", "missing-parent-and-below", "self-parent"],
)
def test_queue_tree(
    parents: dict[str, str], closed: dict[str, str], children: dict[str, tuple[str, ...]]
) -> None:
    tree = queue_tree({n: QueueInfo(n, parent=p) for n, p in parents.items()})
    assert dict(tree.closed) == closed
    assert {k: v for k, v in tree.children.items() if v or k == ROOT} == children


@settings(max_examples=200, deadline=None)
@given(
    parents=st.dictionaries(
        st.sampled_from("abcdefg"), st.sampled_from(["", "a", "b", "c", "d", "x"]), max_size=7
    )
)
def test_every_queue_is_in_the_tree_or_closed(parents: dict[str, str]) -> None:
    """Any parent graph (cycles, missing parents) gives a tree: each queue is either
    closed, or reachable from the root exactly once, and never both."""
    tree = queue_tree({n: QueueInfo(n, parent=p) for n, p in parents.items()})
    placed = list(tree.top_down())
    assert len(placed) == len(set(placed))
    assert set(placed) | set(tree.closed) == set(parents)
    assert not set(placed) & set(tree.closed)


# Shares down the tree -----------------------------------------------------------------------

ENG = [
    queue("eng", weight=3),
    queue("eng-a", parent="eng"),
    queue("eng-b", parent="eng"),
    queue("research"),
]
SIXTEEN = [
    node("n1", cpu="8", memory="64Gi", pods=100),
    node("n2", cpu="8", memory="64Gi", pods=100),
]


@pytest.mark.parametrize(
    ("queues", "demand", "cpu"),
    [
        pytest.param(
            ENG,
            {"eng-a": 16, "eng-b": 16, "research": 16},
            {"eng": 12000, "eng-a": 6000, "eng-b": 6000, "research": 4000},
            id="the-issue's-example",
        ),
        pytest.param(
            ENG,
            {"eng-a": 16, "eng-b": 1, "research": 16},
            {"eng": 12000, "eng-a": 11000, "eng-b": 1000, "research": 4000},
            id="a-sibling's-leftover-stays-in-the-parent",
        ),
        pytest.param(
            [queue("eng", weight=3, capability={"cpu": "6"}), *ENG[1:]],
            {"eng-a": 16, "eng-b": 16, "research": 16},
            {"eng": 6000, "eng-a": 3000, "eng-b": 3000, "research": 10000},
            id="a-parent's-capability-caps-its-children",
        ),
        pytest.param(
            [
                queue("eng", weight=3),
                queue("eng-a", parent="eng", guarantee={"cpu": "10"}),
                queue("eng-b", parent="eng"),
                queue("research", weight=9),
            ],
            {"eng-a": 16, "eng-b": 16, "research": 16},
            # eng's floor is eng-a's guarantee: 10 first, then the rest by weight 3:9
            {"eng": 11500, "eng-a": 10750, "eng-b": 750, "research": 4500},
            id="a-guarantee-is-reserved-all-the-way-up",
        ),
        pytest.param(
            [
                queue("org"),
                queue("team", parent="org", weight=1),
                queue("dev", parent="team", weight=3),
                queue("ci", parent="team", weight=1),
                queue("ops", parent="org", weight=1, guarantee={"cpu": "2"}),
                queue("other", weight=1),
            ],
            {"dev": 16, "ci": 16, "ops": 16, "other": 16},
            # org's floor is ops' guarantee (2), given before the rest is split 1:1
            {
                "org": 9000,
                "team": 3500,
                "dev": 2625,
                "ci": 875,
                "ops": 5500,
                "other": 7000,
            },
            id="three-levels",
        ),
        pytest.param(
            [queue("a", capability={"cpu": "0"}), queue("b")],
            {"a": 16, "b": 16},
            {"a": 0, "b": 16000},
            id="a-zero-capability-closes-the-resource",
        ),
    ],
)
def test_deserved_down_the_tree(
    queues: list[Obj], demand: dict[str, int], cpu: dict[str, int]
) -> None:
    pods = [p for q, n in demand.items() for p in pods_in(q, n)]
    p = plugin_of(SIXTEEN, pods, queues)
    assert {q: p.deserved(q)["cpu"] for q in cpu} == cpu


def decide(objects: list[Obj]) -> Session:
    """One cycle of the default configuration on ``objects``."""
    ordered = sorted(objects, key=lambda o: o["kind"] != "Queue")
    session = open_session(cache_with(*ordered).snapshot(), app.resolve())
    for action in session.resolved.actions:
        session.run_action(action)
    return session


def bound(session: Session) -> dict[str, str]:
    return {e.task.name: e.node for e in session.effects if isinstance(e, Bind)}


def test_closed_and_parent_queues_schedule_nothing_and_say_why() -> None:
    session = decide(
        [
            *SIXTEEN,
            queue("orphan", parent="gone"),
            queue("parent"),
            queue("child", parent="parent"),
            *pods_in("orphan", 1),
            *pods_in("parent", 1),
            *pods_in("child", 1),
        ]
    )
    assert set(bound(session)) == {"child-0"}
    assert session.job_reasons["default/orphan-0"].message == (
        "queue 'orphan' is closed: its parent queue 'gone' does not exist"
    )
    assert session.job_reasons["default/parent-0"].message == (
        "queue 'parent' has child queues (child); pods and PodGroups must name a leaf queue"
    )


# No idle room (point 2) -------------------------------------------------------------------


def test_no_room_stays_idle_while_a_pod_could_use_it() -> None:
    """Three queues of weight 1 on 16 CPU of 1-CPU pods: each deserves 5.33 CPU, so 15
    pods fit within the shares; the last CPU goes to the queue furthest below its share
    (ties by name) instead of staying idle."""
    queues = [queue("a"), queue("b"), queue("c")]
    session = decide([*SIXTEEN, *queues, *pods_in("a", 16), *pods_in("b", 16), *pods_in("c", 16)])
    placed = bound(session)
    assert len(placed) == 16
    per_queue = {q: sum(1 for name in placed if name.startswith(f"{q}-")) for q in "abc"}
    assert sorted(per_queue.values()) == [5, 5, 6]


@pytest.mark.parametrize(
    ("queues", "expected"),
    [
        pytest.param(
            [queue("a", capability={"cpu": "4"}), queue("b", capability={"cpu": "4"})],
            {"a": 4, "b": 4},
            id="capability-caps-borrowing",
        ),
        pytest.param(
            [queue("p", capability={"cpu": "5"}), queue("a", parent="p"), queue("b")],
            {"a": 5, "b": 11},
            id="an-ancestor's-capability-caps-borrowing",
        ),
        pytest.param(
            [queue("a"), queue("b"), queue("g", guarantee={"cpu": "4"})],
            {"a": 6, "b": 6},
            id="others'-unused-guarantee-is-not-borrowed",
        ),
    ],
)
def test_borrowing_is_bounded(queues: list[Obj], expected: dict[str, int]) -> None:
    pods = [p for q in expected for p in pods_in(q, 16)]
    placed = bound(decide([*SIXTEEN, *queues, *pods]))
    assert {q: sum(1 for n in placed if n.startswith(f"{q}-")) for q in expected} == expected
