"""Tests of scheduler.plugins.interpodaffinity: the preferred inter-pod affinity score
follows the session, its arguments, and its cost for pods without terms. kube-scheduler's
own tables are ported as scenarios (tests/conformance/kubernetes/interpodaffinity)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.api.errors import ConfigError
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.extension_points import NODE_SCORER
from scheduler.framework.session import Session
from scheduler.plugins.interpodaffinity import InterPodAffinityPlugin
from tests.builders import HOSTNAME, default_registry, node, pod, session_with, task_of

Obj = dict[str, Any]


def plugins(**arguments: Any) -> list[PluginConfig]:
    return [PluginConfig("predicates"), PluginConfig("interpodaffinity", arguments)]


def nodes(n: int = 3) -> list[Obj]:
    return [node(f"n{i}", labels={HOSTNAME: f"n{i}"}) for i in range(n)]


def term(app: str, weight: int = 10) -> Obj:
    return {
        "weight": weight,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": HOSTNAME,
        },
    }


def prefers(app: str, *, anti: bool = False, weight: int = 10) -> Obj:
    kind = "podAntiAffinity" if anti else "podAffinity"
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [term(app, weight)]}}


def scores(session: Session, name: str) -> list[float]:
    plugin = next(p for _, p in session.plugins if isinstance(p, InterPodAffinityPlugin))
    rows = np.arange(len(session.table), dtype=np.intp)
    out: list[float] = plugin.score(task_of(session, name), session.table, rows, False).tolist()
    return out


def test_a_pod_placed_earlier_in_the_session_counts_and_a_rollback_takes_it_out() -> None:
    pods = [pod("cache", labels={"app": "cache"}), pod("web", affinity=prefers("cache"))]
    session = session_with(nodes(), pods, plugins())
    assert scores(session, "web") == [0.0, 0.0, 0.0]
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "cache"), "n1")
        assert scores(session, "web") == [0.0, 100.0, 0.0]
        stmt.discard()
    assert scores(session, "web") == [0.0, 0.0, 0.0]


def test_anti_affinity_lowers_and_weights_add_up() -> None:
    pods = [
        pod("a", labels={"app": "a"}, node="n0"),
        pod("b", labels={"app": "b"}, node="n1"),
        pod(
            "p",
            affinity={
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term("a", 5)]},
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [term("b", 10)]
                },
            },
        ),
    ]
    session = session_with(nodes(), pods, plugins())
    # raw: n0 +5, n1 -10, n2 0 -> (s + 10) / 15 * 100, truncated
    assert scores(session, "p") == [100.0, 0.0, 66.0]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param({}, [100.0, 0.0, 0.0], id="hard-weight-1"),
        pytest.param({"hardPodAffinityWeight": 0}, [0.0, 0.0, 0.0], id="hard-weight-0"),
    ],
)
def test_held_pods_required_affinity_draws_the_pod_they_need(
    arguments: Obj, expected: list[float]
) -> None:
    needs_db = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    pods = [pod("app", node="n0", affinity=needs_db), pod("db", labels={"app": "db"})]
    session = session_with(nodes(), pods, plugins(**arguments))
    assert scores(session, "db") == expected


def test_held_pods_preferred_terms_can_be_ignored() -> None:
    pods = [
        pod("likes-db", node="n0", affinity=prefers("db")),
        pod("db", labels={"app": "db"}),
    ]
    on = session_with(nodes(), pods, plugins())
    off = session_with(nodes(), pods, plugins(ignorePreferredTermsOfExistingPods=True))
    assert scores(on, "db") == [100.0, 0.0, 0.0]
    assert "interpodaffinity" not in off.hooks.plugins_of(NODE_SCORER)


def test_no_terms_anywhere_registers_no_score() -> None:
    session = session_with(nodes(), [pod("a", node="n0"), pod("p")], plugins())
    assert "interpodaffinity" not in session.hooks.plugins_of(NODE_SCORER)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        pytest.param({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight", id="hard-weight"),
        pytest.param({"weight": -1}, "weight", id="weight"),
        pytest.param({"ignorePreferredTermsOfExistingPods": 1}, "ignorePreferred", id="type"),
    ],
)
def test_bad_arguments_are_refused_at_resolve(arguments: Obj, field: str) -> None:
    config = SchedulerConfiguration(
        actions=(), tiers=(TierConfig((PluginConfig("interpodaffinity", arguments),)),)
    )
    with pytest.raises(ConfigError) as info:
        default_registry().resolve(config)
    assert field in f"{info.value.field}: {info.value.message}"
