"""Storage JSON to domain values (layer 0): claims, volumes, classes, CSI objects.

Both backends hand the cache plain JSON; these functions read what the volume plugins
need. Malformed input raises :class:`~scheduler.api.errors.InvalidInputError` naming the
object and the field (the cache sets such an object aside and says so). Fields the API
server defaults (a claim's ``volumeMode``, a class's ``volumeBindingMode``) are
defaulted here too, so objects from a scenario file behave as those read from a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.core_objects import ref
from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector, Requirement, parse_label_selector
from scheduler.api.pod import NodeSelectorTerm, parse_node_selector
from scheduler.api.quantity import parse_quantity, to_units
from scheduler.api.volumes.model import (
    ACCESS_MODES,
    BETA_STORAGE_CLASS,
    IMMEDIATE,
    WAIT_FOR_FIRST_CONSUMER,
    CapacityInfo,
    ClaimRef,
    CsiDriverInfo,
    CsiNodeInfo,
    CsiSource,
    PvcInfo,
    PvInfo,
    StorageClassInfo,
)

Obj = Mapping[str, Any]

__all__ = [
    "capacity_from_object",
    "claim_from_object",
    "csi_driver_from_object",
    "csi_node_from_object",
    "storage_class_from_object",
    "volume_from_object",
]

_VOLUME_MODES = frozenset({"Filesystem", "Block"})


def _map(value: object, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(where, field, f"must be an object, got {type(value).__name__}")
    return value


def _str(value: object, where: str, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInputError(where, field, f"must be a string, got {value!r}")
    return value


def _strings(value: object, where: str, field: str) -> Mapping[str, str]:
    raw = _map(value, where, field)
    return {str(k): str(v) for k, v in raw.items()}


def _meta(obj: Obj) -> tuple[Mapping[str, Any], str]:
    where = ref(obj)
    meta = _map(obj.get("metadata"), where, "metadata")
    if not meta.get("name"):
        raise InvalidInputError(where, "metadata.name", "Required value")
    return meta, where


def _bytes(value: object, where: str, field: str) -> int:
    """A quantity in bytes, rounded up as ``Quantity.Value()`` does."""
    amount = parse_quantity(value, obj=where, field=field)
    if amount < 0:
        raise InvalidInputError(where, field, f"must not be negative, got {value!r}")
    return to_units(amount)


def _access_modes(value: object, where: str, field: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise InvalidInputError(where, field, "must be a list of access modes")
    modes = frozenset(str(m) for m in value)
    unknown = sorted(modes - ACCESS_MODES)
    if unknown:
        raise InvalidInputError(
            where, field, f"unsupported access mode {unknown[0]!r}; one of {sorted(ACCESS_MODES)}"
        )
    return modes


def _volume_mode(value: object, where: str, field: str) -> str:
    mode = _str(value, where, field) or "Filesystem"
    if mode not in _VOLUME_MODES:
        raise InvalidInputError(where, field, f"must be Filesystem or Block, got {mode!r}")
    return mode


def claim_from_object(obj: Obj) -> PvcInfo:
    """A PersistentVolumeClaim's JSON as a :class:`PvcInfo`."""
    meta, where = _meta(obj)
    spec = _map(obj.get("spec"), where, "spec")
    status = _map(obj.get("status"), where, "status")
    annotations = _strings(meta.get("annotations"), where, "metadata.annotations")
    has_class = BETA_STORAGE_CLASS in annotations or spec.get("storageClassName") is not None
    if BETA_STORAGE_CLASS in annotations:
        storage_class = annotations[BETA_STORAGE_CLASS]
    else:
        storage_class = _str(spec.get("storageClassName"), where, "spec.storageClassName")
    resources = _map(spec.get("resources"), where, "spec.resources")
    requests = _map(resources.get("requests"), where, "spec.resources.requests")
    request = (
        _bytes(requests["storage"], where, "spec.resources.requests.storage")
        if requests.get("storage") is not None
        else 0
    )
    selector: LabelSelector | None = None
    if spec.get("selector") is not None:
        selector = parse_label_selector(spec["selector"], obj=where, field="spec.selector")
    controller = ""
    owners = meta.get("ownerReferences") or []
    if not isinstance(owners, list):
        raise InvalidInputError(where, "metadata.ownerReferences", "must be a list")
    for owner in owners:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            controller = str(owner.get("uid") or "")
    return PvcInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=storage_class,
        has_class=has_class,
        access_modes=_access_modes(spec.get("accessModes"), where, "spec.accessModes"),
        request=request,
        selector=selector,
        volume_mode=_volume_mode(spec.get("volumeMode"), where, "spec.volumeMode"),
        volume_name=_str(spec.get("volumeName"), where, "spec.volumeName"),
        attributes_class=_str(
            spec.get("volumeAttributesClassName"), where, "spec.volumeAttributesClassName"
        ),
        phase=_str(status.get("phase"), where, "status.phase") or "Pending",
        annotations=annotations,
        deleting=bool(meta.get("deletionTimestamp")),
        controller_uid=controller,
    )


