"""Tests of scheduler.plugins.spread (podtopologyspread): counts that follow the session,
the one-row filter, defaults and arguments. kube-scheduler's own tables are ported as
scenarios (tests/conformance/kubernetes/podtopologyspread)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.errors import ConfigError
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.effects import EvictReason
from scheduler.framework.session import Session
from scheduler.plugins.spread import MISSING_LABEL, SKEW, PodTopologySpreadPlugin
from tests.builders import HOSTNAME, ZONE, default_registry, node, pod, session_with, task_of

Obj = dict[str, Any]

PLUGINS = [PluginConfig("predicates"), PluginConfig("podtopologyspread")]


def spread(key: str = ZONE, skew: int = 1, hard: bool = True, **extra: Any) -> Obj:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }


def web(name: str, *constraints: Obj, node_name: str | None = None, **kw: Any) -> Obj:
    spec: dict[str, Any] = {"topologySpreadConstraints": list(constraints)} if constraints else {}
    return pod(name, labels={"app": "web"}, node=node_name, **spec, **kw)


def zone_nodes(*zones: str) -> list[Obj]:
    return [node(f"n{i}", labels={HOSTNAME: f"n{i}", ZONE: z}) for i, z in enumerate(zones)]


def plugin_of(session: Session) -> PodTopologySpreadPlugin:
    return next(p for _, p in session.plugins if isinstance(p, PodTopologySpreadPlugin))


def refused(session: Session, name: str) -> dict[str, str]:
    """The nodes the spread filter refuses ``name`` on, with the reason."""
    task = task_of(session, name)
    out = {}
    for r in plugin_of(session).filter(task, session.table, False):
        for row in np.flatnonzero(r.nodes):
            out[session.table.nodes[row].name] = r.reason
    return out


def test_pods_placed_earlier_in_the_session_count_and_a_rollback_takes_them_out() -> None:
    session = session_with(
        zone_nodes("a", "b"), [web("w0", spread()), web("w1", spread())], PLUGINS
    )
    assert refused(session, "w1") == {}
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "w0"), "n0")
        assert refused(session, "w1") == {"n0": SKEW}
        stmt.discard()
    assert refused(session, "w1") == {}


def test_an_eviction_in_the_session_lowers_the_count() -> None:
    pods = [web("old-0", node_name="n0"), web("old-1", node_name="n0"), web("w", spread())]
    session = session_with(zone_nodes("a", "b"), pods, PLUGINS)
    assert refused(session, "w") == {"n0": SKEW}
    with session.statement() as stmt:
        stmt.evict(task_of(session, "old-0"), EvictReason.PREEMPTED)
        assert refused(session, "w") == {"n0": SKEW}  # 1 + 1 - 0 = 2 > 1
        stmt.evict(task_of(session, "old-1"), EvictReason.PREEMPTED)
        assert refused(session, "w") == {}
        stmt.discard()


def test_a_node_without_the_key_is_refused_unresolvably() -> None:
    nodes = [*zone_nodes("a"), node("bare", labels={HOSTNAME: "bare"})]
    session = session_with(nodes, [web("w", spread())], PLUGINS)
    task = task_of(session, "w")
    [r] = plugin_of(session).filter(task, session.table, False)
    assert (r.reason, r.resolvable) == (MISSING_LABEL, False)
    assert session.fit(task).candidates().tolist() == [False, False]


@pytest.mark.parametrize(
    ("min_domains", "expected"),
    [
        pytest.param(None, {"n0": SKEW}, id="min-of-the-domains"),
        # fewer domains (2) than minDomains: the global minimum is 0
        pytest.param(3, {"n0": SKEW, "n1": SKEW}, id="min-domains-above-the-domains"),
    ],
)
def test_min_domains(min_domains: int | None, expected: dict[str, str]) -> None:
    extra = {} if min_domains is None else {"minDomains": min_domains}
    pods = [
        web("a-0", node_name="n0"),
        web("a-1", node_name="n0"),
        web("b-0", node_name="n1"),
        web("w", spread(**extra)),
    ]
    session = session_with(zone_nodes("a", "b"), pods, PLUGINS)
    assert refused(session, "w") == expected


def test_node_affinity_policy_decides_which_nodes_count_as_domains() -> None:
    pods = [web("a-0", node_name="n0")]
    only_a = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    honor = web("honor", spread(), affinity=only_a)
    ignore = web("ignore", spread(nodeAffinityPolicy="Ignore"), affinity=only_a)
    session = session_with(zone_nodes("a", "b"), [*pods, honor, ignore], PLUGINS)
    # Honor: zone b is no domain (min 1: zone a alone); Ignore: zone b counts (min 0).
    assert refused(session, "honor") == {}
    assert refused(session, "ignore") == {"n0": SKEW}


def test_match_label_keys_merge_the_pods_own_values() -> None:
    def versioned(name: str, version: str, **kw: Any) -> Obj:
        c = spread(matchLabelKeys=["version"])
        return pod(
            name, labels={"app": "web", "version": version}, **kw, topologySpreadConstraints=[c]
        )

    pods = [versioned("old-0", "1", node="n0"), versioned("old-1", "1", node="n0")]
    session = session_with(
        zone_nodes("a", "b"), [*pods, versioned("v1", "1"), versioned("v2", "2")], PLUGINS
    )
    assert refused(session, "v1") == {"n0": SKEW}
    assert refused(session, "v2") == {}  # the old version's pods do not count for it


def test_default_constraints_spread_by_the_pods_service() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}},
    }
    nodes = zone_nodes("a", "a")
    pods = [web("old", node_name="n0"), web("w")]
    session = session_with(nodes, pods, PLUGINS, objects=[service])
    task = task_of(session, "w")
    pc = plugin_of(session).constraints(task)
    assert [e.constraint.topology_key for e in pc.soft] == [HOSTNAME, ZONE]
    scores = plugin_of(session).score(task, session.table, np.array([0, 1]), False)
    assert scores.tolist()[1] > scores.tolist()[0]


def test_defaults_off_with_an_empty_list() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}},
    }
    plugins = [
        PluginConfig("predicates"),
        PluginConfig("podtopologyspread", {"defaultingType": "List"}),
    ]
    session = session_with(zone_nodes("a"), [web("w")], plugins, objects=[service])
    assert plugin_of(session).constraints(task_of(session, "w")).soft == ()


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        pytest.param({"defaultingType": "Sometimes"}, "defaultingType", id="defaulting-type"),
        pytest.param({"weight": -1}, "weight", id="weight"),
        pytest.param(
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE}]},
            "defaultConstraints",
            id="defaults-with-system",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "labelSelector",
            id="selector-in-defaults",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "maxSkew",
            id="bad-default",
        ),
    ],
)
def test_bad_arguments_are_refused_at_resolve(arguments: Obj, field: str) -> None:
    config = SchedulerConfiguration(
        actions=(), tiers=(TierConfig((PluginConfig("podtopologyspread", arguments),)),)
    )
    with pytest.raises(ConfigError) as info:
        default_registry().resolve(config)
    assert field in f"{info.value.field}: {info.value.message}"


# --------------------------------------------------------------------------------------------
# Properties: the one-row filter is the filter on that row; a rollback restores the counts

ZONES = ("a", "b", "c")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Obj], list[Obj]]:
    n = draw(st.integers(1, 6))
    nodes = []
    for i in range(n):
        labels = {HOSTNAME: f"n{i}"}
        zone = draw(st.sampled_from((*ZONES, None)))
        if zone is not None:
            labels[ZONE] = zone
        taints = ["dedicated=x:NoSchedule"] if draw(st.booleans()) and i else None
        nodes.append(node(f"n{i}", labels=labels, taints=taints))
    pods = []
    for j in range(draw(st.integers(0, 8))):
        where = f"n{draw(st.integers(0, n - 1))}"
        app = draw(st.sampled_from(("web", "db")))
        pods.append(pod(f"e{j}", labels={"app": app}, node=where))
    constraints = []
    for key in draw(st.lists(st.sampled_from((ZONE, HOSTNAME)), min_size=1, max_size=2)):
        extra: dict[str, Any] = {}
        if draw(st.booleans()):
            extra["minDomains"] = draw(st.integers(1, 4))
        if draw(st.booleans()):
            extra["nodeTaintsPolicy"] = "Honor"
        constraints.append(spread(key, draw(st.integers(1, 2)), **extra))
    pods.append(web("w", *constraints))
    return nodes, pods


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_the_row_filter_is_the_filter_on_that_row(world: tuple[list[Obj], list[Obj]]) -> None:
    nodes, pods = world
    session = session_with(nodes, pods, PLUGINS)
    task = task_of(session, "w")
    plugin = plugin_of(session)
    rejected = np.zeros(len(session.table), dtype=np.bool_)
    for r in plugin.filter(task, session.table, False):
        rejected |= r.nodes
    rows = [plugin.filter_row(task, session.table, row, False) for row in range(len(rejected))]
    assert rows == (~rejected).tolist()


@settings(max_examples=40, deadline=None)
@given(worlds(), st.lists(st.integers(0, 5), max_size=4))
def test_a_rolled_back_statement_leaves_the_verdicts_as_they_were(
    world: tuple[list[Obj], list[Obj]], places: Sequence[int]
) -> None:
    nodes, pods = world
    extra = [web(f"x{k}") for k in range(len(places))]
    session = session_with(nodes, [*pods, *extra], PLUGINS)
    task = task_of(session, "w")
    plugin = plugin_of(session)

    def verdicts() -> list[tuple[str, list[bool]]]:
        rs = plugin.filter(task, session.table, False)
        return [(r.reason, r.nodes.tolist()) for r in rs]

    before = verdicts()
    with session.statement() as stmt:
        for k, at in enumerate(places):
            name = session.table.nodes[at % len(session.table)].name
            stmt.pipeline(task_of(session, f"x{k}"), name)
        stmt.discard()
    assert verdicts() == before


def test_a_nominated_pod_does_not_count_itself() -> None:
    session = session_with(zone_nodes("a", "b"), [web("w", spread())], PLUGINS)
    task = task_of(session, "w")
    with session.statement() as stmt:
        stmt.pipeline(task, "n0")  # now held on n0: zone a counts it
        assert refused(session, "w") == {}
        assert plugin_of(session).filter_row(task, session.table, 0, False)
        stmt.discard()
