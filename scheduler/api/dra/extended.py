"""Extended resources served by DRA devices, KEP-5004 (layer 0, pure).

A DeviceClass may name an extended resource (``spec.extendedResourceName``, for example
``example.com/gpu``), and every class stands for ``deviceclass.resource.kubernetes.io/
<class name>`` as well. A pod that asks such a resource in ``resources.requests``, with
no ``resourceClaims`` at all, is then served by devices of that class on a node whose
``status.allocatable`` does not offer the resource (a node that offers it serves it the
old way, through its device plugin). The scheduler allocates the devices to a claim it
makes for the pod: one ``ExactCount`` request per container's share, named
``container-<i>-request-<j>`` (``i`` the container's place in ``initContainers`` then
``containers``, ``j`` the resource's place among the container's sorted requests). An
init container that ends before the others start uses devices of the containers after
it first, and asks only for what they do not cover; of several such init containers
only the largest ask is made, and the others are mapped to it.

:func:`resource_classes` says which class serves which resource name (of two classes
naming one resource, the newer serves it; at the same time, the name sorted first, as
kube-scheduler and the API documentation have it); :func:`plan` turns a pod's
containers into the claim's requests and the pod's request mappings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.api.dra.model import (
    DeviceClassInfo,
    DeviceRequest,
    ExtendedClaim,
    RequestMapping,
    Subrequest,
)
from scheduler.api.pod import ContainerRequests

__all__ = ["IMPLICIT_PREFIX", "is_extended_name", "plan", "resource_classes"]

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass serves the resource ``deviceclass.resource.kubernetes.io/<name>``."""


def is_extended_name(name: str) -> bool:
    """May DRA serve resource ``name``: an extended resource (a domain that is not
    Kubernetes' own), or a class's implicit name?"""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def resource_classes(classes: Mapping[str, DeviceClassInfo]) -> dict[str, str]:
    """Resource name -> the name of the class that serves it."""
    out: dict[str, str] = {}
    chosen: dict[str, DeviceClassInfo] = {}
    for cls in classes.values():
        out[IMPLICIT_PREFIX + cls.name] = cls.name
        name = cls.extended_resource_name
        if not name:
            continue
        other = chosen.get(name)
        if other is None or (-cls.created, cls.name) < (-other.created, other.name):
            chosen[name] = cls
    for name, cls in chosen.items():
        out[name] = cls.name
    return out


def _container_share(
    container: ContainerRequests,
    resource: str,
    device_class: str,
    reusable: Sequence[DeviceRequest | None],
) -> tuple[DeviceRequest | None, list[RequestMapping]]:
    """What ``container`` asks of ``resource``: the requests of ``reusable`` it uses first
    (in order, until they cover its amount), then a request of its own for the rest."""
    amount = dict(container.amounts).get(resource, 0)
    if not amount:
        return None, []
    covered = 0
    mappings = []
    for r in reusable:
        if r is None or r.exactly is None:
            continue
        covered += r.exactly.count
        mappings.append(RequestMapping(container.name, resource, r.name))
        if covered >= amount:
            return None, mappings
    name = f"container-{container.index}-request-{container.names.index(resource)}"
    mappings.append(RequestMapping(container.name, resource, name))
    return DeviceRequest(name, exactly=Subrequest(name, device_class, count=amount - covered)), (
        mappings
    )


def plan(containers: Sequence[ContainerRequests], served: Mapping[str, str]) -> ExtendedClaim:
    """The claim for the resources of ``served`` (resource name -> class name) that
    ``containers`` ask, and the mappings for the pod's status (module docstring)."""
    requests: list[DeviceRequest] = []
    mappings: list[RequestMapping] = []
    slots = max((c.index for c in containers), default=-1) + 1
    for resource in sorted(served):
        device_class = served[resource]
        long_lived: list[DeviceRequest | None] = [None] * slots
        long_maps: list[RequestMapping] = []
        for c in containers:
            if not c.short_lived:
                req, maps = _container_share(c, resource, device_class, ())
                long_lived[c.index] = req
                long_maps.extend(maps)
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for c in containers:
            if c.short_lived:
                req, maps = _container_share(c, resource, device_class, long_lived[c.index :])
                if req is not None and req.exactly is not None:
                    short_names.add(req.name)
                    if largest is None or largest.exactly.count < req.exactly.count:  # type: ignore[union-attr]
                        largest = req
                short_maps.extend(maps)
        if largest is not None:
            requests.append(largest)
            if len(short_names) > 1:
                short_maps = [
                    RequestMapping(m.container, m.resource, largest.name)
                    if m.request in short_names
                    else m
                    for m in short_maps
                ]
        requests.extend(r for r in long_lived if r is not None)
        mappings.extend(long_maps)
        mappings.extend(short_maps)
    requests.sort(key=lambda r: r.name)
    return ExtendedClaim(tuple(requests), tuple(mappings))
