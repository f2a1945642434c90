"""Tests of scheduler.plugins.nodeorder: kube-scheduler's scores with its integer arithmetic
and non-zero requests, their weights, their arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.errors import ConfigError
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.extension_points import NODE_SCORER
from scheduler.framework.node_table import FloatVector
from scheduler.framework.session import Session
from scheduler.plugins.nodeorder import NodeOrderArguments, NodeOrderPlugin
from tests.builders import default_registry, node, pod, session_with, task_of

Obj = dict[str, Any]

ONLY_LEAST = {"leastAllocatedWeight": 1, "balancedAllocationWeight": 0, "nodeAffinityWeight": 0}
ONLY_MOST = {
    "leastAllocatedWeight": 0,
    "mostAllocatedWeight": 1,
    "balancedAllocationWeight": 0,
    "nodeAffinityWeight": 0,
}
ONLY_BALANCED = {"leastAllocatedWeight": 0, "balancedAllocationWeight": 1, "nodeAffinityWeight": 0}
ONLY_AFFINITY = {"leastAllocatedWeight": 0, "balancedAllocationWeight": 0, "nodeAffinityWeight": 1}


def open_(nodes: Sequence[Obj], pods: Sequence[Obj], arguments: Mapping[str, Any]) -> Session:
    return session_with(
        nodes, pods, [PluginConfig("predicates"), PluginConfig("nodeorder", dict(arguments))]
    )


def plugin_of(session: Session) -> NodeOrderPlugin:
    return next(p for _, p in session.plugins if isinstance(p, NodeOrderPlugin))


def scores(session: Session, name: str, scorer: str) -> dict[str, float]:
    """One scorer's scores of pod ``name`` on every node, by node name."""
    rows = np.arange(len(session.table), dtype=np.intp)
    fn = getattr(plugin_of(session), scorer)
    out: FloatVector = fn(task_of(session, name), session.table, rows)
    return {n.name: round(float(s), 6) for n, s in zip(session.table.nodes, out, strict=True)}


def chosen(session: Session, name: str) -> str:
    task = task_of(session, name)
    picked = session.select_node(task, session.fit(task))
    assert picked is not None
    return picked.name


# --------------------------------------------------------------------------------------------
# Allocation scores

BUSY_AND_IDLE = [node("busy", cpu="4", memory="8Gi"), node("idle", cpu="4", memory="8Gi")]
HOG = pod("hog", node="busy", cpu="2", memory="4Gi")
GPU_CONTAINER = {
    "name": "c",
    "resources": {"requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}},
}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param(ONLY_LEAST, "idle", id="least-allocated-spreads"),
        pytest.param(ONLY_MOST, "busy", id="most-allocated-packs"),
    ],
)
def test_least_and_most_allocated_pick_opposite_nodes(
    arguments: Mapping[str, int], expected: str
) -> None:
    session = open_(BUSY_AND_IDLE, [HOG, pod("p", cpu="1", memory="1Gi")], arguments)
    assert chosen(session, "p") == expected


@pytest.mark.parametrize(
    ("scorer", "expected"),
    [
        # requested after placing p (1 cpu, 2Gi): busy 3/4 cpu, 6/8 mem; idle 1/4 cpu, 2/8 mem
        pytest.param("least_allocated", {"busy": 25.0, "idle": 75.0}, id="least"),
        pytest.param("most_allocated", {"busy": 75.0, "idle": 25.0}, id="most"),
        # balance unchanged by p on either node (fractions stay equal): 50 + 50 // 2
        pytest.param("balanced_allocation", {"busy": 75.0, "idle": 75.0}, id="balanced"),
    ],
)
def test_allocation_scores(scorer: str, expected: dict[str, float]) -> None:
    session = open_(BUSY_AND_IDLE, [HOG, pod("p", cpu="1", memory="2Gi")], {})
    assert scores(session, "p", scorer) == expected


def test_resource_weights_weigh_the_mean() -> None:
    arguments = {"resources": {"cpu": 3, "memory": 1}}
    session = open_(BUSY_AND_IDLE, [HOG, pod("p", cpu="1", memory="0")], arguments)
    # busy: cpu (4-3)/4 = 25, memory (8-4)/8 = 50 -> (3*25 + 50) // 4 (kube's integer mean)
    assert scores(session, "p", "least_allocated") == {"busy": 31.0, "idle": 81.0}


