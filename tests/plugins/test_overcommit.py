"""Tests of scheduler.plugins.overcommit: the room enqueue admits gangs into, counted as
Volcano's overcommit plugin counts it (allocatable x factor - used - inqueue)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.core_objects import task_from_pod
from scheduler.api.errors import ConfigError
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.plugins.overcommit import (
    VOLCANO_QUEUE_GATE,
    inqueue,
    overcommitted,
    reserved_by_running,
)
from tests.builders import default_registry, node, pod, pod_group, session_with

S = TaskStatus


def job(
    phase: PodGroupPhase, min_member: int, min_resources: dict[str, int], *tasks: Any
) -> JobInfo:
    """A gang with ``tasks`` as (status, cpu milli, gates) each."""
    j = JobInfo(
        uid="ns/g",
        namespace="ns",
        name="g",
        queue="default",
        min_member=min_member,
        min_resources=Resource(min_resources),
        phase=phase,
        has_pod_group=True,
    )
    for i, (status, cpu, gates) in enumerate(tasks):
        t = task_from_pod(pod(f"t{i}", ns="ns", cpu=f"{cpu}m", memory=None, group="g"))
        t.status = status
        t.scheduling_gates = gates
        j.add_task(t)
    return j


Q, R, P = PodGroupPhase.INQUEUE, PodGroupPhase.RUNNING, PodGroupPhase.PENDING
KUEUE = ("kueue.x-k8s.io/admission",)


@pytest.mark.parametrize(
    ("gang", "reserved"),
    [
        (job(Q, 2, {"cpu": 2000}), {"cpu": 2000}),
        (job(Q, 2, {"cpu": 2000}, (S.RUNNING, 1000, ())), {"cpu": 2000}),
        (job(Q, 2, {"cpu": 3000}, (S.GATED, 1000, KUEUE)), {"cpu": 2000}),
        (job(Q, 2, {"cpu": 1000}, (S.GATED, 1500, KUEUE)), {}),
        (job(Q, 2, {"cpu": 3000}, (S.GATED, 1000, (VOLCANO_QUEUE_GATE,))), {"cpu": 3000}),
        (job(R, 1, {"cpu": 3000}, (S.RUNNING, 1000, ()), (S.PENDING, 1000, ())), {"cpu": 2000}),
        (job(R, 2, {"cpu": 3000}, (S.RUNNING, 1000, ()), (S.PENDING, 1000, ())), {}),
        (job(R, 1, {"cpu": 500}, (S.RUNNING, 1000, ())), {}),
        (job(P, 1, {"cpu": 3000}), {}),
        (job(Q, 1, {}), {}),
    ],
    ids=[
        "inqueue-whole-min",
        "inqueue-placed-pods-still-reserve",
        "inqueue-less-gated",
        "inqueue-gated-above-min",
        "inqueue-volcano-gate-not-deducted",
        "running-uncovered-part",
        "running-below-min-member-reserves-nothing",
        "running-covered",
        "pending-reserves-nothing",
        "no-min-resources",
    ],
)
def test_inqueue(gang: JobInfo, reserved: dict[str, int]) -> None:
    assert inqueue(gang) == Resource(reserved)


@pytest.mark.parametrize(
    ("minimum", "placed", "reserved"),
    [
        (
            {"cpu": 3000, "memory": 10, "pods": 3},
            {"cpu": 1000, "memory": 4},
            {"cpu": 2000, "memory": 6, "pods": 3},
        ),
        ({"nvidia.com/gpu": 2, "hugepages-2Mi": 4}, {}, {"nvidia.com/gpu": 2, "hugepages-2Mi": 4}),
        ({"count/pods": 3, "requests.cpu": 3000, "ephemeral-storage": 5}, {}, {}),
    ],
    ids=["native", "scalar-resources", "quota-names-and-other-native-reserve-nothing"],
)
def test_reserved_by_running(
    minimum: dict[str, int], placed: dict[str, int], reserved: dict[str, int]
) -> None:
    assert reserved_by_running(Resource(minimum), Resource(placed)) == Resource(reserved)


@pytest.mark.parametrize(
    ("factor", "out"),
    [
        (1.2, {"cpu": 7200, "memory": 24}),
        (1.0, {"cpu": 6000, "memory": 20}),
        (1.25, {"cpu": 7500, "memory": 25}),
    ],
    ids=["1.2-read-as-six-fifths", "1", "1.25"],
)
def test_overcommitted(factor: float, out: dict[str, int]) -> None:
    assert overcommitted({"cpu": 6000, "memory": 20}, factor) == Resource(out)


def room(objects: list[Any], **arguments: Any) -> Resource:
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    groups = [o for o in objects if o["kind"] == "PodGroup"]
    session = session_with(nodes, pods, [PluginConfig("overcommit", arguments)], pod_groups=groups)
    measured = session.enqueue_room()
    assert measured is not None
    assert "overcommit factor" in measured.measure
    return Resource({k: v for k, v in measured.room.items() if k == "cpu"})


@pytest.mark.parametrize(
    ("objects", "arguments", "cpu"),
    [
        ([node("n1", cpu="2"), node("n2", cpu="4")], {}, 7200),
        ([node("n1", cpu="2"), node("n2", cpu="4")], {"overcommitFactor": 1.0}, 6000),
        ([node("n1", cpu="2"), node("n2", cpu="4", unschedulable=True, ready=False)], {}, 7200),
        (
            [node("n1", cpu="4"), pod("other", cpu="1", node="n1", scheduler="default-scheduler")],
            {},
            3800,
        ),
        (
            [
                node("n1", cpu="4"),
                pod_group("g", min_member=2, min_resources={"cpu": "2"}, phase="Inqueue"),
                pod("g-0", cpu="1", node="n1", group="g"),
            ],
            {},
            4800 - 1000 - 2000,
        ),
    ],
    ids=[
        "allocatable-times-1.2",
        "factor-1",
        "cordoned-and-not-ready-nodes-count",
        "every-schedulers-pods-use",
        "inqueue-gang-reserves-its-min-beside-its-placed-pods",
    ],
)
def test_the_room(objects: list[Any], arguments: dict[str, Any], cpu: int) -> None:
    assert room(objects, **arguments) == Resource({"cpu": cpu})


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"overcommitFactor": 0.8}, "overcommitFactor must be 1 or more"),
        ({"overcommitFactor": "1.2"}, "overcommitFactor"),
        ({"overcommit-factor": 1.2}, "unknown argument"),
    ],
    ids=["below-one", "mistyped", "volcano-spelling-in-sluice-config"],
)
def test_bad_arguments_are_refused_at_load(arguments: dict[str, Any], field: str) -> None:
    config = SchedulerConfiguration(
        actions=(), tiers=(TierConfig((PluginConfig("overcommit", arguments),)),)
    )
    with pytest.raises(ConfigError, match=field):
        default_registry().resolve(config)
