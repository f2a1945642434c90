"""``resource.k8s.io/v1`` JSON to DRA domain values, and allocations back (layer 0).

Both backends hand the cache plain JSON; these functions read it. Malformed input raises
:class:`~scheduler.api.errors.InvalidInputError` naming the object and the field (the
cache sets such an object aside and carries on). Fields the server defaults (a request's
``allocationMode`` and ``count``) are defaulted here too, so objects read from scenario
files behave as those read from a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.core_objects import parse_time, ref
from scheduler.api.dra.model import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT,
    EXTENDED_CLAIM_ANNOTATION,
    FINALIZER,
    Allocation,
    AttributeValue,
    ClaimBinding,
    ClaimInfo,
    ClaimTemplateInfo,
    Constraint,
    Consumer,
    Device,
    DeviceClassInfo,
    DeviceID,
    DeviceRequest,
    DeviceResult,
    SliceInfo,
    Subrequest,
    Version,
)
from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import Requirement
from scheduler.api.pod import NodeSelectorTerm, parse_node_selector
from scheduler.api.quantity import parse_quantity

Obj = Mapping[str, Any]

_SCALARS = (("bool", bool), ("int", int), ("string", str), ("version", str))
_LISTS = (("bools", bool), ("ints", int), ("strings", str), ("versions", str))


def _map(value: object, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(where, field, f"must be an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(where, field, f"must be a list, got {type(value).__name__}")
    return value


def _str(value: object, where: str, field: str, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise InvalidInputError(where, field, "Required value")
        return ""
    if not isinstance(value, str):
        raise InvalidInputError(where, field, f"must be a string, got {value!r}")
    return value


def _int(value: object, where: str, field: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(where, field, f"must be an integer, got {value!r}")
    return value


_DEVICE = (
    ("consumesCounters", "it consumes shared counters (partitionable devices)"),
    ("taints", "it has taints (device taints)"),
    ("bindingConditions", "it has binding conditions"),
    ("allowMultipleAllocations", "it allows multiple allocations (consumable capacity)"),
)
"""Fields of a device that need a feature Sluice leaves out, and what to say."""
_REQUEST = (
    ("adminAccess", "admin access"),
    ("tolerations", "device tolerations"),
    ("capacity", "capacity requests (consumable capacity)"),
)
"""Fields of a request that need a feature Sluice leaves out, and what to say."""


def _unsupported(raw: Obj, fields: tuple[tuple[str, str], ...]) -> str:
    """What ``raw`` asks that Sluice does not support (the first such field), or ""."""
    return next((why for key, why in fields if raw.get(key)), "")


def qualify(name: str, driver: str) -> str:
    """The fully qualified form of an attribute or capacity name: an unqualified name
    (no ``/``) belongs to the device's driver."""
    return name if "/" in name else f"{driver}/{name}"


def _attribute(raw: object, where: str, field: str) -> AttributeValue:
    value = _map(raw, where, field)
    for key, kind in _SCALARS:
        if key in value:
            v = value[key]
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise InvalidInputError(where, f"{field}.{key}", f"must be a {key}, got {v!r}")
            return Version(str(v)) if key == "version" else v
    for key, kind in _LISTS:
        if key in value:
            items = _list(value[key], where, f"{field}.{key}")
            if key == "versions":
                return tuple(Version(str(v)) for v in items)
            return tuple(kind(v) for v in items)
    raise InvalidInputError(where, field, "exactly one of bool, int, string or version is required")


def _device(raw: Obj, driver: str, pool: str, where: str, field: str) -> Device:
    name = _str(raw.get("name"), where, f"{field}.name", required=True)
    attributes = {
        qualify(str(k), driver): _attribute(v, where, f"{field}.attributes[{k}]")
        for k, v in _map(raw.get("attributes"), where, f"{field}.attributes").items()
    }
    capacity = {
        qualify(str(k), driver): parse_quantity(
            _map(v, where, f"{field}.capacity[{k}]").get("value"),
            obj=where,
            field=f"{field}.capacity[{k}].value",
        )
        for k, v in _map(raw.get("capacity"), where, f"{field}.capacity").items()
    }
    return Device(DeviceID(driver, pool, name), attributes, capacity, _unsupported(raw, _DEVICE))


