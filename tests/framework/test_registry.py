"""Tests of scheduler.framework.registry: explicit registries, duplicates refused, and every
refusal of Registry.resolve naming the field of the configuration."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import actions, plugins
from scheduler.api.errors import ConfigError, RegistryError
from scheduler.api.labels import API_VERSION
from scheduler.app import builtin_registry, resolve
from scheduler.config import (
    DEFAULT_ACTIONS,
    PluginConfig,
    SchedulerConfiguration,
    TierConfig,
    parse_configuration,
)
from scheduler.framework.registry import ActionSpec, NoArguments, PluginSpec, Registry
from scheduler.plugins.gang import GangPlugin
from scheduler.plugins.nodeorder import NodeOrderArguments

CORE_PLUGINS = {
    "conformance",
    "gang",
    "interpodaffinity",
    "nodeorder",
    "podtopologyspread",
    "predicates",
    "priority",
    "proportion",
}
KNOWN_PLUGINS = ", ".join(builtin_registry().plugin_names)


def tiers(*plugins_: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"plugins": list(plugins_)}]


def config(**fields: Any) -> SchedulerConfiguration:
    return parse_configuration(
        {"apiVersion": API_VERSION, "kind": "SchedulerConfiguration", **fields}
    )


def test_builtin_registry_holds_every_shipped_name() -> None:
    registry = builtin_registry()
    assert set(registry.plugin_names) >= CORE_PLUGINS
    assert registry.plugin_names == sorted(registry.plugin_names)
    assert {"allocate", "backfill", "enqueue"} <= set(registry.action_names)
    assert registry.plugin("gang").factory is GangPlugin


def test_nothing_registers_itself() -> None:
    registry = Registry()
    assert registry.plugin_names == [] and registry.action_names == []
    with pytest.raises(RegistryError, match="no plugin named 'gang'"):
        registry.plugin("gang")


@pytest.mark.parametrize(
    ("fill", "message"),
    [
        (plugins.register_builtin, "plugin 'priority' is already registered"),
        (actions.register_builtin, "action 'enqueue' is already registered"),
    ],
    ids=["plugins", "actions"],
)
def test_registering_twice_is_refused(fill: Any, message: str) -> None:
    registry = Registry()
    fill(registry)
    with pytest.raises(RegistryError, match=message):
        fill(registry)


def test_duplicate_single_names() -> None:
    registry = Registry()
    registry.add_plugin(PluginSpec("x", GangPlugin))
    registry.add_action(ActionSpec("x", lambda _: None))  # a plugin and an action may share
    with pytest.raises(RegistryError, match="plugin 'x' is already registered"):
        registry.add_plugin(PluginSpec("x", GangPlugin))
    with pytest.raises(RegistryError, match="action 'x' is already registered"):
        registry.add_action(ActionSpec("x", lambda _: None))


def test_resolve_the_defaults() -> None:
    resolved = resolve()
    assert tuple(a.name for a in resolved.actions) == DEFAULT_ACTIONS
    assert [(p.spec.name, p.tier) for p in resolved.plugins] == [
        ("priority", 0),
        ("gang", 0),
        ("conformance", 0),
        ("predicates", 1),
        ("volumerestrictions", 1),
        ("nodevolumelimits", 1),
        ("volumebinding", 1),
        ("volumezone", 1),
        ("podtopologyspread", 1),
        ("gpushare", 1),
        ("dra", 1),
        ("proportion", 1),
        ("topology", 1),
        ("reservation", 1),
        ("interpodaffinity", 1),
        ("nodeorder", 1),
    ]
    nodeorder = resolved.plugins[-1]
    assert nodeorder.arguments == NodeOrderArguments()
    assert resolved.plugins[0].arguments == NoArguments()
    first, second = resolved.build_plugins(), resolved.build_plugins()
    assert [p.name for _, p in first] == [p.spec.name for p in resolved.plugins]
    assert all(a is not b for (_, a), (_, b) in zip(first, second, strict=True))  # fresh


def test_resolve_builds_typed_arguments() -> None:
    resolved = resolve(
        config(
            tiers=tiers(
                {
                    "name": "nodeorder",
                    "arguments": {
                        "mostAllocatedWeight": 1,
                        "leastAllocatedWeight": 0,
                        "resources": {"cpu": 2},
                    },
                }
            )
        )
    )
    assert resolved.plugins[0].arguments == NodeOrderArguments(
        leastAllocatedWeight=0, mostAllocatedWeight=1, resources={"cpu": 2}
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"actions": ["enqueue", "shuffle"]},
            "actions[1]",
            "unknown action 'shuffle'; known: allocate, backfill, dissolve, elect, enqueue",
        ),
        (
            {"tiers": tiers({"name": "gang"}, {"name": "binpack"})},
            "tiers[0].plugins[1].name",
            f"unknown plugin 'binpack'; known: {KNOWN_PLUGINS}",
        ),
        (
            {"tiers": tiers({"name": "gang"}) + tiers({"name": "gang"})},
            "tiers[1].plugins[0].name",
            "plugin 'gang' is listed twice",
        ),
        (
            {"tiers": tiers({"name": "gang"}, {"name": "gang"})},
            "tiers[0].plugins[1].name",
            "plugin 'gang' is listed twice",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"leastAllocatedWeight": "1"}})},
            "tiers[0].plugins[0].arguments.leastAllocatedWeight",
            "expected int, got str '1'",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"leastAllocatedWeight": 1.5}})},
            "tiers[0].plugins[0].arguments.leastAllocatedWeight",
            "expected int, got float 1.5",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"resources": {"cpu": "x"}}})},
            "tiers[0].plugins[0].arguments.resources.cpu",
            "expected int, got str 'x'",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"resources": [1]}})},
            "tiers[0].plugins[0].arguments.resources",
            "expected map, got list [1]",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"spread": 1}})},
            "tiers[0].plugins[0].arguments.spread",
            "unknown argument; known: balancedAllocation",
        ),
        (
            {"tiers": tiers({"name": "gang", "arguments": {"x": 1}})},
            "tiers[0].plugins[0].arguments.x",
            "unknown argument; known: none",
        ),
        (
            {"tiers": tiers({"name": "nodeorder", "arguments": {"mostAllocatedWeight": -1}})},
            "tiers[0].plugins[0].arguments.mostAllocatedWeight",
            "mostAllocatedWeight must be >= 0, got -1",
        ),
        (
            {"actions": ["allocate"], "actionArguments": {"backfill": {}}},
            "actionArguments.backfill",
            "arguments for an action that is not in actions",
        ),
        (
            {"actions": ["allocate"], "actionArguments": {"allocate": {"x": 1}}},
            "actionArguments.allocate.x",
            "unknown argument; known: none",
        ),
        (
            {"actions": ["preempt"], "actionArguments": {"preempt": {"roiThreshold": 0.1}}},
            "actionArguments.preempt.roiThreshold",
            "applies to reclaim only: preemption takes the victims of lowest priority first",
        ),
        (
            {"actions": ["reclaim"], "actionArguments": {"reclaim": {"roiThreshold": -1}}},
            "actionArguments.reclaim.roiThreshold",
            "roiThreshold must not be negative",
        ),
        (
            {"actions": ["preempt"], "actionArguments": {"preempt": {"minRuntimeSeconds": 30}}},
            "actionArguments.preempt.minRuntimeSeconds",
            "applies to reclaim only: a preemption follows priority",
        ),
        (
            {"actions": ["reclaim"], "actionArguments": {"reclaim": {"minRuntimeSeconds": -1}}},
            "actionArguments.reclaim.minRuntimeSeconds",
            "minRuntimeSeconds must not be negative",
        ),
        (
            {"actions": ["dissolve"], "actionArguments": {"dissolve": {"graceSeconds": -1}}},
            "actionArguments.dissolve.graceSeconds",
            "graceSeconds must be a number of seconds, at least 0",
        ),
        (
            {"actions": ["dissolve"], "actionArguments": {"dissolve": {"graceSeconds": "1m"}}},
            "actionArguments.dissolve.graceSeconds",
            "expected float, got str '1m'",
        ),
    ],
    ids=[
        "unknown-action",
        "unknown-plugin",
        "duplicate-plugin-across-tiers",
        "duplicate-plugin-in-tier",
        "argument-str-for-int",
        "argument-float-for-int",
        "argument-nested-type",
        "argument-list-for-dict",
        "unknown-argument",
        "argument-to-plugin-without-arguments",
        "argument-out-of-range",
        "arguments-for-absent-action",
        "unknown-action-argument",
        "roiThreshold-for-preempt",
        "roiThreshold-out-of-range",
        "minRuntimeSeconds-for-preempt",
        "minRuntimeSeconds-out-of-range",
        "graceSeconds-out-of-range",
        "graceSeconds-not-a-number",
    ],
)
def test_resolve_refuses(fields: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        builtin_registry().resolve(config(**fields))
    assert info.value.field == field
    assert str(info.value).startswith(f"SchedulerConfiguration: {field}: {message}")


def test_resolve_with_dataclass_config_directly() -> None:
    cfg = SchedulerConfiguration(
        actions=("allocate",), tiers=(TierConfig((PluginConfig("nope"),)),)
    )
    with pytest.raises(ConfigError, match=r"tiers\[0\]\.plugins\[0\]\.name: unknown plugin"):
        resolve(cfg)


def test_reclaim_takes_roi_threshold_and_the_window_of_preempt() -> None:
    resolved = builtin_registry().resolve(
        config(
            actions=["preempt", "reclaim"],
            actionArguments={
                "preempt": {"maxDomains": 3},
                "reclaim": {"roiThreshold": 0.2, "maxDomains": 2},
            },
        )
    )
    preempt, reclaim = resolved.actions
    assert (preempt.args.maxDomains, reclaim.args.maxDomains) == (3, 2)
    assert reclaim.gang_search.roi_threshold == 0.2