def test_over_requested_nodes_are_capped() -> None:
    session = open_([node("small", cpu="1", memory="1Gi")], [pod("p", cpu="2", memory="2Gi")], {})
    assert scores(session, "p", "least_allocated") == {"small": 0.0}
    assert scores(session, "p", "most_allocated") == {"small": 100.0}
    assert scores(session, "p", "balanced_allocation") == {"small": 75.0}


def test_a_resource_a_node_does_not_offer_is_left_out() -> None:
    arguments = {"resources": {"cpu": 1, "memory": 1, "nvidia.com/gpu": 5}}
    nodes = [node("cpu-only", cpu="4", memory="8Gi"), node("gpu", cpu="4", memory="8Gi", gpus=4)]
    session = open_(nodes, [pod("p", cpu="1", memory="2Gi")], arguments)
    # p asks no GPU: the GPU is left out of its scores on every node (kube skips an
    # extended resource the pod does not ask for).
    assert scores(session, "p", "least_allocated") == {"cpu-only": 75.0, "gpu": 75.0}
    assert scores(session, "p", "most_allocated") == {"cpu-only": 25.0, "gpu": 25.0}
    assert scores(session, "p", "balanced_allocation") == {"cpu-only": 75.0, "gpu": 75.0}


def test_an_extended_resource_the_pod_asks_is_scored_where_offered() -> None:
    arguments = {"resources": {"cpu": 1, "memory": 1, "nvidia.com/gpu": 5}}
    nodes = [node("cpu-only", cpu="4", memory="8Gi"), node("gpu", cpu="4", memory="8Gi", gpus=2)]
    gpu_pod = pod("p", cpu="1", memory="2Gi", containers=[GPU_CONTAINER])
    session = open_(nodes, [gpu_pod], arguments)
    # gpu: cpu 75, memory 75, gpu (2-1)/2 = 50 weighted 5: (75 + 75 + 250) // 7; cpu-only
    # offers no GPU: cpu and memory only.
    assert scores(session, "p", "least_allocated") == {"cpu-only": 75.0, "gpu": 57.0}
    assert scores(session, "p", "most_allocated") == {"cpu-only": 25.0, "gpu": 42.0}


def test_a_node_offering_none_of_the_resources_scores_zero() -> None:
    arguments = {"resources": {"example.com/fpga": 1}}
    session = open_([node("n1")], [pod("p")], arguments)
    assert scores(session, "p", "least_allocated") == {"n1": 0.0}
    assert scores(session, "p", "most_allocated") == {"n1": 0.0}
    # p asks none of the resources: balanced allocation does not score it.
    assert scores(session, "p", "balanced_allocation") == {"n1": 0.0}


def test_balanced_allocation_prefers_the_placement_that_evens_a_node_out() -> None:
    nodes = [node("cpu-heavy", cpu="4", memory="8Gi"), node("even", cpu="4", memory="8Gi")]
    pods = [
        pod("cpu-hog", node="cpu-heavy", cpu="3", memory="1Gi"),
        pod("even-pod", node="even", cpu="1", memory="2Gi"),
        pod("p", cpu="0", memory="4Gi"),
    ]
    session = open_(nodes, pods, ONLY_BALANCED)
    # cpu-heavy: (0.75, 0.125) std 0.3125 -> 68 without p; (0.75, 0.625) std 0.0625 -> 93
    # with it: 50 + (50 + 25) // 2 = 87. even: (0.25, 0.25) -> 100 without, (0.25, 0.75)
    # -> 75 with: 50 + (50 - 25) // 2 = 62.
    assert scores(session, "p", "balanced_allocation") == {"cpu-heavy": 87.0, "even": 62.0}
    assert chosen(session, "p") == "cpu-heavy"


def test_a_pod_that_asks_nothing_counts_kubes_non_zero_defaults() -> None:
    # Two pods that ask for nothing on "first": kube counts 100m and 200Mi each there.
    nodes = [node("first", cpu="1", memory="1Gi"), node("second", cpu="1", memory="1Gi")]
    pods = [
        pod("a", node="first", cpu=None, memory=None),
        pod("b", node="first", cpu=None, memory=None),
        pod("p", cpu=None, memory=None),
    ]
    session = open_(nodes, pods, ONLY_LEAST)
    # first: cpu (1000 - 300) * 100 // 1000 = 70, memory (1024 - 600) * 100 // 1024 = 41;
    # second: 90 and 80.
    assert scores(session, "p", "least_allocated") == {"first": 55.0, "second": 85.0}
    assert chosen(session, "p") == "second"


