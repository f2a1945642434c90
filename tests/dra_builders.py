"""Builders of DRA objects (``resource.k8s.io/v1``) as plain JSON dicts, for the tests.

Shaped as the API server returns them, so tests go through the same conversion
(:mod:`scheduler.api.dra.codec`) as the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"


def device(name: str, **attributes: Any) -> Obj:
    """A device with ``attributes`` (``model="a100"``; an int, bool or string each; a
    value ``("version", "1.2.3")`` is a version) and capacity ``memory`` when given as
    ``memory="80Gi"``."""
    out: Obj = {"name": name}
    memory = attributes.pop("memory", None)
    attrs: Obj = {}
    for k, v in attributes.items():
        if isinstance(v, tuple):
            attrs[k] = {v[0]: v[1]}
        elif isinstance(v, bool):
            attrs[k] = {"bool": v}
        elif isinstance(v, int):
            attrs[k] = {"int": v}
        else:
            attrs[k] = {"string": v}
    if attrs:
        out["attributes"] = attrs
    if memory is not None:
        out["capacity"] = {"memory": {"value": memory}}
    return out


def gpus(n: int, *, model: str = "a100", memory: str = "80Gi", **extra: Any) -> list[Obj]:
    """``n`` devices ``gpu-0`` .. ``gpu-{n-1}`` with ``index``, ``model`` and ``memory``."""
    return [device(f"gpu-{i}", index=i, model=model, memory=memory, **extra) for i in range(n)]


def resource_slice(
    name: str,
    devices: Sequence[Obj],
    *,
    node: str | None = None,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    all_nodes: bool = False,
    node_selector: Mapping[str, str] | None = None,
) -> Obj:
    """A ResourceSlice of ``devices`` on ``node`` (or all nodes, or the nodes with the
    labels ``node_selector``), in pool ``pool`` (default: the node's name)."""
    spec: Obj = {
        "driver": driver,
        "pool": {
            "name": pool or node or name,
            "generation": generation,
            "resourceSliceCount": count,
        },
        "devices": list(devices),
    }
    if node is not None:
        spec["nodeName"] = node
    elif all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": k, "operator": "In", "values": [v]}
                        for k, v in node_selector.items()
                    ]
                }
            ]
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def device_class(name: str = CLASS, *selectors: str, extended_resource: str | None = None) -> Obj:
    """A DeviceClass selecting ``selectors`` (default: the devices of driver ``name``)."""
    exprs = selectors or (f'device.driver == "{name}"',)
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if extended_resource is not None:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def request(
    name: str = "gpu",
    *,
    count: int | None = 1,
    device_class: str = CLASS,
    selectors: Sequence[str] = (),
    all_devices: bool = False,
) -> Obj:
    """A request ``exactly`` of ``count`` devices of ``device_class`` (or all of them)."""
    exactly: Obj = {"deviceClassName": device_class}
    if all_devices:
        exactly["allocationMode"] = "All"
    elif count is not None:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def first_available(name: str, *alternatives: Obj) -> Obj:
    """A request with ``firstAvailable`` alternatives (each a :func:`request`, by name)."""
    subs = [{"name": a["name"], **a["exactly"]} for a in alternatives]
    return {"name": name, "firstAvailable": subs}


def claim(
    name: str,
    *requests: Obj,
    ns: str = "default",
    match_attribute: str | None = None,
    allocated: Sequence[tuple[str, str]] | None = None,
    node: str | None = None,
    reserved_for: Sequence[str] = (),
    owner_pod: str | None = None,
) -> Obj:
    """A ResourceClaim with ``requests`` (default: one GPU). ``allocated`` is a list of
    (request, device) of driver :data:`DRIVER` in pool ``node``; ``reserved_for`` names
    pods (their uid is ``ns/name``, as :func:`tests.builders.pod` makes it)."""
    devices: Obj = {"requests": list(requests) or [request()]}
    if match_attribute is not None:
        devices["constraints"] = [{"matchAttribute": match_attribute}]
    meta: Obj = {"name": name, "namespace": ns, "uid": f"claim-{ns}-{name}"}
    if owner_pod is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner_pod,
                "uid": f"{ns}/{owner_pod}",
                "controller": True,
            }
        ]
    out: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": devices},
    }
    status: Obj = {}
    if allocated is not None:
        meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": r, "driver": DRIVER, "pool": node or "", "device": d}
                    for r, d in allocated
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    if reserved_for:
        status["reservedFor"] = [
            {"resource": "pods", "name": p, "uid": f"{ns}/{p}"} for p in reserved_for
        ]
    if status:
        out["status"] = status
    return out


def claim_template(name: str, *requests: Obj, ns: str = "default") -> Obj:
    """A ResourceClaimTemplate of a claim with ``requests`` (default: one GPU)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": list(requests) or [request()]}}},
    }


def claims_spec(*names: str, templates: Sequence[str] = ()) -> list[Obj]:
    """A pod's ``spec.resourceClaims``: claims by name, then claims by template (each
    entry named like its claim or template)."""
    out = [{"name": n, "resourceClaimName": n} for n in names]
    out += [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    return out