def slice_from_object(obj: Obj) -> SliceInfo:
    """A ResourceSlice."""
    meta = obj.get("metadata") or {}
    where = ref({"kind": "ResourceSlice", "metadata": meta})
    spec = _map(obj.get("spec"), where, "spec")
    driver = _str(spec.get("driver"), where, "spec.driver", required=True)
    pool = _map(spec.get("pool"), where, "spec.pool")
    pool_name = _str(pool.get("name"), where, "spec.pool.name", required=True)
    devices = tuple(
        _device(
            _map(d, where, f"spec.devices[{i}]"), driver, pool_name, where, f"spec.devices[{i}]"
        )
        for i, d in enumerate(_list(spec.get("devices"), where, "spec.devices"))
    )
    selector = spec.get("nodeSelector")
    unsupported = ""
    if spec.get("sharedCounters"):
        unsupported = "it declares shared counters (partitionable devices)"
    elif spec.get("perDeviceNodeSelection"):
        unsupported = "it selects nodes per device (partitionable devices)"
    return SliceInfo(
        name=str(meta["name"]),
        driver=driver,
        pool=pool_name,
        generation=_int(pool.get("generation"), where, "spec.pool.generation", 0),
        slice_count=_int(pool.get("resourceSliceCount"), where, "spec.pool.resourceSliceCount", 1),
        devices=devices,
        node_name=_str(spec.get("nodeName"), where, "spec.nodeName"),
        node_selector=(
            parse_node_selector(selector, obj=where, field="spec.nodeSelector")
            if selector is not None
            else None
        ),
        all_nodes=bool(spec.get("allNodes")),
        unsupported=unsupported,
    )


def _selectors(raw: object, where: str, field: str) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(_list(raw, where, field)):
        cel = _map(_map(s, where, f"{field}[{i}]").get("cel"), where, f"{field}[{i}].cel")
        out.append(
            _str(cel.get("expression"), where, f"{field}[{i}].cel.expression", required=True)
        )
    return tuple(out)


def _configs(raw: object, where: str, field: str) -> tuple[Mapping[str, Any], ...]:
    return tuple(_map(c, where, f"{field}[{i}]") for i, c in enumerate(_list(raw, where, field)))


def device_class_from_object(obj: Obj) -> DeviceClassInfo:
    """A DeviceClass."""
    meta = obj.get("metadata") or {}
    where = ref({"kind": "DeviceClass", "metadata": meta})
    spec = _map(obj.get("spec"), where, "spec")
    return DeviceClassInfo(
        name=str(meta["name"]),
        selectors=_selectors(spec.get("selectors"), where, "spec.selectors"),
        config=_configs(spec.get("config"), where, "spec.config"),
        extended_resource_name=_str(
            spec.get("extendedResourceName"), where, "spec.extendedResourceName"
        ),
        created=parse_time(meta.get("creationTimestamp")),
    )


def _subrequest(raw: Obj, name: str, where: str, field: str) -> tuple[Subrequest, str]:
    """One request's (or alternative's) fields, and what it asks that is not supported."""
    unsupported = _unsupported(raw, _REQUEST)
    mode = (
        _str(raw.get("allocationMode"), where, f"{field}.allocationMode") or ALLOCATION_MODE_EXACT
    )
    if mode not in (ALLOCATION_MODE_EXACT, ALLOCATION_MODE_ALL):
        raise InvalidInputError(
            where, f"{field}.allocationMode", f"must be ExactCount or All, got {mode!r}"
        )
    count = _int(raw.get("count"), where, f"{field}.count", 1)
    if mode == ALLOCATION_MODE_EXACT and count < 1:
        raise InvalidInputError(where, f"{field}.count", f"must be at least 1, got {count}")
    return (
        Subrequest(
            name=name,
            device_class=_str(
                raw.get("deviceClassName"), where, f"{field}.deviceClassName", required=True
            ),
            mode=mode,
            count=count if mode == ALLOCATION_MODE_EXACT else 0,
            selectors=_selectors(raw.get("selectors"), where, f"{field}.selectors"),
        ),
        unsupported,
    )


