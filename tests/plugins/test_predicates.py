"""Tests of scheduler.plugins.predicates: every reason, its count, and a reference check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.node import NodeInfo
from scheduler.api.pod import PodAffinityTerm
from scheduler.api.resource import Resource
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.config import PluginConfig
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.session import Session
from scheduler.plugins.predicates import (
    EXISTING_ANTI_AFFINITY,
    HOST_PORTS,
    NODE_AFFINITY,
    NOT_READY,
    POD_AFFINITY,
    POD_ANTI_AFFINITY,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_TAINT,
    UNTOLERATED_TAINT,
    PredicatesPlugin,
    insufficient,
)
from tests.builders import HOSTNAME, ZONE, node, pod, session_with, task_of

PREDICATES = [PluginConfig("predicates")]
Obj = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Helpers


def open_(nodes: Sequence[Obj], pods: Sequence[Obj]) -> Session:
    return session_with(nodes, pods, PREDICATES)


def feasible(
    session: Session, name: str, ns: str = "default", *, releasing: bool = False
) -> list[str]:
    fit = session.fit(task_of(session, name, ns), releasing=releasing)
    return [session.table.nodes[i].name for i in np.flatnonzero(fit.feasible)]


def explain(nodes: Sequence[Obj], pods: Sequence[Obj], name: str) -> str:
    session = open_(nodes, pods)
    return session.fit(task_of(session, name)).explain()


def ports(*specs: tuple[int, str, str], cpu: str = "100m") -> list[Obj]:
    """One container with host ports given as (port, protocol, hostIP)."""
    return [
        {
            "name": "main",
            "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}},
            "ports": [
                {"containerPort": p, "hostPort": p, "protocol": proto, "hostIP": ip}
                for p, proto, ip in specs
            ],
        }
    ]


def term(match: dict[str, str], key: str, namespaces: list[str] | None = None) -> Obj:
    out: Obj = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    if namespaces is not None:
        out["namespaces"] = namespaces
    return out


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod_affinity(*terms: Obj) -> Obj:
    return {"podAffinity": {REQUIRED: list(terms)}}


def pod_anti_affinity(*terms: Obj) -> Obj:
    return {"podAntiAffinity": {REQUIRED: list(terms)}}


def node_affinity(*terms: Obj) -> Obj:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> Obj:
    return {"key": key, "operator": op, "values": list(values)}


# --------------------------------------------------------------------------------------------
# Every reason and its count, through Fit.explain()

EXPLAIN_CASES = [
    pytest.param(
        [
            node("n1", cpu="1"),
            node("n2", taints=["a=b:NoSchedule"]),
            node("n3", taints=["c:NoExecute"]),
        ],
        [pod("p", cpu="2")],
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint.",
        id="cpu-and-taints",
    ),
    pytest.param(
        [node("n1", unschedulable=True), node("n2")],
        [pod("p")],
        f"1/2 nodes are available: 1 {UNSCHEDULABLE}.",
        id="unschedulable",
    ),
    pytest.param(
        [node("n1", ready=False), node("n2", ready=False), node("n3")],
        [pod("p")],
        f"1/3 nodes are available: 2 {NOT_READY}.",
        id="not-ready",
    ),
    pytest.param(
        [node("n1", labels={"disk": "ssd"}), node("n2")],
        [pod("p", nodeSelector={"disk": "ssd"})],
        f"1/2 nodes are available: 1 {NODE_AFFINITY}.",
        id="node-selector",
    ),
    pytest.param(
        [node("n1", memory="1Gi"), node("n2")],
        [pod("p", memory="2Gi")],
        "1/2 nodes are available: 1 Insufficient memory.",
        id="memory",
    ),
    pytest.param(
        [node("n1", pods=1), node("n2")],
        [pod("old", node="n1"), pod("p")],
        f"1/2 nodes are available: 1 {TOO_MANY_PODS}.",
        id="too-many-pods",
    ),
    pytest.param(
        [node("n1", gpus=1), node("n2")],
        [pod("p", containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}])],
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        id="gpu-limit-as-request",
    ),
    pytest.param(
        [node("n1", cpu="1", memory="1Gi"), node("n2")],
        [pod("p", cpu="2", memory="2Gi")],
        "1/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
        id="every-insufficient-resource-of-a-node",
    ),
    pytest.param(
        [node("n1", cpu="1", taints=["a:NoSchedule"]), node("n2", cpu="1", unschedulable=True)],
        [pod("p", cpu="2")],
        f"0/2 nodes are available: 1 {UNTOLERATED_TAINT}, 1 {UNSCHEDULABLE}.",
        id="a-node-is-charged-to-its-first-failure",
    ),
    pytest.param(
        [node("n1", unschedulable=True, taints=["a:NoSchedule"], labels={"x": "1"})],
        [pod("p", nodeSelector={"x": "2"})],
        f"0/1 nodes are available: 1 {UNSCHEDULABLE}.",
        id="static-checks-in-order",
    ),
    pytest.param(
        [node("n1"), node("n2")],
        [
            pod("old", node="n1", containers=ports((80, "TCP", ""))),
            pod("p", containers=ports((80, "TCP", ""))),
        ],
        f"1/2 nodes are available: 1 {HOST_PORTS}.",
        id="host-ports",
    ),
    pytest.param(
        [node("n1"), node("n2")],
        [pod("p", cpu="5", containers=ports((80, "TCP", ""), cpu="5"))],
        "0/2 nodes are available: 2 Insufficient cpu.",
        id="no-ports-in-use",
    ),
    pytest.param(
        [node("n1", labels={ZONE: "a"}), node("n2", labels={ZONE: "b"})],
        [
            pod("db", node="n1", labels={"app": "db"}),
            pod("p", affinity=pod_affinity(term({"app": "db"}, ZONE))),
        ],
        f"1/2 nodes are available: 1 {POD_AFFINITY}.",
        id="pod-affinity",
    ),
    pytest.param(
        [node("n1", labels={ZONE: "a"}), node("n2", labels={ZONE: "b"})],
        [
            pod("db", node="n1", labels={"app": "db"}),
            pod("p", affinity=pod_anti_affinity(term({"app": "db"}, ZONE))),
        ],
        f"1/2 nodes are available: 1 {POD_ANTI_AFFINITY}.",
        id="pod-anti-affinity",
    ),
    pytest.param(
        [node("n1", labels={ZONE: "a"}), node("n2", labels={ZONE: "b"})],
        [
            pod(
                "db",
                node="n1",
                labels={"app": "db"},
                affinity=pod_anti_affinity(term({"app": "web"}, ZONE)),
            ),
            pod("p", labels={"app": "web"}),
        ],
        f"1/2 nodes are available: 1 {EXISTING_ANTI_AFFINITY}.",
        id="existing-anti-affinity",
    ),
    pytest.param(
        [node("n1", labels={ZONE: "a"}, cpu="1"), node("n2", labels={ZONE: "b"})],
        [
            pod("db", node="n2", labels={"app": "db"}),
            pod("p", cpu="2", affinity=pod_affinity(term({"app": "db"}, ZONE))),
        ],
        f"1/2 nodes are available: 1 {POD_AFFINITY}.",
        id="unresolvable-affinity-charged-before-resources",
    ),
    pytest.param(
        [node("n1"), node("n2")],
        [pod("p")],
        "2/2 nodes are available.",
        id="everything-fits",
    ),
]


@pytest.mark.parametrize(("nodes", "pods", "expected"), EXPLAIN_CASES)
def test_explain(nodes: list[Obj], pods: list[Obj], expected: str) -> None:
    assert explain(nodes, pods, "p") == expected


def test_common_pod_gets_an_empty_list() -> None:
    session = open_([node("n1"), node("n2")], [pod("old", node="n1"), pod("p")])
    plugin = next(p for _, p in session.plugins if isinstance(p, PredicatesPlugin))
    assert plugin.filter(task_of(session, "p"), session.table, False) == []


def test_request_for_a_resource_no_node_has() -> None:
    nodes = [node("n1"), node("n2")]
    session = open_(nodes, [])
    plugin = next(p for _, p in session.plugins if isinstance(p, PredicatesPlugin))
    other = open_(
        nodes,
        [
            pod(
                "p",
                containers=[{"name": "c", "resources": {"requests": {"example.com/fpga": "1"}}}],
            )
        ],
    )
    # a table without the column
    rejections = plugin.filter(task_of(other, "p"), session.table, False)
    assert [(r.reason, int(r.nodes.sum())) for r in rejections] == [
        ("Insufficient example.com/fpga", 2)
    ]


# --------------------------------------------------------------------------------------------
# Tolerations

TOLERATION_CASES = [
    pytest.param(
        "k=v:NoSchedule",
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
        True,
        id="equal",
    ),
    pytest.param(
        "k=v:NoSchedule", {"key": "k", "value": "v"}, True, id="equal-by-default-any-effect"
    ),
    pytest.param(
        "k=v:NoSchedule",
        {"key": "k", "operator": "Equal", "value": "w"},
        False,
        id="equal-other-value",
    ),
    pytest.param("k=v:NoSchedule", {"key": "k", "operator": "Exists"}, True, id="exists-key"),
    pytest.param(
        "k=v:NoSchedule", {"operator": "Exists"}, True, id="exists-empty-key-tolerates-all"
    ),
    pytest.param(
        "k=v:NoSchedule",
        {"key": "", "operator": "Equal", "value": "v"},
        False,
        id="equal-empty-key",
    ),
    pytest.param(
        "k=v:NoSchedule",
        {"key": "k", "operator": "Exists", "effect": "NoExecute"},
        False,
        id="other-effect",
    ),
    pytest.param(
        "k=v:NoExecute",
        {"key": "k", "operator": "Exists", "effect": "NoExecute"},
        True,
        id="no-execute",
    ),
    pytest.param("k=v:NoExecute", {"key": "j", "operator": "Exists"}, False, id="other-key"),
    pytest.param(
        "k=v:PreferNoSchedule",
        {"key": "j", "operator": "Exists"},
        True,
        id="prefer-no-schedule-ignored",
    ),
    pytest.param("k:NoSchedule", {"key": "k", "operator": "Equal"}, True, id="empty-value"),
]


@pytest.mark.parametrize(("taint", "toleration", "fits"), TOLERATION_CASES)
def test_tolerations(taint: str, toleration: Obj, fits: bool) -> None:
    session = open_([node("n1", taints=[taint])], [pod("p", tolerations=[toleration])])
    assert feasible(session, "p") == (["n1"] if fits else [])


@pytest.mark.parametrize(
    ("toleration", "fits"),
    [
        pytest.param(
            {"key": UNSCHEDULABLE_TAINT.key, "operator": "Exists", "effect": "NoSchedule"},
            True,
            id="tolerated",
        ),
        pytest.param({"operator": "Exists"}, True, id="tolerates-everything"),
        pytest.param(
            {"key": UNSCHEDULABLE_TAINT.key, "operator": "Exists", "effect": "NoExecute"},
            False,
            id="wrong-effect",
        ),
        pytest.param(None, False, id="not-tolerated"),
    ],
)
def test_unschedulable_node_tolerated(toleration: Obj | None, fits: bool) -> None:
    extras = {"tolerations": [toleration]} if toleration else {}
    session = open_([node("n1", unschedulable=True)], [pod("p", **extras)])
    assert feasible(session, "p") == (["n1"] if fits else [])


# --------------------------------------------------------------------------------------------
# Node affinity

AFFINITY_NODES = [
    node("a", labels={"disk": "ssd", "gen": "3"}),
    node("b", labels={"disk": "hdd", "gen": "5"}),
    node("c", labels={"gen": "x"}),
    node("d"),
]

NODE_AFFINITY_CASES = [
    pytest.param([{"matchExpressions": [expr("disk", "In", "ssd", "nvme")]}], ["a"], id="in"),
    pytest.param(
        [{"matchExpressions": [expr("disk", "NotIn", "ssd")]}],
        ["b", "c", "d"],
        id="not-in-matches-missing",
    ),
    pytest.param([{"matchExpressions": [expr("disk", "Exists")]}], ["a", "b"], id="exists"),
    pytest.param(
        [{"matchExpressions": [expr("disk", "DoesNotExist")]}], ["c", "d"], id="does-not-exist"
    ),
    pytest.param(
        [{"matchExpressions": [expr("gen", "Gt", "4")]}], ["b"], id="gt-skips-non-integers"
    ),
    pytest.param([{"matchExpressions": [expr("gen", "Lt", "4")]}], ["a"], id="lt"),
    pytest.param(
        [{"matchFields": [expr("metadata.name", "In", "c", "d")]}], ["c", "d"], id="match-fields"
    ),
    pytest.param(
        [{"matchFields": [expr("metadata.name", "NotIn", "a")]}],
        ["b", "c", "d"],
        id="match-fields-not-in",
    ),
    pytest.param(
        [{"matchExpressions": [expr("disk", "Exists"), expr("gen", "Gt", "4")]}],
        ["b"],
        id="expressions-anded",
    ),
    pytest.param(
        [
            {"matchExpressions": [expr("disk", "In", "ssd")]},
            {"matchFields": [expr("metadata.name", "In", "d")]},
        ],
        ["a", "d"],
        id="terms-ored",
    ),
    pytest.param(
        [
            {
                "matchExpressions": [expr("disk", "Exists")],
                "matchFields": [expr("metadata.name", "In", "b")],
            }
        ],
        ["b"],
        id="labels-and-fields-anded",
    ),
    pytest.param([{}], [], id="empty-term-matches-nothing"),
]


@pytest.mark.parametrize(("terms", "expected"), NODE_AFFINITY_CASES)
def test_required_node_affinity(terms: list[Obj], expected: list[str]) -> None:
    session = open_(AFFINITY_NODES, [pod("p", affinity=node_affinity(*terms))])
    assert feasible(session, "p") == expected


def test_node_selector_and_affinity_are_anded() -> None:
    p = pod(
        "p",
        nodeSelector={"disk": "ssd"},
        affinity=node_affinity({"matchExpressions": [expr("gen", "Exists")]}),
    )
    session = open_([*AFFINITY_NODES, node("e", labels={"disk": "ssd"})], [p])
    assert feasible(session, "p") == ["a"]


# --------------------------------------------------------------------------------------------
# Nominated resources


def test_nomination_blocks_others_but_not_the_nominee() -> None:
    nodes = [node("n1", cpu="2"), node("n2", cpu="1")]
    session = open_(nodes, [pod("nominee", cpu="2"), pod("other", cpu="1")])
    nominee, other = task_of(session, "nominee"), task_of(session, "other")
    with session.statement() as stmt:
        stmt.pipeline(nominee, "n1")
        assert nominee.status is TaskStatus.PIPELINED
        assert feasible(session, "other") == ["n2"]
        assert session.fit(other).explain() == "1/2 nodes are available: 1 Insufficient cpu."
        assert feasible(session, "nominee") == ["n1"]  # its own nomination does not block it
    assert feasible(session, "other") == ["n1", "n2"]


def test_nomination_of_another_task_still_counts_for_the_nominee() -> None:
    session = open_([node("n1", cpu="3")], [pod("a", cpu="2"), pod("b", cpu="2")])
    with session.statement() as stmt:
        stmt.pipeline(task_of(session, "a"), "n1")
        stmt.pipeline(task_of(session, "b"), "n1")
        assert feasible(session, "a") == []
        assert feasible(session, "b") == []


@pytest.mark.parametrize(
    ("nominee_priority", "blocks"),
    [
        pytest.param(10, True, id="higher-blocks"),
        pytest.param(5, True, id="equal-blocks"),
        pytest.param(1, False, id="lower-does-not-block"),
    ],
)
def test_nominations_block_tasks_of_equal_or_lower_priority(
    nominee_priority: int, blocks: bool
) -> None:
    pods = [pod("nominee", cpu="2", priority=nominee_priority), pod("p", cpu="1", priority=5)]
    session = open_([node("n1", cpu="2")], pods)
    with session.statement() as stmt:
        stmt.pipeline(task_of(session, "nominee"), "n1")
        assert feasible(session, "p") == ([] if blocks else ["n1"])


def test_releasing_room_counts_only_while_the_session_says_so() -> None:
    leaving = pod("leaving", node="n1", cpu="2")
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    session = open_([node("n1", cpu="2")], [leaving, pod("p", cpu="2")])
    assert feasible(session, "p") == []
    assert feasible(session, "p", releasing=True) == ["n1"]


# --------------------------------------------------------------------------------------------
# Host ports

PORT_CASES = [
    pytest.param((80, "TCP", ""), (80, "TCP", ""), False, id="same-port"),
    pytest.param((80, "TCP", ""), (81, "TCP", ""), True, id="other-port"),
    pytest.param((80, "TCP", ""), (80, "UDP", ""), True, id="other-protocol"),
    pytest.param((80, "TCP", "10.0.0.1"), (80, "TCP", "10.0.0.2"), True, id="other-ip"),
    pytest.param((80, "TCP", "10.0.0.1"), (80, "TCP", "10.0.0.1"), False, id="same-ip"),
    pytest.param((80, "TCP", "10.0.0.1"), (80, "TCP", ""), False, id="incoming-wildcard"),
    pytest.param((80, "TCP", "0.0.0.0"), (80, "TCP", "10.0.0.1"), False, id="existing-wildcard"),
    pytest.param((80, "TCP", "10.0.0.1"), (80, "TCP", "0.0.0.0"), False, id="incoming-any-address"),
]


@pytest.mark.parametrize(("existing", "incoming", "fits"), PORT_CASES)
def test_host_ports(
    existing: tuple[int, str, str], incoming: tuple[int, str, str], fits: bool
) -> None:
    session = open_(
        [node("n1"), node("n2")],
        [pod("old", node="n1", containers=ports(existing)), pod("p", containers=ports(incoming))],
    )
    assert feasible(session, "p") == (["n1", "n2"] if fits else ["n2"])


def test_ports_of_a_releasing_or_finished_pod_are_free() -> None:
    gone = pod("gone", node="n1", containers=ports((80, "TCP", "")), phase="Succeeded")
    leaving = pod("leaving", node="n2", containers=ports((80, "TCP", "")))
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    session = open_(
        [node("n1"), node("n2")], [gone, leaving, pod("p", containers=ports((80, "TCP", "")))]
    )
    assert task_of(session, "leaving").status is TaskStatus.RELEASING
    assert feasible(session, "p") == ["n1", "n2"]


def test_placement_handlers_keep_ports_in_step() -> None:
    session = open_(
        [node("n1"), node("n2")],
        [pod("a", containers=ports((80, "TCP", ""))), pod("b", containers=ports((80, "TCP", "")))],
    )
    a = task_of(session, "a")
    with session.statement() as stmt:
        stmt.allocate(a, "n1")
        assert feasible(session, "b") == ["n2"]
        assert feasible(session, "a") == ["n1", "n2"]  # its own ports do not block it
        cp = stmt.checkpoint()
        stmt.evict(a, "test")
        assert feasible(session, "b") == ["n1", "n2"]  # releasing: not held
        stmt.rollback(cp)
        assert feasible(session, "b") == ["n2"]
    assert feasible(session, "b") == ["n1", "n2"]


def test_pipelined_task_keeps_its_ports_on_its_node() -> None:
    session = open_(
        [node("n1")],
        [pod("a", containers=ports((80, "TCP", ""))), pod("b", containers=ports((80, "TCP", "")))],
    )
    with session.statement() as stmt:
        stmt.pipeline(task_of(session, "a"), "n1")
        assert feasible(session, "b") == []
        assert feasible(session, "a") == ["n1"]


# --------------------------------------------------------------------------------------------
# Pod affinity and anti-affinity

TOPOLOGY_NODES = [
    node("n1", labels={ZONE: "a"}),
    node("n2", labels={ZONE: "a"}),
    node("n3", labels={ZONE: "b"}),
    node("n4"),
]
DB = pod("db", node="n1", labels={"app": "db"})

POD_AFFINITY_CASES = [
    pytest.param([DB], pod_affinity(term({"app": "db"}, ZONE)), ["n1", "n2"], id="affinity-zone"),
    pytest.param([DB], pod_affinity(term({"app": "db"}, HOSTNAME)), ["n1"], id="affinity-hostname"),
    pytest.param([DB], pod_affinity(term({"app": "cache"}, ZONE)), [], id="affinity-no-match"),
    pytest.param(
        [DB],
        pod_affinity(term({"app": "db"}, ZONE), term({"app": "db"}, HOSTNAME)),
        ["n1"],
        id="affinity-terms-anded",
    ),
    pytest.param(
        [DB], pod_affinity(term({"app": "db"}, ZONE, ["other"])), [], id="affinity-other-namespace"
    ),
    pytest.param(
        [pod("db", ns="other", node="n3", labels={"app": "db"})],
        pod_affinity(term({"app": "db"}, ZONE, ["other"])),
        ["n3"],
        id="affinity-named-namespace",
    ),
    pytest.param(
        [pod("db", ns="other", node="n3", labels={"app": "db"})],
        pod_affinity(term({"app": "db"}, ZONE)),
        [],
        id="affinity-own-namespace-by-default",
    ),
    pytest.param(
        [pod("db", node="n4", labels={"app": "db"})],
        pod_affinity(term({"app": "db"}, ZONE)),
        [],
        id="affinity-holder-without-the-key-is-in-no-domain",
    ),
    pytest.param(
        [DB, pod("db2", node="n1", labels={"app": "db"}, phase="Failed")],
        pod_anti_affinity(term({"app": "db"}, ZONE)),
        ["n3", "n4"],
        id="anti-affinity-zone",
    ),
    pytest.param(
        [DB],
        pod_anti_affinity(term({"app": "db"}, HOSTNAME)),
        ["n2", "n3", "n4"],
        id="anti-affinity-hostname",
    ),
    pytest.param(
        [pod("db", node="n1", labels={"app": "db"}, phase="Failed")],
        pod_anti_affinity(term({"app": "db"}, ZONE)),
        ["n1", "n2", "n3", "n4"],
        id="anti-affinity-ignores-failed-pods",
    ),
    pytest.param(
        [
            pod(
                "db",
                node="n1",
                labels={"app": "db"},
                affinity=pod_anti_affinity(term({"app": "web"}, ZONE)),
            )
        ],
        None,
        ["n3", "n4"],
        id="existing-anti-affinity-zone",
    ),
    pytest.param(
        [
            pod(
                "db",
                node="n3",
                labels={"app": "db"},
                affinity=pod_anti_affinity(term({"app": "web"}, HOSTNAME)),
            )
        ],
        None,
        ["n1", "n2", "n4"],
        id="existing-anti-affinity-hostname",
    ),
    pytest.param(
        [
            pod(
                "db",
                node="n1",
                labels={"app": "db"},
                affinity=pod_anti_affinity(term({"app": "other"}, ZONE)),
            )
        ],
        None,
        ["n1", "n2", "n3", "n4"],
        id="existing-anti-affinity-not-matching",
    ),
    pytest.param(
        [pod("db", node="n1", ns="other", affinity=pod_anti_affinity(term({"app": "web"}, ZONE)))],
        None,
        ["n1", "n2", "n3", "n4"],
        id="existing-anti-affinity-in-its-own-namespace",
    ),
    pytest.param(
        [
            pod(
                "db",
                node="n1",
                ns="other",
                affinity=pod_anti_affinity(term({"app": "web"}, ZONE, ["default"])),
            )
        ],
        None,
        ["n3", "n4"],
        id="existing-anti-affinity-naming-the-namespace",
    ),
    pytest.param(
        [pod("db", node="n4", affinity=pod_anti_affinity(term({"app": "web"}, ZONE)))],
        None,
        ["n1", "n2", "n3", "n4"],
        id="existing-anti-affinity-on-a-node-without-the-key",
    ),
    pytest.param(
        [DB, pod("tier", node="n1", labels={"tier": "x"})],
        pod_affinity(term({"app": "db"}, ZONE), term({"tier": "x"}, ZONE)),
        [],
        id="affinity-terms-must-select-the-same-pod",
    ),
    pytest.param(
        [pod("web-0", node="n4", labels={"app": "web"})],
        pod_affinity(term({"app": "web"}, ZONE)),
        ["n1", "n2", "n3"],
        id="affinity-to-itself-when-its-pods-are-in-no-domain",
    ),
    pytest.param(
        [pod("db", ns="other", node="n3", labels={"app": "db"})],
        pod_affinity({**term({"app": "db"}, ZONE), "namespaceSelector": {}}),
        ["n3"],
        id="affinity-empty-namespace-selector-selects-every-namespace",
    ),
    pytest.param(
        [pod("db", ns="other", node="n3", labels={"app": "db"})],
        pod_affinity(
            {**term({"app": "db"}, ZONE), "namespaceSelector": {"matchLabels": {"team": "x"}}}
        ),
        [],
        id="affinity-namespace-selector-of-unlabelled-namespaces",
    ),
]


@pytest.mark.parametrize(("existing", "affinity", "expected"), POD_AFFINITY_CASES)
def test_pod_affinity(existing: list[Obj], affinity: Obj | None, expected: list[str]) -> None:
    extras = {"affinity": affinity} if affinity else {}
    session = open_(TOPOLOGY_NODES, [*existing, pod("p", labels={"app": "web"}, **extras)])
    assert feasible(session, "p") == expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"app": "db"}, ["n1", "n2", "n3"], id="matches-itself-nodes-with-the-key"),
        pytest.param({"app": "web"}, [], id="does-not-match-itself"),
    ],
)
def test_first_pod_of_a_group_with_affinity_to_itself(
    labels: dict[str, str], expected: list[str]
) -> None:
    p = pod("p", labels=labels, affinity=pod_affinity(term({"app": "db"}, ZONE)))
    session = open_(TOPOLOGY_NODES, [p])
    assert feasible(session, "p") == expected
    if not expected:
        assert (
            session.fit(task_of(session, "p")).explain()
            == f"0/4 nodes are available: 4 {POD_AFFINITY}."
        )


def test_placement_handlers_keep_affinity_in_step() -> None:
    group = [
        pod(f"w{i}", labels={"app": "web"}, affinity=pod_affinity(term({"app": "web"}, ZONE)))
        for i in range(2)
    ]
    session = open_(TOPOLOGY_NODES, group)
    w0, w1 = task_of(session, "w0"), task_of(session, "w1")
    assert feasible(session, "w1") == ["n1", "n2", "n3"]  # nobody yet: the first-pod rule
    with session.statement() as stmt:
        stmt.allocate(w0, "n3")
        assert feasible(session, "w1") == ["n3"]
        assert feasible(session, "w0") == ["n1", "n2", "n3"]  # it does not count itself
    assert feasible(session, "w1") == ["n1", "n2", "n3"]
    assert w1.status is TaskStatus.PENDING


def test_placement_handlers_keep_anti_affinity_in_step() -> None:
    spread = pod_anti_affinity(term({"app": "web"}, ZONE))
    session = open_(
        TOPOLOGY_NODES, [pod(f"w{i}", labels={"app": "web"}, affinity=spread) for i in range(3)]
    )
    w0, w1 = task_of(session, "w0"), task_of(session, "w1")
    with session.statement() as stmt:
        stmt.allocate(w0, "n1")
        fit = session.fit(w1)
        assert feasible(session, "w1") == ["n3", "n4"]
        # Both rules reject zone a; each node is charged once, to the incoming pod's rule.
        assert fit.explain() == f"2/4 nodes are available: 2 {POD_ANTI_AFFINITY}."
        assert feasible(session, "w0") == ["n1", "n2", "n3", "n4"]
        stmt.allocate(w1, "n3")
        assert feasible(session, "w2") == ["n4"]
        stmt.rollback(1)
        assert feasible(session, "w2") == ["n3", "n4"]
    assert feasible(session, "w2") == ["n1", "n2", "n3", "n4"]


def test_symmetric_anti_affinity_follows_placements() -> None:
    guard = pod("guard", affinity=pod_anti_affinity(term({"app": "web"}, HOSTNAME)))
    session = open_(TOPOLOGY_NODES, [guard, pod("web", labels={"app": "web"})])
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "guard"), "n2")
        fit = session.fit(task_of(session, "web"))
        assert fit.explain() == f"3/4 nodes are available: 1 {EXISTING_ANTI_AFFINITY}."
        stmt.pipeline(task_of(session, "web"), "n1")
        assert feasible(session, "guard") == ["n2", "n3", "n4"]  # pipelined pods count
    assert feasible(session, "web") == ["n1", "n2", "n3", "n4"]


# --------------------------------------------------------------------------------------------
# Preemption candidates


def test_candidates_are_the_nodes_whose_every_failure_is_resolvable() -> None:
    nodes = [
        node("full", cpu="1", labels={ZONE: "a"}),
        node("tainted", cpu="1", labels={ZONE: "a"}, taints=["t:NoSchedule"]),
        node("ported", labels={ZONE: "a"}),
        node("db-zone", labels={ZONE: "a"}),
        node("far", cpu="1", labels={ZONE: "b"}),
        node("free", labels={ZONE: "a"}),
    ]
    pods = [
        pod("hog", node="full", cpu="1"),
        pod("web", node="ported", containers=ports((80, "TCP", ""))),
        pod("db", node="db-zone", labels={"app": "db"}),
        pod(
            "p",
            cpu="500m",
            containers=ports((80, "TCP", ""), cpu="500m"),
            affinity={
                **pod_affinity(term({"zone-peer": "yes"}, ZONE)),
                **pod_anti_affinity(term({"app": "db"}, HOSTNAME)),
            },
            labels={"zone-peer": "yes"},
        ),
    ]
    session = open_(nodes, pods)
    # Nobody matches the affinity term and p matches it: every node with a zone passes it.
    fit = session.fit(task_of(session, "p"))
    names = [n.name for n in session.table.nodes]
    feasible_names = {names[i] for i in np.flatnonzero(fit.feasible)}
    candidates = {names[i] for i in np.flatnonzero(fit.candidates())}
    assert feasible_names == {"free", "far"}
    assert candidates == {"full", "ported", "db-zone"}
    assert fit.explain() == (
        "2/6 nodes are available: 1 Insufficient cpu, 1 node(s) didn't have free ports for the "
        f"requested pod ports, 1 {POD_ANTI_AFFINITY}, 1 {UNTOLERATED_TAINT}."
    )


def test_a_node_failing_affinity_and_resources_is_no_candidate() -> None:
    nodes = [node("a1", cpu="1", labels={ZONE: "a"}), node("b1", cpu="1", labels={ZONE: "b"})]
    pods = [
        pod("db", node="a1", cpu="1", labels={"app": "db"}),
        pod("hog", node="b1", cpu="1"),
        pod("p", cpu="1", affinity=pod_affinity(term({"app": "db"}, ZONE))),
    ]
    session = open_(nodes, pods)
    fit = session.fit(task_of(session, "p"))
    assert [session.table.nodes[i].name for i in np.flatnonzero(fit.candidates())] == ["a1"]
    assert fit.explain() == f"0/2 nodes are available: 1 Insufficient cpu, 1 {POD_AFFINITY}."


def test_rejections_are_resolvable_as_documented() -> None:
    session = open_(
        [
            node("n1", labels={ZONE: "a"}),
            node("n2", cpu="1", labels={ZONE: "b"}),
            node("n3", unschedulable=True),
        ],
        [DB, pod("p", cpu="2", affinity=pod_anti_affinity(term({"app": "db"}, ZONE)))],
    )
    plugin = next(p for _, p in session.plugins if isinstance(p, PredicatesPlugin))
    rejections = plugin.filter(task_of(session, "p"), session.table, False)
    got = {r.reason: r.resolvable for r in rejections}
    assert got == {UNSCHEDULABLE: False, insufficient("cpu"): True, POD_ANTI_AFFINITY: True}


def test_label_index_lookup_tables() -> None:
    cpu = Resource({"cpu": 1000})
    index = NodeLabelIndex([NodeInfo("a", cpu, labels={"k": "1"}), NodeInfo("b", cpu)])
    col = index.column("k")
    assert (
        col.values == ("1",) and list(col.codes) == [0, 1] and list(col.present()) == [True, False]
    )
    assert list(col.rows_in_domains_of(np.array([True, True]))) == [True, False]


# --------------------------------------------------------------------------------------------
# Property: the vectorised filter agrees with a plain per-node check

ZONES = ["a", "b", None]
APPS = ["x", "y"]
TAINT_KEYS = ["t1", "t2"]
PORT_CHOICES = [
    (80, "TCP", ""),
    (80, "TCP", "10.0.0.1"),
    (80, "TCP", "10.0.0.2"),
    (80, "UDP", ""),
    (443, "TCP", ""),
]


def _held_elsewhere(nodes: Sequence[NodeInfo], me: TaskInfo) -> list[tuple[NodeInfo, TaskInfo]]:
    return [
        (n, t)
        for n in nodes
        for t in n.tasks.values()
        if t.status in COUNTED_FOR_PLUGINS and t.uid != me.uid
    ]


def _in_domain(a: NodeInfo, b: NodeInfo, key: str) -> bool:
    return key in a.labels and key in b.labels and a.labels[key] == b.labels[key]


def _term_matches(term: PodAffinityTerm, owner_ns: str, task: TaskInfo) -> bool:
    namespaces = term.namespaces or (owner_ns,)
    return task.namespace in namespaces and term.selector.matches(task.labels or {})


def reference_fits(task: TaskInfo, n: NodeInfo, nodes: Sequence[NodeInfo]) -> bool:
    """The predicates written plainly, one node at a time."""
    spec = task.spec
    if n.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in spec.tolerations):
        return False
    if not n.ready:
        return False
    if any(n.labels.get(k) != v for k, v in spec.node_selector.items()):
        return False
    if spec.required_terms is not None and not any(
        t.matches(n.labels, n.name) for t in spec.required_terms
    ):
        return False
    for taint in n.taints:
        if taint.effect != "PreferNoSchedule" and not any(
            t.tolerates(taint) for t in spec.tolerations
        ):
            return False
    free = n.allocatable - n.used
    for other in n.tasks.values():
        blocking = other.uid != task.uid and other.priority >= task.priority
        if other.status is TaskStatus.PIPELINED and blocking:
            free = free - other.request
    if not task.request.fits_in(free):
        return False
    others = _held_elsewhere(nodes, task)
    for m, other in others:
        if m is n and any(p.conflicts(q) for p in spec.host_ports for q in other.spec.host_ports):
            return False
    # kube: pods matching all the required affinity terms count, in the domains of the
    # terms their nodes have; each term needs one of them in the node's domain, unless
    # none is counted in any domain and the pod matches all its terms (the first of a
    # series).
    terms = spec.pod_affinity
    if any(t.topology_key not in n.labels for t in terms):
        return False
    matching = [
        (m, o) for m, o in others if all(_term_matches(t, task.namespace, o) for t in terms)
    ]
    near = all(any(_in_domain(m, n, t.topology_key) for m, _ in matching) for t in terms)
    counted = any(t.topology_key in m.labels for m, _ in matching for t in terms)
    if (
        terms
        and not near
        and (counted or not all(_term_matches(t, task.namespace, task) for t in terms))
    ):
        return False
    for term in spec.pod_anti_affinity:
        if any(
            _in_domain(m, n, term.topology_key) and _term_matches(term, task.namespace, o)
            for m, o in others
        ):
            return False
    for m, other in others:
        for term in other.spec.pod_anti_affinity:
            if _in_domain(m, n, term.topology_key) and _term_matches(term, other.namespace, task):
                return False
    return True


@st.composite
def affinity_terms(draw: st.DrawFn) -> list[Obj]:
    return [
        term(
            {"app": draw(st.sampled_from(APPS))},
            draw(st.sampled_from([ZONE, HOSTNAME])),
            draw(st.sampled_from([None, None, ["default"], ["other"], ["default", "other"]])),
        )
        for _ in range(draw(st.integers(0, 2)))
    ]


@st.composite
def pod_objects(draw: st.DrawFn, name: str, node_names: list[str]) -> Obj:
    extras: Obj = {}
    affinity: Obj = {}
    if draw(st.booleans()):
        affinity.update(pod_affinity(*draw(affinity_terms())))
    if draw(st.booleans()):
        affinity.update(pod_anti_affinity(*draw(affinity_terms())))
    if affinity:
        extras["affinity"] = affinity
    cpu = f"{draw(st.integers(0, 2000))}m"
    chosen = draw(st.lists(st.sampled_from(PORT_CHOICES), max_size=2, unique=True))
    if chosen:
        extras["containers"] = ports(*chosen, cpu=cpu)
    if draw(st.integers(0, 3)) == 0:
        extras["nodeSelector"] = {"disk": draw(st.sampled_from(["ssd", "hdd"]))}
    if draw(st.integers(0, 3)) == 0:
        ops = [
            expr("size", "Gt", "2"),
            expr("size", "Lt", "4"),
            expr("disk", "Exists"),
            expr("disk", "NotIn", "hdd"),
            expr("metadata.name", "In", *node_names[:2]),
        ]
        terms = []
        for _ in range(draw(st.integers(1, 2))):
            picked = draw(
                st.lists(st.integers(0, len(ops) - 1), min_size=1, max_size=2, unique=True)
            )
            fields = [ops[i] for i in picked if ops[i]["key"] == "metadata.name"]
            labels = [ops[i] for i in picked if ops[i]["key"] != "metadata.name"]
            terms.append({"matchExpressions": labels, "matchFields": fields})
        extras["affinity"] = {**affinity, **node_affinity(*terms)}
    tolerations = draw(
        st.lists(
            st.sampled_from(
                [
                    {"key": "t1", "operator": "Exists"},
                    {"key": "t2", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
                    {"operator": "Exists", "effect": "NoExecute"},
                    {"key": UNSCHEDULABLE_TAINT.key, "operator": "Exists"},
                ]
            ),
            max_size=2,
        )
    )
    if tolerations:
        extras["tolerations"] = tolerations
    return pod(
        name,
        ns=draw(st.sampled_from(["default", "default", "other"])),
        cpu=cpu,
        memory=f"{draw(st.integers(0, 4))}Gi",
        labels={"app": draw(st.sampled_from(APPS))},
        **extras,
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[tuple[str, str]], int]:
    count = draw(st.integers(1, 6))
    names = [f"n{i}" for i in range(count)]
    nodes = []
    for name in names:
        labels = {}
        zone = draw(st.sampled_from(ZONES))
        if zone:
            labels[ZONE] = zone
        disk = draw(st.sampled_from(["ssd", "hdd", None]))
        if disk:
            labels["disk"] = disk
        size = draw(st.sampled_from(["1", "3", "5", "big", None]))
        if size:
            labels["size"] = size
        taints = draw(
            st.lists(
                st.sampled_from(
                    ["t1:NoSchedule", "t2=v:NoSchedule", "t2=v:NoExecute", "t1:PreferNoSchedule"]
                ),
                max_size=1,
            )
        )
        nodes.append(
            node(
                name,
                cpu=str(draw(st.integers(1, 6))),
                memory=f"{draw(st.integers(1, 16))}Gi",
                pods=draw(st.integers(1, 6)),
                labels=labels,
                taints=taints,
                unschedulable=draw(st.booleans()) and draw(st.booleans()),
                ready=not (draw(st.booleans()) and draw(st.booleans())),
            )
        )
    pods = []
    for i in range(draw(st.integers(0, 8))):
        obj = draw(pod_objects(f"e{i}", names))
        obj["spec"]["nodeName"] = draw(st.sampled_from(names))
        obj["status"]["phase"] = draw(st.sampled_from(["Running", "Running", "Succeeded"]))
        pods.append(obj)
    pending = [draw(pod_objects(f"q{i}", names)) for i in range(draw(st.integers(1, 3)))]
    for obj in pending:
        obj["spec"]["priority"] = draw(st.integers(0, 2))
    pipelined = [
        (f"q{i}", draw(st.sampled_from(names))) for i in range(len(pending)) if draw(st.booleans())
    ]
    probe = draw(st.integers(0, len(pending) - 1))
    return nodes, pods + pending, pipelined, probe


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_vectorised_filter_agrees_with_a_per_node_check(
    cluster: tuple[list[Obj], list[Obj], list[tuple[str, str]], int],
) -> None:
    nodes, pods, pipelined, probe = cluster
    session = open_(nodes, pods)
    tasks = {t.name: t for job in session.jobs.values() for t in job.tasks.values()}
    with session.statement() as stmt:
        for name, where in pipelined:
            stmt.pipeline(tasks[name], where)
        task = tasks[f"q{probe}"]
        fit = session.fit(task)
        for i, n in enumerate(session.table.nodes):
            assert bool(fit.feasible[i]) == reference_fits(task, n, session.table.nodes), n.name
        # Every infeasible node is explained exactly once per check that failed it first.
        charged = np.zeros(len(session.table), dtype=np.bool_)
        for _, rejections in fit.groups:
            for r in rejections:
                charged |= r.nodes
        assert (charged == ~fit.feasible).all()
