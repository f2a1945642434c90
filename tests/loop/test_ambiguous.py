"""Ambiguous API outcomes (issue 17 point 1): a write whose reply was lost keeps its
assumption until the outcome is known, and never gives its room away twice; a 409
naming the node chosen is success."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from scheduler import app
from scheduler.api.errors import ConflictError, ServerError, assigned_node
from scheduler.logging import quiet
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import pod


@pytest.mark.parametrize(
    ("error", "node"),
    [
        (
            ConflictError(
                'Operation cannot be fulfilled on pods/binding "p": pod default/p '
                'is already assigned to node "n1"'
            ),
            "n1",
        ),
        (ConflictError("the object has been modified"), ""),
        (ServerError('pod default/p is already assigned to node "n1"'), ""),
    ],
    ids=["409-names-a-node", "409-names-none", "not-a-409"],
)
def test_the_node_a_409_names(error: Exception, node: str) -> None:
    assert assigned_node(error) == node  # type: ignore[arg-type]


def _arrivals() -> list[Arrival]:
    """Four nodes with room for 16 pods, 16 pods at 0 s, and at 0.1 s four pods of higher
    priority that may not preempt: they find the nodes full (assumed) and are parked."""
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}"},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
        for i in range(4)
    ]
    first = [pod(f"p{i:02d}", cpu="900m", memory=None) for i in range(16)]
    later = [
        pod(f"high{i}", cpu="900m", memory=None, priority=100, preemptionPolicy="Never")
        for i in range(4)
    ]
    return [
        *(Arrival(0.0, o, "test") for o in [*nodes, *first]),
        *(Arrival(0.1, o, "test") for o in later),
    ]


@pytest.mark.parametrize("watch_delay", [0.0, 2.0], ids=["watch-on-time", "watch-lags-2s"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lost_bind_replies_never_over_allocate_a_node(seed: int, watch_delay: float) -> None:
    """Half the bind replies lost, half a second after the call, with the watch on time
    and lagging 2 s behind the store. A bind whose reply is lost took effect; forgetting
    it at once would free its room, wake the parked pods of higher priority, and bind one
    of them there too (with the watch lagging, the bind is not yet in the events to say
    otherwise). Its outcome is read first: the room stays taken, the late pods pending."""
    quiet()
    resolved = app.resolve()
    sim = Simulation(
        Scenario(arrivals=_arrivals()),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(lost_reply_rate={"bind": 0.5}, latency={"bind": 0.5}, seed=seed),
        until=60.0,
        watch_delay=watch_delay,
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    per_node = Counter(sim.result.bindings.values())
    assert all(n <= 4 for n in per_node.values()), per_node
    assert sorted(sim.result.bindings) == [f"default/p{i:02d}" for i in range(16)]
    registry = sim.loop.metrics.registry
    lost = registry.get_sample_value("scheduler_api_ambiguous_total", {"call": "bind"})
    assert lost and lost >= 1
    for stored in sim.store.list("Pod")[0]:
        node = stored["spec"].get("nodeName")
        if node:
            assert sim.result.bindings[f"default/{stored['metadata']['name']}"] == node


def test_a_victim_whose_delete_reply_was_lost_counts_as_evicted() -> None:
    """Every delete reply lost: each delete took effect, so the preemptor is bound on its
    node, nothing is evicted twice, and no failure reverts its nomination."""
    quiet()
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "2", "memory": "16Gi", "pods": "110"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "low", "namespace": "default"},
            "spec": {
                "schedulerName": "sluice",
                "nodeName": "n1",
                "priority": 0,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            },
            "status": {"phase": "Running"},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "high", "namespace": "default"},
            "spec": {
                "schedulerName": "sluice",
                "priority": 100,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            },
        },
    ]
    resolved = app.resolve()
    sim = Simulation(
        Scenario(arrivals=[Arrival(0.0, o, "test") for o in objects]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(lost_reply_rate={"delete": 1.0, "evict": 1.0}, seed=1),
        until=60.0,
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    assert sim.result.bindings == {"default/high": "n1"}
    preempts = [e for e in sim.result.timeline if e["event"] == "preempt"]
    assert len(preempts) == 1, preempts  # decided once: no revert, no second preemption
    registry = sim.loop.metrics.registry
    assert registry.get_sample_value(
        "scheduler_api_ambiguous_resolved_total", {"call": "evict", "outcome": "took_effect"}
    ) or registry.get_sample_value(
        "scheduler_api_ambiguous_resolved_total", {"call": "delete", "outcome": "took_effect"}
    )