def claim_spec(spec: Obj, where: str, field: str = "spec") -> ClaimInfo:
    """The requests, constraints and config of a claim spec (identity left empty)."""
    devices = _map(spec.get("devices"), where, f"{field}.devices")
    requests: list[DeviceRequest] = []
    unsupported = ""
    for i, raw in enumerate(_list(devices.get("requests"), where, f"{field}.devices.requests")):
        f = f"{field}.devices.requests[{i}]"
        r = _map(raw, where, f)
        name = _str(r.get("name"), where, f"{f}.name", required=True)
        if r.get("exactly") is not None:
            sub, why = _subrequest(_map(r["exactly"], where, f"{f}.exactly"), name, where, f)
            requests.append(DeviceRequest(name, exactly=sub))
        elif r.get("firstAvailable"):
            subs = []
            why = ""
            for j, s in enumerate(_list(r["firstAvailable"], where, f"{f}.firstAvailable")):
                sf = f"{f}.firstAvailable[{j}]"
                sm = _map(s, where, sf)
                sub, why_sub = _subrequest(
                    sm, _str(sm.get("name"), where, f"{sf}.name", required=True), where, sf
                )
                subs.append(sub)
                why = why or why_sub
            requests.append(DeviceRequest(name, first_available=tuple(subs)))
        else:
            raise InvalidInputError(where, f, "one of exactly or firstAvailable is required")
        if why and not unsupported:
            unsupported = f"request {name} asks for {why}, which Sluice does not support"
    constraints: list[Constraint] = []
    for i, raw in enumerate(
        _list(devices.get("constraints"), where, f"{field}.devices.constraints")
    ):
        f = f"{field}.devices.constraints[{i}]"
        c = _map(raw, where, f)
        names = tuple(str(n) for n in _list(c.get("requests"), where, f"{f}.requests"))
        if c.get("matchAttribute"):
            constraints.append(
                Constraint(_str(c["matchAttribute"], where, f"{f}.matchAttribute"), names)
            )
        elif c.get("distinctAttribute") and not unsupported:
            unsupported = f"constraint #{i} is distinctAttribute, which Sluice does not support"
    return ClaimInfo(
        namespace="",
        name="",
        uid="",
        requests=tuple(requests),
        constraints=tuple(constraints),
        config=_configs(devices.get("config"), where, f"{field}.devices.config"),
        unsupported=unsupported,
    )


def _allocation(raw: Obj, where: str) -> Allocation:
    field = "status.allocation"
    devices = _map(raw.get("devices"), where, f"{field}.devices")
    results = []
    for i, r in enumerate(_list(devices.get("results"), where, f"{field}.devices.results")):
        f = f"{field}.devices.results[{i}]"
        m = _map(r, where, f)
        results.append(
            DeviceResult(
                _str(m.get("request"), where, f"{f}.request", required=True),
                DeviceID(
                    _str(m.get("driver"), where, f"{f}.driver", required=True),
                    _str(m.get("pool"), where, f"{f}.pool", required=True),
                    _str(m.get("device"), where, f"{f}.device", required=True),
                ),
            )
        )
    selector = raw.get("nodeSelector")
    terms = (
        parse_node_selector(selector, obj=where, field=f"{field}.nodeSelector")
        if selector is not None
        else None
    )
    return Allocation(
        tuple(results),
        terms,
        _configs(devices.get("config"), where, f"{field}.devices.config"),
        node_name=_single_node(terms),
        raw=raw,
    )


def _single_node(terms: tuple[NodeSelectorTerm, ...] | None) -> str:
    """The node of a selector that is exactly ``metadata.name In [node]``; else ""."""
    if terms is None or len(terms) != 1:
        return ""
    term = terms[0]
    if term.labels or len(term.fields) != 1:
        return ""
    req = term.fields[0]
    if req.key == "metadata.name" and req.operator == "In" and len(req.values) == 1:
        return req.values[0]
    return ""


