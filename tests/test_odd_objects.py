"""No object stops the scheduler (issue 17 point 4), as a property.

Generated Nodes and Pods the real API server would accept: quantities from 1m to 1000Ei
(a Quantity has no upper bound), unknown extended resource names, empty node selectors
and affinity terms, missing optional fields, duplicate keys in lists (tolerations, ports,
containers of the same resources). They go through the converter and the cache into the
real loop on the embedded cluster for a few cycles. The run must end, no cycle may fail,
no job's attempt may raise (the per-job boundary would turn a plugin's crash into a
``SchedulerError`` reason, which is still a reason: so no pod may end with that code
and no cycle may report a job error), and every pod of Sluice ends bound or pending with
a reason; no node is over-allocated: the store's bound pods, summed in the units the
scheduler counts (:func:`~scheduler.api.pod.pod_request`), within the store's Node's
allocatable (:func:`~scheduler.api.core_objects.node_from_object`, capped as Sluice caps it).
"""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.core_objects import node_from_object
from scheduler.api.pod import pod_request
from scheduler.api.reasons import ReasonCode
from scheduler.api.resource import ZERO, Resource
from scheduler.logging import configure, quiet
from scheduler.sim.runner import Simulation
from tests.builders import node, pod
from tests.simulated import simulate

Obj = dict[str, Any]
NO_REASON = "not scheduled yet"

QUANTITIES = st.sampled_from(
    ["1m", "100m", "1", "4", "1Gi", "16Gi", "1Pi", "999Ei", "1000Ei", "1e18", "8E", "0"]
)
RESOURCES = st.sampled_from(["cpu", "memory", "ephemeral-storage", "example.com/foo", "pods"])


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet()


@st.composite
def nodes(draw: st.DrawFn, i: int) -> Obj:
    allocatable = draw(st.dictionaries(RESOURCES, QUANTITIES, max_size=5))
    obj: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}}
    if draw(st.booleans()):
        obj["status"] = {"allocatable": allocatable}
    if draw(st.booleans()):
        obj["metadata"]["labels"] = {"zone": draw(st.sampled_from(["a", "b", ""]))}
    return obj


@st.composite
def pods(draw: st.DrawFn, i: int) -> Obj:
    requests = draw(st.dictionaries(RESOURCES.filter(lambda r: r != "pods"), QUANTITIES))
    container: Obj = {"name": "c", "image": "x"}
    if requests or draw(st.booleans()):
        container["resources"] = {"requests": requests}
    if draw(st.booleans()):
        port = {"containerPort": 80, "hostPort": 8080}
        container["ports"] = [port, dict(port)]  # a duplicate key in a list
    spec: Obj = {"schedulerName": "sluice", "containers": [container]}
    if draw(st.booleans()):
        spec["containers"].append({**container, "name": "d"})
    if draw(st.booleans()):
        spec["nodeSelector"] = {}
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
            "podAntiAffinity": {},
        }
    if draw(st.booleans()):
        t = {"key": "k", "operator": "Exists"}
        spec["tolerations"] = [t, dict(t)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": "default"},
        "spec": spec,
    }


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    n = draw(st.integers(1, 3))
    m = draw(st.integers(1, 5))
    return [draw(nodes(i)) for i in range(n)] + [draw(pods(i)) for i in range(m)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters())
def test_odd_objects_never_stop_the_scheduler(objects: list[Obj]) -> None:
    job_errors: list[dict[str, str]] = []
    sim = simulate(
        objects, max_cycles=20, on_cycle=lambda report, _: job_errors.append(report.job_errors)
    )
    result = sim.result
    failures = [
        (s.labels, s.value)
        for metric in sim.loop.metrics.registry.collect()
        for s in metric.samples
        if s.name == "sluice_cycle_failures_total" and s.value
    ]
    assert failures == []
    assert sim.cache.rejected == {}
    assert [e for e in job_errors if e] == []
    for key, reason in result.pending.items():
        assert reason and reason != NO_REASON, key
        assert result.pending_codes.get(key) != ReasonCode.SCHEDULER_ERROR, (key, reason)
    for name, (allocatable, used) in _store_allocation(sim).items():
        assert used.fits_in(allocatable), (name, allocatable, used)


def _store_allocation(sim: Simulation) -> dict[str, tuple[Resource, Resource]]:
    """Each Node of the store: its allocatable and the sum of the requests of the pods the
    store has bound to it (every one bound by the scheduler: none is generated bound)."""
    nodes, _ = sim.store.list("Node")
    pods, _ = sim.store.list("Pod")
    out = {n["metadata"]["name"]: (node_from_object(n).allocatable, ZERO) for n in nodes}
    for p in pods:
        name = (p.get("spec") or {}).get("nodeName")
        if name in out:
            allocatable, used = out[name]
            out[name] = (allocatable, used + pod_request(p["spec"], obj=p["metadata"]["name"]))
    return out


def test_a_capped_node_is_logged_once_and_the_huge_pod_says_why() -> None:
    """The issue's objects: a Node of 1000Ei memory (capped, told once in the log, not at
    every cycle) and a pod asking 999Ei (pending, its reason naming the resource)."""
    objects = [node("huge", memory="1000Ei"), pod("greedy", cpu=None, memory="999Ei")]
    try:
        configure(2)
        with structlog.testing.capture_logs() as logs:
            sim = simulate(objects, max_cycles=10, quiet_logs=False)
    finally:
        quiet()
    adjusted = [e for e in logs if e["event"] == "object adjusted"]
    assert [e["object"] for e in adjusted] == ["Node huge"], adjusted
    assert "memory" in adjusted[0]["reason"]
    assert sim.loop.cycles > 1
    assert "memory" in sim.result.pending["default/greedy"], sim.result.pending
