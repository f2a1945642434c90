"""Every extension point is asked through the rule it declares (issue 24 point 3).

The declaration (:class:`~scheduler.framework.extension_points.Point`) names the rule; the
session binds each point once with :func:`~scheduler.framework.tiers.bind`, which takes
the rule from the declaration; every question of the session goes through that binding.
So changing a point's rule changes how it is asked everywhere. Checked three ways: the
binding of each rule, a spy on each point's binding while a cycle asks it, and that no
module calls a rule's function past the binding.
"""

from __future__ import annotations

import ast
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from scheduler.config import SchedulerConfiguration
from scheduler.framework import tiers
from scheduler.framework.extension_points import POINTS, HookSet, Point, Rule
from scheduler.framework.session import open_session
from tests.actions.test_error_boundary import WORLDS, registry
from tests.builders import cache_with

RULE_FUNCTIONS = {
    Rule.LEXICOGRAPHIC: tiers.lexicographic,
    Rule.FIRST_FAILURE: tiers.first_failure,
    Rule.ALL_AGREE: tiers.all_agree,
    Rule.ANY: tiers.any_yes,
    Rule.VOTE: tiers.enqueue_vote,
    Rule.EVERY_FILTER: tiers.filter_groups,
    Rule.EVERY_ROW_FILTER: tiers.passes_row,
    Rule.LARGEST: tiers.largest,
    Rule.WEIGHTED_SUM: tiers.weighted_score,
    Rule.FIRST_TIER_INTERSECTION: tiers.first_tier_intersection,
    Rule.CHAIN: tiers.chain,
    Rule.LAYERED: tiers.layered,
    Rule.FIRST_ANSWER: tiers.first_answer,
    Rule.NOTIFY: tiers.notify,
    Rule.NOTIFY_REVERSED: tiers.notify_reversed,
    Rule.MERGE: tiers.merge,
    Rule.CONCAT: tiers.concat,
}


def test_every_rule_has_its_function() -> None:
    assert set(RULE_FUNCTIONS) == set(Rule)


@pytest.mark.parametrize("rule", list(Rule), ids=lambda r: r.name)
def test_bind_takes_the_rule_from_the_declaration(rule: Rule) -> None:
    asker = tiers.bind(HookSet(), Point("anything", rule))
    assert isinstance(asker, partial)
    assert asker.func is RULE_FUNCTIONS[rule]


def test_every_point_is_declared_once() -> None:
    assert len({p.name for p in POINTS}) == len(POINTS)
    import scheduler.framework.extension_points as ep

    declared = {v.name for v in vars(ep).values() if isinstance(v, Point)}
    assert declared == {p.name for p in POINTS}


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_a_cycle_asks_each_point_through_its_binding(point: Point[Any, Any]) -> None:
    """A spy on the point's binding sees the cycle ask it (with a plugin registered for
    it): the question went through the declared rule, not around it."""
    from tests import faulty

    config = SchedulerConfiguration()
    first, *rest = config.tiers
    from scheduler.config import PluginConfig, TierConfig

    # faulty registers a hook at the point (neutral for pods not named bad-*)
    neutral = PluginConfig("faulty", {"point": point.name, "podPrefix": "no-such-pod"})
    config = SchedulerConfiguration(
        actions=config.actions, tiers=(TierConfig((*first.plugins, neutral)), *rest)
    )
    session = open_session(cache_with(*WORLDS[point.name]).snapshot(), registry().resolve(config))
    asked: list[tuple[Any, ...]] = []
    bound = session._askers[point.name]

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        return bound(*args, **kwargs)

    session._askers[point.name] = spy
    faulty.FIRED.clear()
    for action in session.resolved.actions:
        session.run_action(action)
    session.record_queue_shares()
    assert asked, f"{point.name} was not asked through its binding"


def test_no_module_calls_a_rule_past_the_binding() -> None:
    """Only tiers.py calls the rules' functions; the rest of the code asks through the
    session (its typed questions, through ``Session._ask``), which uses :func:`tiers.bind`."""
    names = {f.__name__ for f in RULE_FUNCTIONS.values()}
    root = Path(__file__).resolve().parents[2] / "scheduler"
    found = []
    for path in root.rglob("*.py"):
        if path.name == "tiers.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "tiers"
                and node.attr in names
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} tiers.{node.attr}")
    assert found == []
