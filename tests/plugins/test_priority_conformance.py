"""Tests of the priority plugin (order by priority, then age, then name) and the conformance
plugin (pods that must never be victims)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.core_objects import task_from_pod
from scheduler.api.task import TaskInfo
from scheduler.config import PluginConfig
from scheduler.plugins.conformance import allowed_victims, protected
from tests.builders import node, pod, pod_group, session_with, task_of


def stamped(
    name: str, priority: int = 0, created: str = "2026-01-01T00:00:00Z", **kw: Any
) -> dict[str, Any]:
    raw = pod(name, priority=priority, **kw)
    raw["metadata"]["creationTimestamp"] = created
    return raw


EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


@pytest.mark.parametrize(
    ("pods", "order"),
    [
        ([stamped("a", 1), stamped("b", 5), stamped("c", 3)], ["b", "c", "a"]),
        ([stamped("a", 1, LATE), stamped("b", 1, EARLY)], ["b", "a"]),
        ([stamped("b"), stamped("c"), stamped("a")], ["a", "b", "c"]),
        (
            [
                stamped("z", 2, LATE),
                stamped("y", 1, EARLY),
                stamped("x", 2, LATE),
                stamped("w", 2, EARLY),
            ],
            ["w", "x", "z", "y"],
        ),
        ([stamped("a", -5), stamped("b", 0)], ["b", "a"]),
    ],
    ids=["priority", "then-older", "then-name", "all-three", "negative-priority"],
)
def test_job_and_task_order(pods: list[dict[str, Any]], order: list[str]) -> None:
    session = session_with([node("n1")], pods, [PluginConfig("priority")])
    jobs = session.order_jobs(list(reversed(list(session.jobs.values()))))
    assert [j.name for j in jobs] == order
    tasks = session.order_tasks([task_of(session, n) for n in reversed(order)])
    assert [t.name for t in tasks] == order


def test_task_order_within_a_gang_and_job_order_of_gangs() -> None:
    pods = [
        stamped("w-0", 1, group="g"),
        stamped("w-1", 9, group="g"),
        stamped("w-2", 9, LATE, group="g"),
        stamped("h-0", 0, group="h"),
    ]
    session = session_with(
        [node("n1")],
        pods,
        [PluginConfig("priority")],
        pod_groups=[pod_group("g", priorityClassName="hi"), pod_group("h")],
        priority_classes={"hi": 100},
    )
    g = session.jobs["default/g"]
    assert [t.name for t in session.order_tasks(list(g.tasks.values()))] == ["w-1", "w-2", "w-0"]
    assert [j.name for j in session.order_jobs(list(session.jobs.values()))] == ["g", "h"]


def t(name: str, **kw: Any) -> TaskInfo:
    return task_from_pod(pod(name, **kw))


def terminating() -> TaskInfo:
    raw = pod("gone", node="n1")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return task_from_pod(raw)


@pytest.mark.parametrize(
    ("task", "is_protected"),
    [
        (t("plain", node="n1"), False),
        (t("sys", ns=L.SYSTEM_NAMESPACE, node="n1"), True),
        (t("crit", priorityClassName="system-cluster-critical", node="n1"), True),
        (t("node-crit", priorityClassName="system-node-critical", node="n1"), True),
        (t("other-class", priorityClassName="high", node="n1"), False),
        (t("opt-out", labels={L.PREEMPTABLE_LABEL: "false"}, node="n1"), True),
        (t("opt-out-caps", labels={L.PREEMPTABLE_LABEL: "FALSE"}, node="n1"), True),
        (t("opt-in", labels={L.PREEMPTABLE_LABEL: "true"}, node="n1"), False),
        (terminating(), True),
    ],
    ids=[
        "plain",
        "kube-system",
        "system-cluster-critical",
        "system-node-critical",
        "other-class",
        "preemptable-false",
        "preemptable-FALSE",
        "preemptable-true",
        "terminating",
    ],
)
def test_protected(task: TaskInfo, is_protected: bool) -> None:
    assert protected(task) is is_protected
    assert allowed_victims(t("preemptor"), [task]) == ([] if is_protected else [task])


def test_conformance_filters_victims_through_the_session() -> None:
    pods = [
        pod("victim", node="n1"),
        pod("sys", ns="kube-system", node="n1"),
        pod("keep", node="n1", labels={L.PREEMPTABLE_LABEL: "false"}),
        pod("p", priority=9),
    ]
    session = session_with([node("n1")], pods, [PluginConfig("conformance")])
    candidates = [
        task_of(session, "victim"),
        task_of(session, "sys", "kube-system"),
        task_of(session, "keep"),
    ]
    assert [v.name for v in session.victims(task_of(session, "p"), candidates)] == ["victim"]
