"""A pod's resource request as Kubernetes computes it (layer 0).

:func:`pod_requests` reads a pod ``spec`` (JSON) once and gives three views of it:

- ``request``: what the pod asks, as kube-scheduler's NodeResourcesFit filter and the
  kubelet count it (``PodRequests`` of Kubernetes' component-helpers): the containers
  summed, restartable (sidecar) init containers beside them, each ordinary init container
  beside the sidecars started before it (the larger of the two wins); then the pod-level
  ``spec.resources.requests`` (cpu, memory, hugepages-*) replace that sum for the
  resources they name; then ``spec.overhead``; and one ``pods`` slot.
- ``nonzero_pad``: how much more CPU and memory a node counts for the pod in its
  *non-zero requested* sum (kube's ``NodeInfo.NonZeroRequested``: a container that names
  no CPU request counts as 100m, none for memory as 200Mi, unless the pod-level requests
  name it). What kube's scores read of the pods already on a node.
- ``score_pad``: the same for the pod being scored (kube's ``calculatePodResourceRequest``
  with ``NonMissingContainerRequests``), which pads every container missing a CPU or memory
  request whatever the pod level names (the pod-level value then replaces the sum).

Pod-level requests are read as the API server defaults them (so a pod not defaulted by
one, in the embedded cluster or a scenario, counts the same): where ``spec.resources``
has limits, a supported resource it does not request defaults to the containers'
aggregate request when they ask it (CPU and memory), else to the pod-level limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.resource import CPU, MEMORY, PODS, ZERO, Resource, canonical_amount

DEFAULT_MILLI_CPU = 100
"""The CPU (milli) kube's scores count for a container that requests none."""
DEFAULT_MEMORY = 200 * 1024 * 1024
"""The memory (bytes) kube's scores count for a container that requests none."""
NONZERO_DEFAULTS: Mapping[str, int] = {CPU: DEFAULT_MILLI_CPU, MEMORY: DEFAULT_MEMORY}

HUGEPAGES_PREFIX = "hugepages-"
OVERCOMMITTABLE = frozenset({CPU, MEMORY})
"""Pod-level resources whose request may default to the containers' aggregate."""


def pod_level_supported(name: str) -> bool:
    """May ``spec.resources`` name ``name`` (cpu, memory, hugepages-*)?"""
    return name in OVERCOMMITTABLE or name.startswith(HUGEPAGES_PREFIX)


@dataclass(frozen=True, slots=True)
class PodRequests:
    """The three views of a pod's request (module docstring)."""

    request: Resource
    nonzero_pad: Resource
    score_pad: Resource


def as_map(value: object, *, obj: str, field: str) -> Mapping[str, Any]:
    """``value`` as a map (None reads as empty); anything else names the field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(obj, field, f"must be an object, got {type(value).__name__}")
    return value


def as_maps(value: object, *, obj: str, field: str) -> list[tuple[str, Mapping[str, Any]]]:
    """``value`` as a list of maps, each with its field path (``field[i]``)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(obj, field, f"must be a list, got {type(value).__name__}")
    return [
        (f"{field}[{i}]", as_map(v, obj=obj, field=f"{field}[{i}]")) for i, v in enumerate(value)
    ]


def container_amounts(c: Mapping[str, Any], *, obj: str, field: str) -> dict[str, int]:
    """One container's requests, every name it gives kept (an explicit 0 too): limits stand
    for missing requests, as the API server defaults them."""
    res = as_map(c.get("resources"), obj=obj, field=f"{field}.resources")
    return _requests_of(res, obj=obj, field=f"{field}.resources")


def _requests_of(res: Mapping[str, Any], *, obj: str, field: str) -> dict[str, int]:
    raw_requests = as_map(res.get("requests"), obj=obj, field=f"{field}.requests")
    raw_limits = as_map(res.get("limits"), obj=obj, field=f"{field}.limits")
    requests = {n: (v, "requests") for n, v in raw_requests.items()}
    for name, value in raw_limits.items():
        requests.setdefault(name, (value, "limits"))
    return {
        str(n): canonical_amount(n, v, obj=obj, field=f"{field}.{where}.{n}")
        for n, (v, where) in requests.items()
    }


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into[name], amount) if name in into else amount