def claim_from_object(obj: Obj) -> ClaimInfo:
    """A ResourceClaim."""
    meta = obj.get("metadata") or {}
    where = ref({"kind": "ResourceClaim", "metadata": meta})
    spec = claim_spec(_map(obj.get("spec"), where, "spec"), where)
    status = _map(obj.get("status"), where, "status")
    allocation = status.get("allocation")
    reserved = tuple(
        Consumer(
            _str(c.get("resource"), where, f"status.reservedFor[{i}].resource"),
            _str(c.get("name"), where, f"status.reservedFor[{i}].name"),
            _str(c.get("uid"), where, f"status.reservedFor[{i}].uid"),
            _str(c.get("apiGroup"), where, f"status.reservedFor[{i}].apiGroup"),
        )
        for i, c in enumerate(_list(status.get("reservedFor"), where, "status.reservedFor"))
    )
    owner = ""
    for o in meta.get("ownerReferences") or ():
        if o.get("kind") == "Pod" and o.get("controller"):
            owner = str(o.get("uid") or "")
    return ClaimInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        requests=spec.requests,
        constraints=spec.constraints,
        config=spec.config,
        allocation=(
            _allocation(_map(allocation, where, "status.allocation"), where) if allocation else None
        ),
        reserved_for=reserved,
        deleting=bool(meta.get("deletionTimestamp")),
        owner_pod=owner,
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        resource_version=str(meta.get("resourceVersion") or ""),
        unsupported=spec.unsupported,
        extended=(meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true",
    )


def claim_template_from_object(obj: Obj) -> ClaimTemplateInfo:
    """A ResourceClaimTemplate."""
    meta = obj.get("metadata") or {}
    where = ref({"kind": "ResourceClaimTemplate", "metadata": meta})
    spec = _map(obj.get("spec"), where, "spec")
    claim = claim_spec(_map(spec.get("spec"), where, "spec.spec"), where, "spec.spec")
    return ClaimTemplateInfo(str(meta.get("namespace") or "default"), str(meta["name"]), claim)


# Back to JSON ---------------------------------------------------------------------------


def _term_json(term: NodeSelectorTerm) -> dict[str, Any]:
    def reqs(rs: tuple[Requirement, ...]) -> list[dict[str, Any]]:
        return [
            {
                "key": r.key,
                "operator": r.operator,
                **({"values": list(r.values)} if r.values else {}),
            }
            for r in rs
        ]

    out: dict[str, Any] = {}
    if term.labels:
        out["matchExpressions"] = reqs(term.labels)
    if term.fields:
        out["matchFields"] = reqs(term.fields)
    return out


def allocation_to_json(allocation: Allocation) -> dict[str, Any]:
    """``status.allocation`` as the API writes it: results (request, driver, pool,
    device), the configs copied from class and claim, and the node selector."""
    if allocation.raw is not None:
        return dict(allocation.raw)
    devices: dict[str, Any] = {
        "results": [
            {
                "request": r.request,
                "driver": r.id.driver,
                "pool": r.id.pool,
                "device": r.id.device,
            }
            for r in allocation.results
        ]
    }
    if allocation.config:
        devices["config"] = [dict(c) for c in allocation.config]
    out: dict[str, Any] = {"devices": devices}
    if allocation.node_selector is not None:
        out["nodeSelector"] = {
            "nodeSelectorTerms": [_term_json(t) for t in allocation.node_selector]
        }
    return out


def node_allocation_selector(node: str) -> tuple[NodeSelectorTerm, ...]:
    """The node selector of an allocation of node-local devices: ``metadata.name In [node]``."""
    return (NodeSelectorTerm((), (Requirement("metadata.name", "In", (node,)),)),)


__all__ = [
    "allocation_to_json",
    "claim_from_object",
    "claim_spec",
    "claim_template_from_object",
    "deallocate_patch",
    "device_class_from_object",
    "drop_finalizer_patch",
    "extended_claim_object",
    "extended_status",
    "finalizer_patch",
    "node_allocation_selector",
    "qualify",
    "reserve_patch",
    "reserved_uids",
    "slice_from_object",
    "unreserve_patch",
]