# --------------------------------------------------------------------------------------------
# Preferred node affinity

PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "preference": {
                    "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                },
            },
            {
                "weight": 30,
                "preference": {"matchExpressions": [{"key": "gen", "operator": "Exists"}]},
            },
        ]
    }
}
LABELLED = [
    node("both", labels={"disk": "ssd", "gen": "3"}),
    node("gen", labels={"gen": "2"}),
    node("ssd", labels={"disk": "ssd"}),
    node("none"),
]


def test_preferred_affinity_is_normalised_by_the_best_node() -> None:
    session = open_(LABELLED, [pod("p", affinity=PREFERRED)], ONLY_AFFINITY)
    assert scores(session, "p", "node_affinity") == {
        "both": 100.0,
        "gen": 75.0,
        "ssd": 25.0,
        "none": 0.0,
    }
    assert chosen(session, "p") == "both"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param(["gen", "ssd", "none"], [100.0, 33.0, 0.0], id="max-among-given-rows"),
        pytest.param(["ssd", "none"], [100.0, 0.0], id="smaller-max"),
        pytest.param(["none"], [0.0], id="all-zero"),
        pytest.param([], [], id="no-rows"),
    ],
)
def test_preferred_affinity_normalises_over_the_rows_given(
    rows: list[str], expected: list[float]
) -> None:
    session = open_(LABELLED, [pod("p", affinity=PREFERRED)], ONLY_AFFINITY)
    index = np.array([session.table.row[name] for name in rows], dtype=np.intp)
    got = plugin_of(session).node_affinity(task_of(session, "p"), session.table, index)
    assert got.tolist() == pytest.approx(expected)


def test_no_preferred_terms_scores_zero() -> None:
    session = open_(LABELLED, [pod("p")], ONLY_AFFINITY)
    assert set(scores(session, "p", "node_affinity").values()) == {0.0}


# --------------------------------------------------------------------------------------------
# Weights and arguments


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param(
            {},
            {"least_allocated": 1, "balanced_allocation": 1, "node_affinity": 2},
            id="defaults",
        ),
        pytest.param(
            {"mostAllocatedWeight": 5, "leastAllocatedWeight": 0},
            {"most_allocated": 5, "balanced_allocation": 1, "node_affinity": 2},
            id="binpack",
        ),
        pytest.param(
            {"leastAllocatedWeight": 0, "balancedAllocationWeight": 0, "nodeAffinityWeight": 0},
            {},
            id="all-off",
        ),
    ],
)
def test_zero_weights_disable_scorers(
    arguments: Mapping[str, int], expected: dict[str, int]
) -> None:
    session = open_([node("n1")], [], arguments)
    got = {
        reg.hook.__name__: reg.weight  # type: ignore[attr-defined]
        for reg in session.hooks[NODE_SCORER]
        if reg.plugin == "nodeorder"
    }
    assert got == expected


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        pytest.param({"leastAllocatedWeight": -1}, "leastAllocatedWeight", id="least"),
        pytest.param({"mostAllocatedWeight": -2}, "mostAllocatedWeight", id="most"),
        pytest.param({"balancedAllocationWeight": -1}, "balancedAllocationWeight", id="balanced"),
        pytest.param({"nodeAffinityWeight": -1}, "nodeAffinityWeight", id="affinity"),
        pytest.param({"resources": {"cpu": -1}}, "resources.cpu", id="resource-weight"),
        pytest.param({"leastAllocatedWeight": "1"}, "leastAllocatedWeight", id="wrong-type"),
        pytest.param({"leastAllocatedWeight": 1.5}, "leastAllocatedWeight", id="float"),
        pytest.param({"resources": {"cpu": "x"}}, "resources.cpu", id="resource-wrong-type"),
        pytest.param({"binpackWeight": 1}, "binpackWeight", id="unknown"),
    ],
)
def test_bad_arguments_are_refused_at_resolve(arguments: Obj, name: str) -> None:
    config = SchedulerConfiguration(
        actions=(), tiers=(TierConfig((PluginConfig("nodeorder", arguments),)),)
    )
    with pytest.raises(ConfigError) as info:
        default_registry().resolve(config)
    # Type errors name the argument in the field; ValueErrors from __post_init__ are
    # reported on ``arguments`` by build_arguments, with the argument named in the message.
    where = f"{info.value.field}: {info.value.message}"
    assert where.startswith("tiers[0].plugins[0].arguments")
    assert name in where


