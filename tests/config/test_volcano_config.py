"""Volcano's volcano-scheduler.conf read as Sluice's configuration, and ``sluice config
convert`` (scheduler.config.volcano_conf, scheduler.cli.config)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import app
from scheduler.api.errors import ConfigError
from scheduler.cli.main import main
from scheduler.config import (
    PluginConfig,
    configuration_document,
    load_configuration_file,
    parse_configuration,
)
from scheduler.config.volcano_conf import from_volcano, is_volcano

TIERS = [
    {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
    {"plugins": [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}]},
]


def conf(actions: str = "enqueue, allocate, backfill", **extra: Any) -> dict[str, Any]:
    return {"actions": actions, "tiers": extra.pop("tiers", TIERS), **extra}


def plugins(config: Any) -> list[list[tuple[str, dict[str, Any]]]]:
    return [[(p.name, dict(p.arguments)) for p in t.plugins] for t in config.tiers]


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ("enqueue, allocate, backfill", ("enqueue", "allocate", "backfill")),
        ("enqueue,allocate,gangpreempt,gangreclaim", ("enqueue", "allocate", "preempt", "reclaim")),
        ("allocate, preempt, gangpreempt", ("allocate", "preempt")),
        ("enqueue, elect, allocate, reserve", ("enqueue", "elect", "allocate", "reserve")),
    ],
    ids=["default", "gang-actions-are-sluice-actions", "duplicates-once", "elect-reserve"],
)
def test_actions_one_string(actions: str, expected: tuple[str, ...]) -> None:
    assert from_volcano(conf(actions)).actions == expected


def _tier(*entries: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"plugins": list(entries)}]


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [
        (
            TIERS,
            [
                [("priority", {}), ("gang", {}), ("conformance", {})],
                [
                    ("predicates", {}),
                    ("podtopologyspread", {}),
                    ("proportion", {}),
                    ("nodeorder", {}),
                    ("interpodaffinity", {}),
                ],
            ],
        ),
        (_tier({"name": "capacity", "enableHierarchy": True}), [[("proportion", {})]]),
        (_tier({"name": "capacity"}, {"name": "proportion"}), [[("proportion", {})]]),
        (_tier({"name": "network-topology-aware"}), [[("topology", {})]]),
        (_tier({"name": "pdb"}, {"name": "gang"}), [[("gang", {})]]),
        (_tier({"name": "gang", "enablePreemptable": False}), [[("gang", {})]]),
        (_tier({"name": "priority", "enableJobOrder": True}), [[("priority", {})]]),
        (_tier({"name": "overcommit"}), [[("overcommit", {})]]),
        (
            _tier({"name": "overcommit", "arguments": {"overcommit-factor": "1.5"}}),
            [[("overcommit", {"overcommitFactor": 1.5})]],
        ),
        (_tier({"name": "drf"}), [[("drf", {})]]),
        (
            _tier({"name": "drf", "enablePreemptable": False}),
            [[("drf", {"preemptable": False})]],
        ),
        (
            _tier({"name": "drf", "enableHierarchy": True, "enableQueueOrder": True}),
            [[("drf", {"hierarchy": True})]],
        ),
        (
            _tier(
                {
                    "name": "nodeorder",
                    "arguments": {
                        "leastrequested.weight": 2,
                        "balancedresource.weight": 0,
                        "nodeaffinity.weight": 3,
                        "tainttoleration.weight": 0,
                        "podaffinity.weight": 4,
                    },
                }
            ),
            [
                [
                    (
                        "nodeorder",
                        {
                            "leastAllocatedWeight": 2,
                            "balancedAllocationWeight": 0,
                            "nodeAffinityWeight": 3,
                            "taintTolerationWeight": 0,
                        },
                    ),
                    ("interpodaffinity", {"weight": 4}),
                ]
            ],
        ),
        (
            _tier(
                {"name": "predicates"},
                {"name": "nodeorder", "arguments": {"podtopologyspread.weight": 5}},
            ),
            [
                [
                    ("predicates", {}),
                    ("podtopologyspread", {"weight": 5}),
                    ("nodeorder", {}),
                    ("interpodaffinity", {}),
                ]
            ],
        ),
        (
            _tier({"name": "binpack"}),
            [
                [
                    ("nodeorder", {"mostAllocatedWeight": 1, "leastAllocatedWeight": 0}),
                    ("interpodaffinity", {}),
                ]
            ],
        ),
        (
            _tier(
                {"name": "nodeorder", "arguments": {"mostrequested.weight": 1}},
                {
                    "name": "binpack",
                    "arguments": {
                        "binpack.weight": 5,
                        "binpack.resources": "nvidia.com/gpu",
                        "binpack.resources.nvidia.com/gpu": 8,
                    },
                },
            ),
            [
                [
                    (
                        "nodeorder",
                        {
                            "mostAllocatedWeight": 5,
                            "leastAllocatedWeight": 0,
                            "resources": {"cpu": 1, "memory": 1, "nvidia.com/gpu": 8},
                        },
                    ),
                    ("interpodaffinity", {}),
                ]
            ],
        ),
    ],
    ids=[
        "default-tiers",
        "capacity-is-proportion",
        "capacity-and-proportion-once",
        "network-topology-aware-is-topology",
        "pdb-is-built-in",
        "gang-enable-preemptable-false-is-sluice",
        "a-switch-on-changes-nothing",
        "overcommit",
        "overcommit-factor",
        "drf",
        "drf-enable-preemptable-false-is-an-argument",
        "drf-enable-hierarchy-is-an-argument",
        "nodeorder-weights",
        "predicates-brings-the-spread-filter-and-its-weight",
        "binpack-is-most-allocated",
        "binpack-merges-into-nodeorder",
    ],
)
def test_plugins_mapped(tiers: list[dict[str, Any]], expected: list[Any]) -> None:
    config = from_volcano(conf(tiers=tiers))
    assert plugins(config) == expected
    app.resolve(config)  # Sluice's registries take it


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (conf("enqueue, shuffle"), "actions[shuffle]", "no descheduling"),
        (conf("enqueue, dance"), "actions[dance]", "unknown action; Sluice has enqueue"),
        (
            conf(tiers=_tier({"name": "drf", "enableHierarchy": True}, {"name": "proportion"})),
            "tiers[0].plugins",
            "drf with enableHierarchy and proportion in one tier conflict",
        ),
        (
            conf(tiers=_tier({"name": "overcommit", "arguments": {"overcommit-ratio": 2}})),
            "tiers[0].plugins[0] (overcommit).arguments.overcommit-ratio",
            "Sluice's overcommit takes no such argument",
        ),
        (
            conf(tiers=_tier({"name": "drf", "enableJobOrder": False})),
            "tiers[0].plugins[0] (drf).enableJobOrder",
            "cannot turn off one of their hooks",
        ),
        (
            conf(tiers=_tier({"name": "drf", "arguments": {"x": 1}})),
            "tiers[0].plugins[0] (drf).arguments.x",
            "Sluice's drf takes no such argument",
        ),
        (
            conf(tiers=_tier({"name": "deviceshare"})),
            "tiers[0].plugins[0] (deviceshare)",
            "use plugin gpushare",
        ),
        (conf(tiers=_tier({"name": "magic"})), "tiers[0].plugins[0] (magic)", "unknown plugin"),
        (
            conf(tiers=_tier({"name": "gang", "enableJobReady": False})),
            "tiers[0].plugins[0] (gang).enableJobReady",
            "cannot turn off one of their hooks",
        ),
        (
            conf(tiers=_tier({"name": "nodeorder", "arguments": {"imagelocality.weight": 1}})),
            "tiers[0].plugins[0] (nodeorder).arguments.imagelocality.weight",
            "Sluice's nodeorder has no such score",
        ),
        (
            conf(tiers=_tier({"name": "predicates", "arguments": {"predicate.CacheEnable": True}})),
            "tiers[0].plugins[0] (predicates).arguments.predicate.CacheEnable",
            "Sluice's predicates takes no such argument",
        ),
        (
            conf(
                configurations=[
                    {"name": "preempt", "arguments": {"topologyAwarePreemptWorkerNum": 4}}
                ]
            ),
            "configurations[0] (preempt).arguments.topologyAwarePreemptWorkerNum",
            "Sluice's preempt takes no such argument",
        ),
        (conf(metrics={"address": "x"}), "metrics", "Sluice serves Prometheus metrics"),
    ],
    ids=[
        "shuffle",
        "unknown-action",
        "drf-hierarchy-beside-proportion",
        "overcommit-unknown-argument",
        "drf-switch-off",
        "drf-argument",
        "deviceshare",
        "unknown-plugin",
        "switch-off",
        "missing-score",
        "plugin-argument",
        "action-argument",
        "metrics",
    ],
)
def test_refused_in_one_line_naming_it(doc: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_volcano(doc)
    assert raised.value.field == field
    assert message in raised.value.message
    assert str(raised.value).startswith(f"volcano-scheduler.conf: {field}: ")
    assert "\n" not in str(raised.value)


def test_action_arguments_mapped() -> None:
    config = from_volcano(
        conf(
            "enqueue, allocate, gangpreempt, reclaim",
            configurations=[
                {
                    "name": "gangpreempt",
                    "arguments": {
                        "minCandidateNodesPercentage": 20,
                        "maxCandidateNodesAbsolute": 500,
                        "enableTopologyAwarePreemption": True,
                    },
                },
                {"name": "reclaim", "arguments": {"minCandidateNodesAbsolute": 50}},
            ],
        )
    )
    assert config.action_arguments == {
        "preempt": {"minCandidateNodesPercentage": 20, "maxCandidateNodes": 500},
        "reclaim": {"minCandidateNodesAbsolute": 50},
    }
    app.resolve(config)


def test_is_volcano_and_the_configmap(tmp_path: Path) -> None:
    inner = yaml.safe_dump(conf())
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
        "data": {"volcano-scheduler.conf": inner},
    }
    assert is_volcano(conf()) and is_volcano(configmap)
    assert not is_volcano(configuration_document(from_volcano(conf())))
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(configmap))
    assert load_configuration_file(path).actions == ("enqueue", "allocate", "backfill")


def test_convert_prints_a_configuration_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "volcano-scheduler.conf"
    path.write_text(
        yaml.safe_dump(conf("enqueue, allocate, preempt", tiers=_tier({"name": "binpack"})))
    )
    assert main(["config", "convert", str(path)]) == 0
    out = capsys.readouterr().out
    doc = yaml.safe_load(io.StringIO(out))
    assert doc["kind"] == "SchedulerConfiguration"
    back = parse_configuration(doc)
    assert back.actions == ("enqueue", "allocate", "preempt")
    assert back.tiers[0].plugins == (
        PluginConfig("nodeorder", {"mostAllocatedWeight": 1, "leastAllocatedWeight": 0}),
        PluginConfig("interpodaffinity"),
    )


def test_convert_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "volcano-scheduler.conf"
    path.write_text(yaml.safe_dump(conf(tiers=_tier({"name": "sla"}))))
    assert main(["config", "convert", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tiers[0].plugins[0] (sla): Sluice has no sla plugin" in err


HELM = Path(__file__).parent / "volcano"
"""Volcano's Helm chart's default ``volcano-scheduler.conf`` (``installer/helm/chart/
volcano/config/``) and the ConfigMap the chart renders from it, as they are."""


@pytest.mark.parametrize(
    "name",
    ["volcano-scheduler.conf", "volcano-scheduler-configmap.yaml"],
    ids=["file", "configmap"],
)
def test_the_helm_charts_default_converts_unchanged(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "convert", str(HELM / name)]) == 0
    back = parse_configuration(yaml.safe_load(io.StringIO(capsys.readouterr().out)))
    assert back.actions == ("enqueue", "allocate", "backfill")
    assert plugins(back) == [
        [("priority", {}), ("gang", {}), ("conformance", {})],
        [
            ("overcommit", {}),
            ("drf", {"preemptable": False}),
            ("predicates", {}),
            ("podtopologyspread", {}),  # brought by predicates, as Volcano's runs it
            ("proportion", {}),
            ("nodeorder", {"mostAllocatedWeight": 1, "leastAllocatedWeight": 0}),
            ("interpodaffinity", {}),  # brought by nodeorder, as Volcano's scores it
        ],
    ]
    app.resolve(load_configuration_file(HELM / name))  # what sluice run --config does


def test_the_helm_charts_default_schedules_a_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sluice simulate --config`` with the chart's file, on 4 CPU: a gang of three (3 CPU)
    is admitted and bound; one whose minResources (5 CPU) exceed the cluster times 1.2
    stays Pending, saying so."""
    scenario = tmp_path / "gang.yaml"
    group = "scheduling.sluice.dev/pod-group"
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        },
        *(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"minMember": 3, "minResources": {"cpu": cpu}},
            }
            for name, cpu in (("train", "3"), ("huge", "5"))
        ),
        *(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{g}-{i}", "namespace": "default", "labels": {group: g}},
                "spec": {
                    "schedulerName": "sluice",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                },
            }
            for g, cpu in (("train", "1"), ("huge", "1700m"))
            for i in range(3)
        ),
    ]
    scenario.write_text(yaml.safe_dump_all(docs))
    config = str(HELM / "volcano-scheduler.conf")
    code = main(["simulate", str(scenario), "--config", config, "--output", "json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(result["bindings"]) == ["default/train-0", "default/train-1", "default/train-2"]
    assert result["podGroups"]["default/huge"] == "Pending"
    assert "times the overcommit factor 1.2" in result["pending"]["default/huge-0"]
