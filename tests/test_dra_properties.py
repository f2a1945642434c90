"""DRA invariants on generated clusters (hypothesis): whatever the devices, claims, shared
claims, pods asking the extended resource the class names (KEP-5004), gangs and devices
already held, one cycle of the default actions never gives a device to two claims, gives
each bound pod all its claims' devices (on the node it is bound to, of the class and
count asked; for its extended resource, as many devices as it asks, unless the node
offers the resource itself), and binds a gang's pods in full or not at all."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.app import builtin_registry
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Bind
from scheduler.framework.session import open_session
from tests.builders import KIND_ORDER, cache_with, node, pod, pod_group
from tests.dra_builders import (
    claim,
    claims_spec,
    device_class,
    first_available,
    gpus,
    request,
    resource_slice,
)

Obj = dict[str, Any]
A100 = 'device.attributes["gpu.example.com"].model == "a100"'
R = "example.com/gpu"


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], dict[str, int]]:
    """Objects, and the devices each claim asks (by claim name)."""
    objects: list[Obj] = [device_class(extended_resource=R)]
    n_nodes = draw(st.integers(1, 4))
    for i in range(n_nodes):
        name = f"n{i}"
        objects.append(node(name, cpu="8"))
        if draw(st.integers(0, 3)) == 0:  # this node offers the resource itself
            objects[-1]["status"]["allocatable"][R] = "2"
        model = draw(st.sampled_from(["a100", "h100"]))
        objects.append(
            resource_slice(f"{name}-gpu", gpus(draw(st.integers(0, 4)), model=model), node=name)
        )
    asks: dict[str, int] = {}
    pods = draw(st.integers(1, 10))
    shared = draw(st.booleans())
    if shared:
        objects.append(claim("shared", request(count=1)))
        asks["shared"] = 1
    for p in range(pods):
        kind = draw(st.sampled_from(["one", "two", "a100", "first", "shared", "none", "ext"]))
        if kind == "shared" and not shared:
            kind = "one"
        group = f"g{p // 3}" if draw(st.booleans()) else None
        if kind == "none":
            objects.append(pod(f"p{p}", cpu="1", group=group))
            continue
        if kind == "ext":
            count = str(draw(st.integers(1, 2)))
            requests = {"cpu": "1", R: count}
            containers = [{"name": "main", "resources": {"requests": requests}}]
            objects.append(pod(f"p{p}", group=group, containers=containers))
            continue
        name = "shared" if kind == "shared" else f"c{p}"
        if kind != "shared":
            req = {
                "one": request(count=1),
                "two": request(count=2),
                "a100": request(count=1, selectors=[A100]),
                "first": first_available("gpu", request("big", count=3), request("small", count=1)),
            }[kind]
            objects.append(claim(name, req))
            asks[name] = {"one": 1, "two": 2, "a100": 1, "first": -1}[kind]
        objects.append(pod(f"p{p}", cpu="1", group=group, resourceClaims=claims_spec(name)))
    groups = Counter(
        o["metadata"]["labels"].get("scheduling.sluice.dev/pod-group")
        for o in objects
        if o["kind"] == "Pod"
    )
    for g, n in groups.items():
        if g:
            objects.append(pod_group(g, min_member=n))
    return objects, asks


@given(clusters())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_devices_are_given_once_and_in_full(generated: tuple[list[Obj], dict[str, int]]) -> None:
    objects, asks = generated
    ordered = sorted(objects, key=lambda o: KIND_ORDER.index(o["kind"]))
    cache = cache_with(*ordered)
    session = open_session(cache.snapshot(), builtin_registry().resolve(SchedulerConfiguration()))
    for action in session.resolved.actions:
        action.execute(session)
    session.close()
    binds = [e for e in session.effects if isinstance(e, Bind)]
    owner: dict[str, str] = {}
    allocations: dict[str, Any] = {}
    for b in binds:
        for binding in b.claims:
            if binding.allocation is None:
                continue
            previous = allocations.setdefault(binding.key, binding.allocation)
            assert previous == binding.allocation, "a shared claim gets one allocation"
            assert binding.allocation.node_name == b.node
            if binding.extended is not None:
                asks[binding.key] = b.task.request[R]
    for key, allocation in allocations.items():
        name = key.split("/", 1)[1]
        devices = [str(d) for d in allocation.devices]
        if asks.get(key, asks.get(name, 0)) > 0:
            assert len(devices) == asks.get(key, asks.get(name)), (name, devices)
        for d in devices:
            assert owner.setdefault(d, name) == name, f"{d} given to {owner[d]} and {name}"
    for b in binds:
        claimed = {c.claim_name for c in b.task.spec.resource_claims}
        assert claimed <= {bc.name for bc in b.claims}, "every claim of a bound pod is written"
        own = session.nodes[b.node].allocatable  # the snapshot's: devices counted in
        extended = [bc for bc in b.claims if bc.extended is not None]
        served = R in (
            session.snapshot.dra.extended.get(b.node, {}) if session.snapshot.dra else {}
        )
        assert len(extended) == (1 if R in b.task.request and served else 0), (b, own)
    bound_groups = Counter(b.task.job_id for b in binds)
    for job_id, n in bound_groups.items():
        job = session.jobs[job_id]
        if job.has_pod_group:
            assert n >= job.min_member, f"gang {job_id} bound in part"