def test_arguments_accept_the_yaml_names() -> None:
    config = SchedulerConfiguration(
        actions=(),
        tiers=(
            TierConfig(
                (
                    PluginConfig(
                        "nodeorder",
                        {"mostAllocatedWeight": 2, "resources": {"cpu": 2, "nvidia.com/gpu": 4}},
                    ),
                )
            ),
        ),
    )
    resolved = default_registry().resolve(config)
    assert resolved.plugins[0].arguments == NodeOrderArguments(
        mostAllocatedWeight=2, resources={"cpu": 2, "nvidia.com/gpu": 4}
    )


# --------------------------------------------------------------------------------------------
# Property: every score is within [0, 100]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 16), st.integers(0, 10)),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 6000),
    st.integers(0, 20),
)
def test_scores_are_within_bounds(
    shapes: list[tuple[int, int, int]], cpu_milli: int, memory_gi: int
) -> None:
    nodes = [node(f"n{i}", cpu=str(c), memory=f"{m}Gi") for i, (c, m, _) in enumerate(shapes)]
    pods = [
        pod(f"e{i}", node=f"n{i}", cpu=f"{used * 500}m", memory=f"{used}Gi")
        for i, (_, _, used) in enumerate(shapes)
    ]
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["n0"]}
                        ]
                    },
                }
            ]
        }
    }
    p = pod("p", cpu=f"{cpu_milli}m", memory=f"{memory_gi}Gi", affinity=affinity)
    session = open_(nodes, [*pods, p], {"mostAllocatedWeight": 1})
    for scorer in ("least_allocated", "most_allocated", "balanced_allocation", "node_affinity"):
        values = list(scores(session, "p", scorer).values())
        assert all(0.0 <= v <= 100.0 for v in values), (scorer, values)


def test_equal_fractions_before_and_after_score_75() -> None:
    nodes = [node("a", cpu="10", memory="10Gi"), node("b", cpu="3", memory="3Gi")]
    session = open_(
        nodes, [pod("x", node="a", cpu="2", memory="2Gi"), pod("p", cpu="1", memory="1Gi")], {}
    )
    assert scores(session, "p", "balanced_allocation") == {"a": 75.0, "b": 75.0}


# --------------------------------------------------------------------------------------------
# Property: the vectorised scores agree with kube-scheduler's formulas written per node

NATIVE = ("cpu", "memory", "ephemeral-storage")


