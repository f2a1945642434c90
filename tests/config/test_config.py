"""Tests of scheduler.config: the SchedulerConfiguration loader and feature gates.

Every refusal is one ConfigError line naming the field; the names and arguments checked
against the registries are in tests/framework/test_registry.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.errors import ConfigError
from scheduler.api.labels import API_VERSION
from scheduler.config import (
    DEFAULT_ACTIONS,
    DEFAULT_TIERS,
    FEATURE_GATES,
    PluginConfig,
    SchedulerConfiguration,
    TierConfig,
    build_arguments,
    load_configuration_file,
    parse_configuration,
    parse_feature_gates,
    with_feature_gates,
)

BASE = {"apiVersion": API_VERSION, "kind": "SchedulerConfiguration"}


def doc(**fields: Any) -> dict[str, Any]:
    return {**BASE, **fields}


def test_empty_document_gives_the_defaults() -> None:
    config = parse_configuration(doc())
    assert config == SchedulerConfiguration()
    assert config.actions == DEFAULT_ACTIONS
    assert config.tiers == DEFAULT_TIERS
    assert config.feature_gates == dict(FEATURE_GATES)
    assert config.gate("SchedulerAsyncPreemption") is True
    assert config.gate("NoSuchGate") is False
    assert config.plugin_names() == [
        "priority",
        "gang",
        "conformance",
        "predicates",
        "volumerestrictions",
        "nodevolumelimits",
        "volumebinding",
        "volumezone",
        "podtopologyspread",
        "gpushare",
        "dra",
        "proportion",
        "topology",
        "reservation",
        "interpodaffinity",
        "nodeorder",
    ]


def test_every_field_is_read() -> None:
    config = parse_configuration(
        doc(
            metadata={"name": "x"},
            schedulerName="other",
            actions=["enqueue", "allocate"],
            tiers=[
                {"plugins": [{"name": "gang"}]},
                {"plugins": [{"name": "nodeorder", "arguments": {"mostAllocatedWeight": 1}}]},
            ],
            actionArguments={"allocate": {}},
            featureGates={"SchedulerAsyncPreemption": False},
            schedulePeriod="500ms",
            percentageOfNodesToScore=50,
            bindConcurrency=8,
            waitForPodGrouper=False,
            podGrouperGrace="30s",
        )
    )
    assert config.scheduler_name == "other"
    assert config.actions == ("enqueue", "allocate")
    assert config.tiers == (
        TierConfig((PluginConfig("gang"),)),
        TierConfig((PluginConfig("nodeorder", {"mostAllocatedWeight": 1}),)),
    )
    assert config.action_arguments == {"allocate": {}}
    assert config.gate("SchedulerAsyncPreemption") is False
    assert config.schedule_period == 0.5
    assert config.percentage_of_nodes_to_score == 50
    assert config.bind_concurrency == 8
    assert config.wait_for_pod_grouper is False
    assert SchedulerConfiguration().wait_for_pod_grouper is True
    assert config.pod_grouper_grace == 30.0
    assert SchedulerConfiguration().pod_grouper_grace == 10.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), ("1h", 3600.0), (3, 3.0), (0.25, 0.25)],
    ids=["ms", "s", "m", "h", "int", "float"],
)
def test_schedule_period(value: object, seconds: float) -> None:
    assert parse_configuration(doc(schedulePeriod=value)).schedule_period == seconds


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"kind": "Foo"}, "kind", "expected SchedulerConfiguration, got 'Foo'"),
        ({"apiVersion": "v1"}, "apiVersion", f"expected {API_VERSION}, got 'v1'"),
        ({"foo": 1}, "foo", "unknown field; known: actionArguments"),
        ({"schedulerName": 3}, "schedulerName", "expected str, got int 3"),
        ({"actions": []}, "actions", "must name at least one action"),
        ({"actions": ["allocate", "allocate"]}, "actions", "an action is listed twice"),
        ({"actions": [1]}, "actions[0]", "expected str, got int 1"),
        ({"actions": "allocate"}, "actions", "got str 'allocate'"),
        ({"actions": ["allocate", "enqueue"]}, "actions[1]", "enqueue must come first"),
        ({"actions": ["enqueue", "allocate", "elect"]}, "actions[2]", "elect must come before"),
        ({"actions": ["elect", "reserve"]}, "actions[0]", "elect must come before allocate"),
        ({"actions": ["elect", "reserve", "allocate"]}, "actions[1]", "reserve must come after"),
        ({"actions": ["allocate", "reserve"]}, "actions[1]", "reserve needs elect"),
        ({"tiers": []}, "tiers", "must be a non-empty list"),
        ({"tiers": "x"}, "tiers", "must be a non-empty list"),
        ({"tiers": [{"plugins": []}]}, "tiers[0].plugins", "must be a non-empty list"),
        (
            {"tiers": [{"plugins": [{"name": "gang"}]}, {}]},
            "tiers[1].plugins",
            "must be a non-empty list",
        ),
        (
            {"tiers": [{"plugins": [{"arguments": {}}]}]},
            "tiers[0].plugins[0].name",
            "every plugin needs a name",
        ),
        (
            {"tiers": [{"plugins": [{"name": "gang", "args": {}}]}]},
            "tiers[0].plugins[0].args",
            "unknown field",
        ),
        (
            {"tiers": [{"plugins": [{"name": "gang", "arguments": [1]}]}]},
            "tiers[0].plugins[0].arguments",
            "must be a map",
        ),
        (
            {"actionArguments": {"allocate": 3}},
            "actionArguments.allocate",
            "expected map, got int 3",
        ),
        (
            {"featureGates": {"Foo": True}},
            "featureGates.Foo",
            "unknown feature gate; known: SchedulerAsyncPreemption",
        ),
        (
            {"featureGates": {"SchedulerAsyncPreemption": "yes"}},
            "featureGates.SchedulerAsyncPreemption",
            "expected true or false, got 'yes'",
        ),
        ({"featureGates": [1]}, "featureGates", "must be a map of gate name to true/false"),
        ({"schedulePeriod": "0s"}, "schedulePeriod", "must be positive"),
        ({"schedulePeriod": -1}, "schedulePeriod", "must be positive"),
        (
            {"schedulePeriod": "fast"},
            "schedulePeriod",
            "expected a duration such as 500ms or 1s, got 'fast'",
        ),
        ({"schedulePeriod": "10"}, "schedulePeriod", "expected a duration"),
        ({"schedulePeriod": True}, "schedulePeriod", "expected a duration"),
        ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore", "must be within 0..100"),
        ({"percentageOfNodesToScore": -1}, "percentageOfNodesToScore", "must be within 0..100"),
        (
            {"percentageOfNodesToScore": "5"},
            "percentageOfNodesToScore",
            "expected int, got str '5'",
        ),
        ({"bindConcurrency": 0}, "bindConcurrency", "must be at least 1"),
        ({"bindConcurrency": 1.5}, "bindConcurrency", "expected int, got float 1.5"),
        ({"waitForPodGrouper": "no"}, "waitForPodGrouper", "expected bool, got str 'no'"),
        ({"podGrouperGrace": "-1s"}, "podGrouperGrace", "must be 0 (tell at once) or positive"),
        ({"podGrouperGrace": "soon"}, "podGrouperGrace", "expected a duration"),
    ],
    ids=[
        "wrong-kind",
        "wrong-apiVersion",
        "unknown-field",
        "schedulerName-type",
        "no-actions",
        "action-twice",
        "action-not-string",
        "actions-not-list",
        "enqueue-not-first",
        "elect-after-allocate",
        "elect-without-allocate",
        "reserve-before-allocate",
        "reserve-without-elect",
        "no-tiers",
        "tiers-not-list",
        "empty-tier",
        "tier-without-plugins",
        "plugin-without-name",
        "plugin-unknown-field",
        "plugin-arguments-not-map",
        "actionArguments-not-map",
        "unknown-feature-gate",
        "feature-gate-not-bool",
        "featureGates-not-map",
        "schedulePeriod-zero",
        "schedulePeriod-negative",
        "schedulePeriod-malformed",
        "schedulePeriod-without-unit",
        "schedulePeriod-bool",
        "percentage-over-100",
        "percentage-negative",
        "percentage-string",
        "bindConcurrency-zero",
        "bindConcurrency-float",
        "waitForPodGrouper-not-bool",
        "podGrouperGrace-negative",
        "podGrouperGrace-not-a-duration",
    ],
)
def test_parse_configuration_refuses(fields: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_configuration(doc(**fields))
    assert info.value.field == field
    assert str(info.value).startswith(f"SchedulerConfiguration: {field}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["nans", "infs"], ids=["nan", "inf"])
def test_schedule_period_must_be_finite(value: str) -> None:
    with pytest.raises(ConfigError):
        parse_configuration(doc(schedulePeriod=value))


@pytest.mark.parametrize(
    ("text", "gates"),
    [
        ("", {}),
        ("SchedulerAsyncPreemption=false", {"SchedulerAsyncPreemption": False}),
        ("SchedulerAsyncPreemption=True", {"SchedulerAsyncPreemption": True}),
        (" SchedulerAsyncPreemption = false , ", {"SchedulerAsyncPreemption": False}),
        (
            "SchedulerAsyncPreemption=true,SchedulerAsyncPreemption=false",
            {"SchedulerAsyncPreemption": False},
        ),
    ],
    ids=["empty", "false", "case-insensitive", "spaces-and-trailing-comma", "last-wins"],
)
def test_parse_feature_gates(text: str, gates: dict[str, bool]) -> None:
    assert parse_feature_gates(text) == gates


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("Foo=true", "Foo", "unknown feature gate; known: SchedulerAsyncPreemption"),
        ("SchedulerAsyncPreemption", "SchedulerAsyncPreemption", "expected KEY=true|false"),
        (
            "SchedulerAsyncPreemption=maybe",
            "SchedulerAsyncPreemption",
            "expected true or false, got 'maybe'",
        ),
        ("SchedulerAsyncPreemption=", "SchedulerAsyncPreemption", "expected true or false, got ''"),
    ],
    ids=["unknown", "no-value", "not-bool", "empty-value"],
)
def test_parse_feature_gates_refuses(text: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_feature_gates(text)
    assert str(info.value) == f"--feature-gates: {field}: {message}"


def test_command_line_gates_override_the_file() -> None:
    config = parse_configuration(doc(featureGates={"SchedulerAsyncPreemption": True}))
    assert with_feature_gates(config, {}) is config
    off = with_feature_gates(config, parse_feature_gates("SchedulerAsyncPreemption=false"))
    assert off.gate("SchedulerAsyncPreemption") is False
    assert config.gate("SchedulerAsyncPreemption") is True


@dataclass(frozen=True)
class Args:
    weight: int = 1
    ratio: float = 0.5
    name: str = ""
    on: bool = False
    maybe: int | None = None
    table: dict[str, int] = field(default_factory=dict)
    items: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Args()),
        ({}, Args()),
        ({"weight": 3, "ratio": 2}, Args(weight=3, ratio=2.0)),
        ({"maybe": None}, Args()),
        ({"maybe": 4}, Args(maybe=4)),
        ({"table": {"cpu": 1}}, Args(table={"cpu": 1})),
        ({"items": ["a", "b"], "on": True}, Args(items=("a", "b"), on=True)),  # type: ignore[arg-type]
    ],
    ids=["none", "empty", "int-to-float", "optional-none", "optional-int", "dict", "list"],
)
def test_build_arguments(raw: dict[str, Any] | None, expected: Args) -> None:
    assert build_arguments(Args, raw, "here") == expected


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"nope": 1}, "here.nope", "unknown argument; known: items, maybe, name, on, ratio"),
        ({"weight": "1"}, "here.weight", "expected int, got str '1'"),
        ({"weight": True}, "here.weight", "expected int, got bool True"),
        ({"ratio": "x"}, "here.ratio", "expected float, got str 'x'"),
        ({"on": 1}, "here.on", "expected bool, got int 1"),
        ({"maybe": "x"}, "here.maybe", "expected int, got str 'x'"),
        ({"table": {"cpu": "x"}}, "here.table.cpu", "expected int, got str 'x'"),
        ({"items": "ab"}, "here.items", "got str 'ab'"),
        ({"weight": -1}, "here.weight", "weight must be >= 0, got -1"),
        ([1], "here", "arguments must be a map"),
    ],
    ids=[
        "unknown",
        "str-for-int",
        "bool-for-int",
        "str-for-float",
        "int-for-bool",
        "optional-wrong",
        "dict-value",
        "str-for-list",
        "post-init",
        "not-a-map",
    ],
)
def test_build_arguments_refuses(raw: Any, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_arguments(Args, raw, "here")
    assert info.value.field == field
    assert message in str(info.value)


def test_load_configuration_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        f"apiVersion: {API_VERSION}\nkind: SchedulerConfiguration\nactions: [allocate]\n"
    )
    assert load_configuration_file(good).actions == ("allocate",)
    for name, text, message in [
        ("bad.yaml", "a: [", "not valid YAML"),
        ("list.yaml", "- 1\n", "expected one SchedulerConfiguration document"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_configuration_file(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_configuration_file(tmp_path / "missing.yaml")
