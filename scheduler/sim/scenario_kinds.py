"""The kinds of a scenario checked by their converters: DRA's and storage's (layer 4, sim).

:func:`check_kinds` reads each DeviceClass, ResourceSlice, ResourceClaimTemplate and
ResourceClaim, and each StorageClass, CSIDriver, CSINode, CSIStorageCapacity,
PersistentVolume and PersistentVolumeClaim of a scenario as the cache will (a bad value
is a ScenarioError naming the object and the field), and refuses the claims, PVs and
classes the API server refuses (:mod:`scheduler.sim.storage`), before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from scheduler.api import labels as L
from scheduler.api.core_objects import ref
from scheduler.api.dra.codec import (
    claim_from_object,
    claim_template_from_object,
    device_class_from_object,
    slice_from_object,
)
from scheduler.api.errors import InvalidInputError, InvalidObjectError, ScenarioError
from scheduler.api.volumes.storage_objects import (
    capacity_from_object,
    csi_driver_from_object,
    csi_node_from_object,
    storage_class_from_object,
    volume_from_object,
)
from scheduler.api.volumes.storage_objects import claim_from_object as volume_claim_from_object
from scheduler.sim.storage import STORAGE_KINDS as API_CHECKED_KINDS
from scheduler.sim.storage import default_storage

__all__ = ["API_VERSIONS", "DRA_KINDS", "STORAGE_KINDS", "check_kinds"]

DRA_KINDS: Final = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")
STORAGE_KINDS: Final = (
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "PersistentVolume",
    "PersistentVolumeClaim",
)
API_VERSIONS: Final[Mapping[str, str]] = {
    "Pod": "v1",
    "Node": "v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
    "PodGroup": L.API_VERSION,
    "Queue": L.API_VERSION,
    "Topology": L.API_VERSION,
    **dict.fromkeys(DRA_KINDS, "resource.k8s.io/v1"),
    **dict.fromkeys(STORAGE_KINDS, "storage.k8s.io/v1"),
    "PersistentVolume": "v1",
    "PersistentVolumeClaim": "v1",
    "Namespace": "v1",
    "Service": "v1",
    "ReplicationController": "v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
}
"""The apiVersion of a kind a scenario may leave out."""

_CONVERTERS: Final[Mapping[str, Callable[[Mapping[str, Any]], object]]] = {
    "DeviceClass": device_class_from_object,
    "ResourceSlice": slice_from_object,
    "ResourceClaimTemplate": claim_template_from_object,
    "ResourceClaim": claim_from_object,
    "StorageClass": storage_class_from_object,
    "CSIDriver": csi_driver_from_object,
    "CSINode": csi_node_from_object,
    "CSIStorageCapacity": capacity_from_object,
    "PersistentVolume": volume_from_object,
    "PersistentVolumeClaim": volume_claim_from_object,
}


def check_kinds(by_kind: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
    """Every DRA and storage object of ``by_kind`` (kind -> name -> object) read as the
    cache reads it, and accepted as the API server accepts it; ScenarioError otherwise."""
    for kind, convert in _CONVERTERS.items():
        for obj in by_kind.get(kind, {}).values():
            try:
                convert(obj)
                if kind in API_CHECKED_KINDS:
                    default_storage(dict(obj))  # what the API server refuses
            except InvalidInputError as exc:
                raise ScenarioError(exc.obj, exc.field, exc.message) from exc
            except InvalidObjectError as exc:
                raise ScenarioError(ref(obj), None, str(exc)) from exc