def volume_from_object(obj: Obj) -> PvInfo:
    """A PersistentVolume's JSON as a :class:`PvInfo`."""
    meta, where = _meta(obj)
    spec = _map(obj.get("spec"), where, "spec")
    status = _map(obj.get("status"), where, "status")
    annotations = _strings(meta.get("annotations"), where, "metadata.annotations")
    if BETA_STORAGE_CLASS in annotations:
        storage_class = annotations[BETA_STORAGE_CLASS]
    else:
        storage_class = _str(spec.get("storageClassName"), where, "spec.storageClassName")
    capacity = _map(spec.get("capacity"), where, "spec.capacity")
    size = (
        _bytes(capacity["storage"], where, "spec.capacity.storage")
        if capacity.get("storage") is not None
        else 0
    )
    claim_ref: ClaimRef | None = None
    raw_ref = spec.get("claimRef")
    if raw_ref is not None:
        cref = _map(raw_ref, where, "spec.claimRef")
        claim_ref = ClaimRef(
            _str(cref.get("namespace"), where, "spec.claimRef.namespace"),
            _str(cref.get("name"), where, "spec.claimRef.name"),
            _str(cref.get("uid"), where, "spec.claimRef.uid"),
        )
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    node_affinity = _map(spec.get("nodeAffinity"), where, "spec.nodeAffinity")
    if node_affinity.get("required") is not None:
        affinity = parse_node_selector(
            node_affinity["required"], obj=where, field="spec.nodeAffinity.required"
        )
    csi: CsiSource | None = None
    if spec.get("csi") is not None:
        raw_csi = _map(spec["csi"], where, "spec.csi")
        csi = CsiSource(
            _str(raw_csi.get("driver"), where, "spec.csi.driver"),
            _str(raw_csi.get("volumeHandle"), where, "spec.csi.volumeHandle"),
        )
    return PvInfo(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=_strings(meta.get("labels"), where, "metadata.labels"),
        annotations=annotations,
        storage_class=storage_class,
        capacity=size,
        access_modes=_access_modes(spec.get("accessModes"), where, "spec.accessModes"),
        volume_mode=_volume_mode(spec.get("volumeMode"), where, "spec.volumeMode"),
        attributes_class=_str(
            spec.get("volumeAttributesClassName"), where, "spec.volumeAttributesClassName"
        ),
        claim_ref=claim_ref,
        node_affinity=affinity,
        phase=_str(status.get("phase"), where, "status.phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        csi=csi,
    )


def _topology_terms(value: object, where: str) -> tuple[NodeSelectorTerm, ...]:
    """``allowedTopologies`` (TopologySelectorTerms of ``matchLabelExpressions``, each a
    key and the values it may have) as node selector terms of ``In`` requirements."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidInputError(where, "allowedTopologies", "must be a list")
    terms = []
    for i, term in enumerate(value):
        field = f"allowedTopologies[{i}]"
        exprs = _map(term, where, field).get("matchLabelExpressions") or []
        if not isinstance(exprs, list):
            raise InvalidInputError(where, f"{field}.matchLabelExpressions", "must be a list")
        reqs = []
        for j, expr in enumerate(exprs):
            efield = f"{field}.matchLabelExpressions[{j}]"
            e = _map(expr, where, efield)
            key = e.get("key")
            values = e.get("values")
            if not isinstance(key, str) or not key:
                raise InvalidInputError(where, f"{efield}.key", "Required value")
            if not isinstance(values, list) or not values:
                raise InvalidInputError(where, f"{efield}.values", "must be a non-empty list")
            reqs.append(Requirement(key, "In", tuple(str(v) for v in values)))
        terms.append(NodeSelectorTerm(tuple(reqs), ()))
    return tuple(terms)


def storage_class_from_object(obj: Obj) -> StorageClassInfo:
    """A StorageClass's JSON as a :class:`StorageClassInfo`. A class without
    ``volumeBindingMode`` is Immediate, as the API server defaults it."""
    meta, where = _meta(obj)
    mode = _str(obj.get("volumeBindingMode"), where, "volumeBindingMode") or IMMEDIATE
    if mode not in (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER):
        raise InvalidInputError(
            where, "volumeBindingMode", f"must be Immediate or WaitForFirstConsumer, got {mode!r}"
        )
    return StorageClassInfo(
        name=str(meta["name"]),
        provisioner=_str(obj.get("provisioner"), where, "provisioner"),
        binding_mode=mode,
        allowed_topologies=_topology_terms(obj.get("allowedTopologies"), where),
    )


def csi_node_from_object(obj: Obj) -> CsiNodeInfo:
    """A CSINode's JSON: each driver and its ``allocatable.count`` (None: no limit)."""
    meta, where = _meta(obj)
    spec = _map(obj.get("spec"), where, "spec")
    drivers = spec.get("drivers") or []
    if not isinstance(drivers, list):
        raise InvalidInputError(where, "spec.drivers", "must be a list")
    limits: dict[str, int | None] = {}
    for i, d in enumerate(drivers):
        field = f"spec.drivers[{i}]"
        driver = _map(d, where, field)
        name = _str(driver.get("name"), where, f"{field}.name")
        if not name:
            raise InvalidInputError(where, f"{field}.name", "Required value")
        count = _map(driver.get("allocatable"), where, f"{field}.allocatable").get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise InvalidInputError(
                where, f"{field}.allocatable.count", f"must be an integer, got {count!r}"
            )
        limits[name] = count
    return CsiNodeInfo(str(meta["name"]), limits)


def csi_driver_from_object(obj: Obj) -> CsiDriverInfo:
    """A CSIDriver's JSON: whether it publishes storage capacity."""
    meta, where = _meta(obj)
    spec = _map(obj.get("spec"), where, "spec")
    flag = spec.get("storageCapacity")
    if flag is not None and not isinstance(flag, bool):
        raise InvalidInputError(where, "spec.storageCapacity", f"must be a boolean, got {flag!r}")
    return CsiDriverInfo(str(meta["name"]), bool(flag))


def capacity_from_object(obj: Obj) -> CapacityInfo:
    """A CSIStorageCapacity's JSON as a :class:`CapacityInfo`."""
    meta, where = _meta(obj)
    topology: LabelSelector | None = None
    if obj.get("nodeTopology") is not None:
        topology = parse_label_selector(obj["nodeTopology"], obj=where, field="nodeTopology")
    capacity = obj.get("capacity")
    maximum = obj.get("maximumVolumeSize")
    return CapacityInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        storage_class=_str(obj.get("storageClassName"), where, "storageClassName"),
        node_topology=topology,
        capacity=None if capacity is None else _bytes(capacity, where, "capacity"),
        maximum_volume_size=(
            None if maximum is None else _bytes(maximum, where, "maximumVolumeSize")
        ),
    )