def _padded(amounts: dict[str, int], pad: Mapping[str, int]) -> dict[str, int]:
    if not pad:
        return amounts
    out = dict(amounts)
    for name, amount in pad.items():
        if name not in amounts:
            out[name] = amount
    return out


def aggregate_containers(
    spec: Mapping[str, Any], *, obj: str, pad: Mapping[str, int] | None = None
) -> dict[str, int]:
    """The containers' aggregate request (no pod level, no overhead); ``pad``: what a
    container that names no request for a resource counts for it (kube's
    ``NonMissingContainerRequests``)."""
    pad = pad or {}
    total: dict[str, int] = {}
    for where, c in as_maps(spec.get("containers"), obj=obj, field="spec.containers"):
        _add(total, _padded(container_amounts(c, obj=obj, field=where), pad))
    sidecars: dict[str, int] = {}
    inits: dict[str, int] = {}
    for where, c in as_maps(spec.get("initContainers"), obj=obj, field="spec.initContainers"):
        req = _padded(container_amounts(c, obj=obj, field=where), pad)
        if c.get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            _max(inits, sidecars)
        else:
            alone = dict(req)
            _add(alone, sidecars)
            _max(inits, alone)
    _max(total, inits)
    return total


def pod_level_requests(
    spec: Mapping[str, Any], containers: Mapping[str, int], *, obj: str
) -> dict[str, int]:
    """``spec.resources.requests`` of the supported resources, defaulted as the API server
    does where ``spec.resources.limits`` is set; empty when the pod sets none."""
    res = as_map(spec.get("resources"), obj=obj, field="spec.resources")
    if not res:
        return {}
    requests = {
        str(n): canonical_amount(n, v, obj=obj, field=f"spec.resources.requests.{n}")
        for n, v in as_map(res.get("requests"), obj=obj, field="spec.resources.requests").items()
    }
    limits = {
        str(n): canonical_amount(n, v, obj=obj, field=f"spec.resources.limits.{n}")
        for n, v in as_map(res.get("limits"), obj=obj, field="spec.resources.limits").items()
    }
    if limits:
        for name, amount in containers.items():
            if name not in requests and name in OVERCOMMITTABLE:
                requests[name] = amount
        for name, amount in limits.items():
            if name not in requests and pod_level_supported(name):
                requests[name] = amount
    return {n: a for n, a in requests.items() if pod_level_supported(n)}


def pod_requests(spec: Mapping[str, Any], *, obj: str) -> PodRequests:
    """The request of the pod of ``spec`` and its non-zero pads (module docstring).
    Errors name ``obj`` and the field."""
    containers = aggregate_containers(spec, obj=obj)
    pod_level = pod_level_requests(spec, containers, obj=obj)
    overhead_raw = spec.get("overhead")
    overhead = (
        Resource.parse(overhead_raw, obj=obj, field="spec.overhead") if overhead_raw else ZERO
    )

    def total(amounts: Mapping[str, int]) -> dict[str, int]:
        out = dict(amounts)
        out.update(pod_level)
        return out

    exact = total(containers)
    request = Resource(exact) + overhead + Resource({PODS: 1})
    # A node's non-zero sum pads every container missing a request; with pod-level requests
    # set, only what neither the containers nor the pod level name.
    node_pad = (
        {n: a for n, a in NONZERO_DEFAULTS.items() if n not in exact}
        if pod_level
        else NONZERO_DEFAULTS
    )
    nonzero = total(aggregate_containers(spec, obj=obj, pad=node_pad)) if node_pad else exact
    score = total(aggregate_containers(spec, obj=obj, pad=NONZERO_DEFAULTS))
    return PodRequests(
        request=request,
        nonzero_pad=_cpu_memory_excess(nonzero, exact),
        score_pad=_cpu_memory_excess(score, exact),
    )


def _cpu_memory_excess(padded: Mapping[str, int], exact: Mapping[str, int]) -> Resource:
    return Resource({n: padded.get(n, 0) - exact.get(n, 0) for n in NONZERO_DEFAULTS})