# The claim writes of a bind (kube-scheduler's PreBind and Unreserve) ----------------------


def finalizer_patch(binding: ClaimBinding) -> dict[str, Any]:
    """The strategic-merge patch of a claim that adds :data:`FINALIZER` (finalizers merge
    as a set), guarded by the claim's uid."""
    return {"metadata": {"uid": binding.uid, "finalizers": [FINALIZER]}}


def reserve_patch(binding: ClaimBinding) -> dict[str, Any]:
    """The strategic-merge patch of ``resourceclaims/status`` that writes the allocation
    (if any) and adds the pod to ``reservedFor`` (entries merge by uid)."""
    status: dict[str, Any] = {
        "reservedFor": [{"resource": "pods", "name": binding.pod_name, "uid": binding.pod_uid}]
    }
    if binding.allocation is not None:
        status["allocation"] = allocation_to_json(binding.allocation)
    return {"metadata": {"uid": binding.uid}, "status": status}


def unreserve_patch(binding: ClaimBinding) -> dict[str, Any]:
    """The strategic-merge patch of ``resourceclaims/status`` that removes the pod from
    ``reservedFor`` (as kube-scheduler's Unreserve does)."""
    return {
        "metadata": {"uid": binding.uid},
        "status": {"reservedFor": [{"$patch": "delete", "uid": binding.pod_uid}]},
    }


def deallocate_patch(uid: str, resource_version: str) -> dict[str, Any]:
    """The merge patch of ``resourceclaims/status`` that clears the allocation, guarded by
    the claim's uid and resourceVersion."""
    return {
        "metadata": {"uid": uid, "resourceVersion": resource_version},
        "status": {"allocation": None, "devices": None},
    }


def reserved_uids(obj: Obj) -> tuple[str, bool, frozenset[str]]:
    """A claim object's uid, whether it is allocated, and the uids it is reserved for."""
    status = obj.get("status") or {}
    return (
        str((obj.get("metadata") or {}).get("uid") or ""),
        bool(status.get("allocation")),
        frozenset(
            str(r.get("uid")) for r in status.get("reservedFor") or () if isinstance(r, Mapping)
        ),
    )


# The claim of a pod's extended resources (KEP-5004) ---------------------------------------


def extended_claim_object(binding: ClaimBinding) -> dict[str, Any]:
    """The ResourceClaim to create for ``binding`` (its :attr:`~ClaimBinding.extended`
    set), as kube-scheduler creates it: named by the API server from ``<pod>-extended-
    resources-``, controlled by the pod, annotated, with one ``ExactCount`` request per
    container's share; no finalizer yet (it comes with the allocation)."""
    if binding.extended is None:
        raise ValueError(f"{binding.key} is not an extended-resource claim")
    requests = []
    for r in binding.extended.requests:
        sub = r.exactly
        assert sub is not None
        requests.append(
            {
                "name": r.name,
                "exactly": {
                    "deviceClassName": sub.device_class,
                    "allocationMode": ALLOCATION_MODE_EXACT,
                    "count": sub.count,
                },
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{binding.pod_name}-extended-resources-",
            "namespace": binding.namespace,
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": binding.pod_name,
                    "uid": binding.pod_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": requests}},
    }


def extended_status(binding: ClaimBinding) -> dict[str, Any]:
    """The pod's ``status.extendedResourceClaimStatus`` once the claim of ``binding`` is
    created (its name known): which request serves which container's resource."""
    if binding.extended is None or not binding.name:
        raise ValueError(f"{binding.key} is not a created extended-resource claim")
    return {
        "extendedResourceClaimStatus": {
            "requestMappings": [
                {"containerName": m.container, "resourceName": m.resource, "requestName": m.request}
                for m in binding.extended.mappings
            ],
            "resourceClaimName": binding.name,
        }
    }


def drop_finalizer_patch(uid: str) -> dict[str, Any]:
    """The strategic-merge patch of a claim that removes :data:`FINALIZER` (and only it),
    guarded by the claim's uid: what kube-scheduler does before deleting a claim it made."""
    return {"metadata": {"uid": uid, "$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
