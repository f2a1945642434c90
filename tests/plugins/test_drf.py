"""Tests of scheduler.plugins.drf and drf_hierarchy: jobs by dominant share, the
preemption rule, and hierarchical DRF over the queue tree (as Volcano's drf plugin)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import PluginConfig
from scheduler.framework.extension_points import VICTIMS
from scheduler.framework.session import Session
from scheduler.plugins import drf_hierarchy as hdrf
from scheduler.plugins.drf_hierarchy import UNRANKED, Node, dominant_share
from tests.builders import node, pod, pod_group, queue, session_with, task_of


def session(objects: list[Any], **arguments: Any) -> Session:
    kinds: dict[str, list[Any]] = {}
    for o in objects:
        kinds.setdefault(o["kind"], []).append(o)
    return session_with(
        kinds.get("Node", []),
        kinds.get("Pod", []),
        [PluginConfig("drf", arguments)],
        pod_groups=kinds.get("PodGroup", []),
        queues=kinds.get("Queue", []),
    )


def job_pods(
    group: str, n: int, *, cpu: str = "1", memory: str | None = None, **kw: Any
) -> list[Any]:
    return [pod(f"{group}-{i}", group=group, cpu=cpu, memory=memory, **kw) for i in range(n)]


@pytest.mark.parametrize(
    ("allocated", "total", "share"),
    [
        ({"cpu": 2}, {"cpu": 10, "memory": 10}, 0.2),
        ({"cpu": 2, "memory": 5}, {"cpu": 10, "memory": 10}, 0.5),
        ({"nvidia.com/gpu": 1}, {"cpu": 10}, 0.0),
        ({}, {"cpu": 10}, 0.0),
    ],
    ids=["one-resource", "the-largest", "resources-the-cluster-lacks-are-not-counted", "nothing"],
)
def test_dominant_share(allocated: dict[str, int], total: dict[str, int], share: float) -> None:
    assert dominant_share(allocated, total) == pytest.approx(share)


def test_jobs_by_share_smaller_first() -> None:
    """Two jobs of one queue: the one that holds less of the cluster goes first, and the
    order moves as pods are placed in the session."""
    s = session(
        [
            node("n1", cpu="10", memory="10Gi"),
            pod_group("a", min_member=1, phase="Running"),
            pod_group("b", min_member=1, phase="Running"),
            *job_pods("a", 3, node="n1"),
            *job_pods("b", 1, node="n1"),
            pod("b-new", group="b", cpu="3", memory=None),
        ]
    )
    a, b = s.jobs["default/a"], s.jobs["default/b"]
    assert s.job_key(a)[:-2] > s.job_key(b)[:-2]
    with s.statement() as stmt:
        stmt.allocate(task_of(s, "b-new"), "n1")
        assert s.job_key(a)[:-2] < s.job_key(b)[:-2]  # b holds 4 of 10 now


@pytest.mark.parametrize(
    ("victims", "allowed"),
    [
        (["low-0"], ["low-0"]),
        (["low-0", "low-1", "low-2"], ["low-0", "low-1"]),
        (["even-0"], []),
        (["other-0"], ["other-0"]),
    ],
    ids=[
        "a-victim-whose-job-keeps-a-larger-share",
        "each-victim-counted-with-those-of-its-job-before-it",
        "not-below-the-preemptors-share-with-it",
        "another-queues-pod-is-left-to-reclaim",
    ],
)
def test_victims_by_share(victims: list[str], allowed: list[str]) -> None:
    """The preemptor's job holds 1 CPU of 10 and asks 1 more (share 0.2 with it): a pod
    may go if its job keeps at least 0.2 without it (and without those of its job taken
    before it)."""
    s = session(
        [
            node("n1", cpu="10", memory="100Gi"),
            queue("q"),
            queue("other"),
            pod_group("hi", min_member=1, queue="q", phase="Running"),
            pod_group("low", min_member=1, queue="q", phase="Running"),
            pod_group("even", min_member=1, queue="q", phase="Running"),
            pod_group("other", min_member=1, queue="other", phase="Running"),
            *job_pods("hi", 1, node="n1"),
            pod("hi-new", group="hi", cpu="1", memory=None),
            *job_pods("low", 4, node="n1"),
            *job_pods("even", 2, node="n1"),
            *job_pods("other", 1, node="n1"),
        ]
    )
    preemptor = task_of(s, "hi-new")
    candidates = [task_of(s, name) for name in victims]
    assert [t.name for t in s.victims(preemptor, candidates)] == allowed


def test_preemptable_false_registers_no_victim_filter() -> None:
    s = session([node("n1")], preemptable=False)
    assert not s.hooks[VICTIMS]


# Hierarchical DRF ---------------------------------------------------------------------------


def test_the_tree_rescales_children_to_the_smallest_share() -> None:
    """A parent with a CPU-only child at 0.3 and a memory-only child at 0.1: the CPU child
    is scaled to 0.1, so the parent holds 0.1 of each (share 0.1)."""
    total = {"cpu": 10, "memory": 10}
    cpu_job = Node("a", job="a", request={"cpu": 10})
    mem_job = Node("b", job="b", request={"memory": 10})
    parent = Node("p", children=[Node("qa", children=[cpu_job]), Node("qb", children=[mem_job])])
    hdrf.evaluate(parent, {"a": {"cpu": 3}, "b": {"memory": 1}}, total, frozenset(total))
    assert parent.allocated == pytest.approx({"cpu": 1.0, "memory": 1.0})
    assert parent.share == pytest.approx(0.1)
    assert not parent.saturated


@pytest.mark.parametrize(
    ("held", "asks", "demanding", "saturated"),
    [
        ({"cpu": 2}, {"cpu": 2, "memory": 4}, {"cpu", "memory"}, True),
        ({"cpu": 1}, {"cpu": 2}, {"cpu", "memory"}, False),
        ({"cpu": 1}, {"cpu": 2}, {"memory"}, True),
        ({}, {"cpu": 2}, {"memory"}, False),
    ],
    ids=[
        "holds-all-it-asks-of-a-resource",
        "asks-more",
        "holds-some-of-a-resource-the-cluster-has-none-left-of",
        "holds-nothing",
    ],
)
def test_a_job_is_saturated(
    held: dict[str, int], asks: dict[str, int], demanding: set[str], saturated: bool
) -> None:
    leaf = Node("j", job="j", request=asks)
    hdrf.evaluate(leaf, {"j": held}, {"cpu": 10, "memory": 10}, frozenset(demanding))
    assert leaf.saturated is saturated


def hierarchy_session() -> Session:
    """Queues sci (weight 50) and eng (50) with dev and prod (50 each) below it, of 10 CPU
    and 10Gi: sci's job holds 5 CPU and 5Gi (share 0.5), dev's 1 CPU (0.1), prod's 3Gi
    (0.3); each has one more pod pending."""
    return session(
        [
            node("n1", cpu="10", memory="10Gi"),
            queue("sci", weight=50),
            queue("eng", weight=50),
            queue("dev", weight=50, parent="eng"),
            queue("prod", weight=50, parent="eng"),
            pod_group("s", queue="sci", min_member=0, phase="Running"),
            pod_group("d", queue="dev", min_member=0, phase="Running"),
            pod_group("p", queue="prod", min_member=0, phase="Running"),
            *job_pods("s", 5, memory="1Gi", node="n1"),
            pod("s-new", group="s", cpu="1", memory="1Gi"),
            *job_pods("d", 1, node="n1"),
            pod("d-new", group="d", cpu="1", memory=None),
            *job_pods("p", 3, cpu="0", memory="1Gi", node="n1"),
            pod("p-new", group="p", cpu="0", memory="1Gi"),
        ],
        hierarchy=True,
    )


def test_queues_by_hierarchical_share() -> None:
    """eng's share is its children's smallest (prod's 0.3 scaled to dev's 0.1): 0.1, below
    sci's 0.5, so dev and prod come before sci; dev before prod (0.1 < 0.3)."""
    s = hierarchy_session()
    keys = {q: s.queue_key(s.queues[q])[:-1] for q in ("sci", "dev", "prod")}
    assert sorted(keys, key=keys.__getitem__) == ["dev", "prod", "sci"]
    assert keys["sci"][2:] == (UNRANKED, UNRANKED)  # a shorter chain ends in ties