def reference_scores(
    allocatable: Mapping[str, int],
    *,
    requested: Mapping[str, int],
    nonzero: Mapping[str, int],
    pod_request: Mapping[str, int],
    pod_nonzero: Mapping[str, int],
    weights: Mapping[str, int],
) -> tuple[int, int, int]:
    """(least, most, balanced) for one node, as kube-scheduler's resource allocation
    scorers compute them, one resource at a time, in integers: ``requested`` is what the
    node's pods ask, ``nonzero`` the same counting kube's defaults for containers that ask
    no CPU or memory; likewise ``pod_request`` and ``pod_nonzero`` for the pod placed."""
    least = most = total = 0
    with_pod, without = [], []
    for name, weight in sorted(weights.items()):
        alloc = allocatable.get(name, 0)
        asked = pod_request.get(name, 0)
        if weight == 0 or alloc == 0 or name == "pods" or (name not in NATIVE and asked == 0):
            continue
        req = nonzero.get(name, 0) + pod_nonzero.get(name, 0)
        least += weight * (0 if req > alloc else (alloc - req) * 100 // alloc)
        most += weight * (min(req, alloc) * 100 // alloc)
        total += weight
        with_pod.append(min((requested.get(name, 0) + asked) / alloc, 1.0))
        without.append(min(requested.get(name, 0) / alloc, 1.0))

    def balance(fractions: list[float]) -> int:
        if len(fractions) == 2:
            return int((1 - abs((fractions[0] - fractions[1]) / 2)) * 100)
        if len(fractions) > 2:
            mean = sum(fractions) / len(fractions)
            std = (sum((f - mean) ** 2 for f in fractions) / len(fractions)) ** 0.5
            return int((1 - std) * 100)
        return 100

    best_effort = all(pod_request.get(n, 0) == 0 for n, w in weights.items() if w)
    balanced = 0 if best_effort else 50 + (50 + balance(with_pod) - balance(without)) // 2
    return (least // total, most // total, balanced) if total else (0, 0, balanced)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 16), st.integers(1, 64), st.sampled_from([None, 0, 2, 8])),
        min_size=1,
        max_size=4,
    ),
    st.lists(
        st.tuples(
            st.sampled_from([None, 0, 300, 8000]),
            st.sampled_from([None, 0, 1, 32]),
            st.integers(0, 4),
        ),
        max_size=6,
    ),
    st.tuples(
        st.sampled_from([None, 0, 250, 8000]), st.sampled_from([None, 0, 1, 32]), st.integers(0, 8)
    ),
    st.dictionaries(
        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, 5), min_size=1
    ),
)
def test_allocation_scores_match_a_per_node_reference(
    shapes: list[tuple[int, int, int | None]],
    running: list[tuple[int | None, int | None, int]],
    incoming: tuple[int | None, int | None, int],
    weights: dict[str, int],
) -> None:
    def containers(cpu: int | None, mem: int | None, gpu: int) -> list[Obj]:
        requests: Obj = {"nvidia.com/gpu": str(gpu)}
        if cpu is not None:
            requests["cpu"] = f"{cpu}m"
        if mem is not None:
            requests["memory"] = f"{mem}Gi"
        return [{"name": "c", "resources": {"requests": requests}}]

    nodes = [
        node(f"n{i}", cpu=str(c), memory=f"{m}Gi", gpus=g) for i, (c, m, g) in enumerate(shapes)
    ]
    pods = [
        pod(f"e{i}", node=f"n{i % len(nodes)}", containers=containers(*r))
        for i, r in enumerate(running)
    ]
    session = open_(
        nodes, [*pods, pod("p", containers=containers(*incoming))], {"resources": weights}
    )
    task = task_of(session, "p")
    got = {
        s: scores(session, "p", s)
        for s in ("least_allocated", "most_allocated", "balanced_allocation")
    }
    for n in session.table.nodes:
        want = reference_scores(
            n.allocatable,
            requested=n.used,
            nonzero=n.used + n.nonzero_pad,
            pod_request=task.request,
            pod_nonzero=task.request + task.spec.score_pad,
            weights=weights,
        )
        have = tuple(
            got[s][n.name] for s in ("least_allocated", "most_allocated", "balanced_allocation")
        )
        assert have == want, n.name


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 2**14), st.integers(1, 2**16 - 1)), min_size=1, max_size=4
    ),  # cores, GiB: up to 64 TiB
    st.lists(st.tuples(st.integers(0, 2**24), st.integers(0, 2**46 - 1)), max_size=6),
    st.tuples(st.integers(0, 2**24), st.integers(0, 2**46 - 1)),
    st.integers(1, 7),
)
def test_the_float_fast_path_is_kubes_integer_arithmetic_on_large_nodes(
    shapes: list[tuple[int, int]],
    running: list[tuple[int, int]],
    incoming: tuple[int, int],
    cpu_weight: int,
) -> None:
    """Every node offering cpu and memory takes the vectorised float path; its scores are
    kube's integer ones up to 64 TiB and 16,384 cores (millicores and bytes as asked)."""

    def containers(milli: int, byte: int) -> list[Obj]:
        requests = {"cpu": f"{milli}m", "memory": str(byte)}
        return [{"name": "c", "resources": {"requests": requests}}]

    nodes = [node(f"n{i}", cpu=str(c), memory=f"{m}Gi") for i, (c, m) in enumerate(shapes)]
    pods = [
        pod(f"e{i}", node=f"n{i % len(nodes)}", containers=containers(*r))
        for i, r in enumerate(running)
    ]
    weights = {"cpu": cpu_weight, "memory": 1}
    session = open_(
        nodes, [*pods, pod("p", containers=containers(*incoming))], {"resources": weights}
    )
    assert plugin_of(session)._exact_in_floats
    task = task_of(session, "p")
    got = {
        s: scores(session, "p", s)
        for s in ("least_allocated", "most_allocated", "balanced_allocation")
    }
    for n in session.table.nodes:
        want = reference_scores(
            n.allocatable,
            requested=n.used,
            nonzero=n.used + n.nonzero_pad,
            pod_request=task.request,
            pod_nonzero=task.request + task.spec.score_pad,
            weights=weights,
        )
        have = tuple(
            got[s][n.name] for s in ("least_allocated", "most_allocated", "balanced_allocation")
        )
        assert have == want, n.name
