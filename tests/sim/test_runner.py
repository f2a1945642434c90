"""Simulation: what stops a run, departures, and nominations as the API has them."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from scheduler import app
from scheduler.api import labels as L
from scheduler.sim.kubelet import RUN_FOR_ANNOTATION
from scheduler.sim.runner import DEFAULT_VIRTUAL_HORIZON, Simulation, SimulationResult
from scheduler.sim.scenario import Arrival, Departure, Scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

Obj = dict[str, Any]


def node(name: str = "n1", cpu: str = "2") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"}},
    }


def pod(name: str, *, node_name: str | None = None, run_for: str | None = None) -> Obj:
    spec: Obj = {
        "schedulerName": L.SCHEDULER_NAME,
        "priority": 0,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    meta: Obj = {"name": name, "namespace": "default"}
    if run_for:
        meta["annotations"] = {RUN_FOR_ANNOTATION: run_for}
    status = {"phase": "Running"} if node_name else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def build(
    objects: list[Obj], departures: list[Departure] | None = None, **kwargs: Any
) -> Simulation:
    scenario = Scenario(
        arrivals=[Arrival(0.0, o, "test") for o in objects], departures=departures or []
    )
    resolved = app.resolve()
    return Simulation(
        scenario, lambda cache, ports: app.build_loop(resolved, cache, ports), **kwargs
    )


def run(sim: Simulation) -> SimulationResult:
    return anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})


# A pod that runs for 10 minutes keeps the kubelet busy, so the run cannot go idle before.
BUSY = [node(), pod("long", node_name="n1", run_for="10m"), pod("p")]


@pytest.mark.parametrize(
    ("objects", "kwargs", "stopped_by", "seconds"),
    [
        ([node(), pod("p")], {}, "idle", 1.0),
        (BUSY, {}, "idle", 601.0),
        (BUSY, {"max_cycles": 3}, "cycles", 2.0),
        (BUSY, {"until": 30.0}, "until", 30.0),
        (BUSY, {"until": 2.5}, "until", 2.5),
        (BUSY, {"until": 30.0, "max_cycles": 3}, "cycles", 2.0),
        (BUSY, {"until": 900.0}, "idle", 601.0),
    ],
    ids=[
        "idle",
        "idle-after-the-kubelet",
        "cycles",
        "until",
        "until-between-cycles",
        "cycles-first",
        "idle-before-until",
    ],
)
def test_what_stops_a_run(
    objects: list[Obj], kwargs: dict[str, Any], stopped_by: str, seconds: float
) -> None:
    result = run(build(objects, **kwargs))
    assert (result.stopped_by, result.seconds) == (stopped_by, pytest.approx(seconds))
    assert result.to_json()["stoppedBy"] == stopped_by
    assert result.to_json()["seconds"] == result.seconds


@pytest.mark.parametrize(
    ("real_time", "until", "expected"),
    [
        (False, None, DEFAULT_VIRTUAL_HORIZON),
        (True, None, math.inf),
        (False, 5.0, 5.0),
        (True, 5.0, 5.0),
        (False, math.inf, math.inf),
    ],
    ids=["virtual-default", "real-no-default", "virtual-given", "real-given", "virtual-none"],
)
def test_the_horizon_by_clock(real_time: bool, until: float | None, expected: float) -> None:
    assert build([], until=until, real_time=real_time).until == expected


@pytest.mark.parametrize("until", [0.0, -1.0], ids=["zero", "negative"])
def test_a_horizon_must_be_positive(until: float) -> None:
    with pytest.raises(ValueError, match="until must be positive"):
        build([], until=until)


def test_departures_delete_objects_of_any_kind_at_their_time() -> None:
    departures = [
        Departure(2.0, "Node", "", "n2", "test"),
        Departure(3.0, "Node", "", "n2", "test"),  # already gone
        Departure(4.0, "Queue", "", L.DEFAULT_QUEUE, "test"),
    ]
    sim = build([node(), node("n2")], departures)
    result = run(sim)
    departed = [
        (e["t"], e["object"], e.get("gone", False))
        for e in result.timeline
        if e["event"] == "depart"
    ]
    assert departed == [
        (2.0, "Node n2", False),
        (3.0, "Node n2", True),
        (4.0, f"Queue {L.DEFAULT_QUEUE}", False),
    ]
    assert sim.store.try_get("Node", "", "n2") is None
    assert sim.store.try_get("Queue", "", L.DEFAULT_QUEUE) is None
    assert sim.store.try_get("Node", "", "n1") is not None
    assert (result.stopped_by, result.seconds) == ("idle", 4.0)


def test_a_bound_pod_departs_gracefully() -> None:
    running = pod("r", node_name="n1")
    running["spec"]["terminationGracePeriodSeconds"] = 7
    sim = build([node(), running], [Departure(1.0, "Pod", "default", "r", "test")])
    seen: dict[float, Any] = {}

    def watch(ev: Any) -> None:
        if ev.kind == "Pod":
            seen[sim.clock.now()] = (ev.type, bool(ev.obj["metadata"].get("deletionTimestamp")))

    sim.store.subscribe(watch)
    run(sim)
    assert seen == {0.0: ("ADDED", False), 1.0: ("MODIFIED", True), 8.0: ("DELETED", True)}


def test_nominations_follow_the_api() -> None:
    """Set: entry and a ``nominate`` event; cleared on an unbound pod: entry dropped;
    cleared on a bound pod: entry kept; the same value written again: nothing."""
    sim = build([])
    store = sim.store
    for name in ("a", "b"):
        store.create(pod(name))

    def nominate(name: str, value: str | None) -> None:
        store.patch(
            "Pod",
            "default",
            name,
            {"status": {"nominatedNodeName": value}},
            patch_type="strategic",
            subresource="status",
        )

    store.create(node())
    nominate("a", "n1")
    nominate("b", "n1")
    nominate("b", "n1")
    assert sim.result.nominations == {"default/a": "n1", "default/b": "n1"}
    store.bind("default", "b", "n1")
    nominate("a", None)
    nominate("b", None)
    assert sim.result.nominations == {"default/b": "n1"}
    events = [(e["event"], e["pod"], e["node"]) for e in sim.result.timeline]
    assert events == [
        ("nominate", "default/a", "n1"),
        ("nominate", "default/b", "n1"),
        ("nomination-cleared", "default/a", "n1"),
        ("nomination-cleared", "default/b", "n1"),
    ]