@pytest.mark.parametrize(
    ("reclaimer", "victim", "allowed"),
    [("d-new", "s-0", True), ("s-new", "d-0", False), ("p-new", "d-0", False)],
    ids=[
        "the-lower-queue-takes-from-the-higher",
        "not-the-other-way",
        "not-from-a-sibling-that-would-then-come-first",
    ],
)
def test_reclaim_by_hierarchical_share(reclaimer: str, victim: str, allowed: bool) -> None:
    """d-new from sci: eng then holds 0.3 (dev saturated, prod's 0.3), sci 0.4: allowed.
    s-new from dev: sci 0.6 above eng's 0.3. p-new from dev: prod (saturated, 0.4) would
    come after dev (0) under eng."""
    s = hierarchy_session()
    candidate = task_of(s, victim)
    reclaimers = [task_of(s, reclaimer)]
    assert s.victims(reclaimers[0], [candidate]) == [candidate]  # the budget decides
    out = s.reclaimable(reclaimers, [candidate])
    assert (out == [candidate]) is allowed
    assert s.queue_key(s.queues["dev"])[:-1] < s.queue_key(s.queues["sci"])[:-1]  # restored


def test_a_saturated_queue_comes_after_any_unsaturated_one() -> None:
    """Queue a's job holds all it asks (1 CPU: share 0.1, saturated); b's holds 3 of the
    4 CPU it asks (0.3): b comes first all the same."""
    s = session(
        [
            node("n1", cpu="10", memory="10Gi"),
            queue("a"),
            queue("b"),
            pod_group("a", queue="a", min_member=0, phase="Running"),
            pod_group("b", queue="b", min_member=0, phase="Running"),
            *job_pods("a", 1, node="n1"),
            *job_pods("b", 3, node="n1"),
            pod("b-new", group="b", cpu="1", memory=None),
        ],
        hierarchy=True,
    )
    assert s.queue_key(s.queues["b"])[:-1] < s.queue_key(s.queues["a"])[:-1]
