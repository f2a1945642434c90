"""Storage in the embedded cluster: what the API server defaults and refuses (layer 4).

The store calls :func:`default_storage` on every create of a PersistentVolumeClaim,
PersistentVolume or StorageClass, and :func:`check_storage_update` on every update of
one, doing what a v1.36 API server does (checked against it):

* a claim and a PV start in phase ``Pending`` and get ``volumeMode: Filesystem``; a PV
  ``persistentVolumeReclaimPolicy: Retain``; a class ``reclaimPolicy: Delete`` and
  ``volumeBindingMode: Immediate``; a claim and a PV get the finalizer the
  StorageObjectInUseProtection admission plugin adds (``kubernetes.io/pvc-protection``,
  ``kubernetes.io/pv-protection``);
* a claim needs an access mode and ``resources.requests.storage``; a PV a capacity with
  ``storage``, an access mode and a volume source (a ``local`` one with node affinity);
  a class a provisioner;
* a claim's spec is immutable but for ``resources.requests``,
  ``volumeAttributesClassName`` and a ``volumeName`` set where there was none (the PV
  controller binds it so); a class's provisioner, parameters and binding mode are
  immutable.

The PV controller of the controller manager is played by :mod:`scheduler.sim.volume_controller`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scheduler.api.errors import FieldCause, InvalidObjectError

__all__ = [
    "PVC_PROTECTION",
    "PV_PROTECTION",
    "STORAGE_KINDS",
    "check_storage_update",
    "default_storage",
]

PVC_PROTECTION: Final = "kubernetes.io/pvc-protection"
PV_PROTECTION: Final = "kubernetes.io/pv-protection"
STORAGE_KINDS: Final = frozenset({"PersistentVolumeClaim", "PersistentVolume", "StorageClass"})
"""The kinds this module defaults and checks."""

_VOLUME_SOURCES: Final = frozenset(
    {
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "csi",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "glusterfs",
        "hostPath",
        "iscsi",
        "local",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    }
)
"""The volume sources of a PersistentVolumeSpec."""
_CLAIM_MUTABLE: Final = ("resources", "volumeAttributesClassName")
_CLASS_IMMUTABLE: Final = ("provisioner", "parameters", "volumeBindingMode")
_GROUPS: Final = {"StorageClass": ".storage.k8s.io"}


def _refuse(kind: str, name: str, causes: list[FieldCause]) -> None:
    if not causes:
        return
    text = ", ".join(f"{c.field}: {c.message}" for c in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    raise InvalidObjectError(
        f'{kind}{_GROUPS.get(kind, "")} "{name}" is invalid: {text}',
        kind=kind,
        name=name,
        causes=tuple(causes),
    )


def _with_finalizer(meta: Mapping[str, Any], finalizer: str) -> dict[str, Any]:
    out = dict(meta)
    finalizers = list(out.get("finalizers") or [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)
    out["finalizers"] = finalizers
    return out


def _check_claim(obj: Mapping[str, Any]) -> list[FieldCause]:
    spec = obj.get("spec") or {}
    causes = []
    if not spec.get("accessModes"):
        causes.append(
            FieldCause("spec.accessModes", "Required value: at least 1 access mode is required")
        )
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" not in requests:
        causes.append(FieldCause("spec.resources[storage]", "Required value"))
    return causes


def _check_volume(obj: Mapping[str, Any]) -> list[FieldCause]:
    spec = obj.get("spec") or {}
    causes = []
    capacity = spec.get("capacity")
    if not capacity:
        causes.append(FieldCause("spec.capacity", "Required value"))
    elif "storage" not in capacity:
        causes.append(
            FieldCause("spec.capacity", 'Unsupported value: null: supported values: "storage"')
        )
    if not spec.get("accessModes"):
        causes.append(FieldCause("spec.accessModes", "Required value"))
    sources = [s for s in _VOLUME_SOURCES if spec.get(s) is not None]
    if not sources:
        causes.append(FieldCause("spec", "Required value: must specify a volume type"))
    elif len(sources) > 1:
        causes.append(
            FieldCause(
                f"spec.{sorted(sources)[1]}", "Forbidden: may not specify more than 1 volume type"
            )
        )
    if "local" in sources and not ((spec.get("nodeAffinity") or {}).get("required")):
        causes.append(
            FieldCause("spec.nodeAffinity", "Required value: Local volume requires node affinity")
        )
    return causes


def default_storage(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a new claim, PV or class: a fresh copy the caller owns) defaulted as the
    API server defaults it; InvalidObjectError for what it refuses (module docstring)."""
    kind = str(obj.get("kind"))
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if kind == "StorageClass":
        _refuse(
            kind,
            name,
            [] if obj.get("provisioner") else [FieldCause("provisioner", "Required value")],
        )
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
        return obj
    spec = dict(obj.get("spec") or {})
    if kind == "PersistentVolumeClaim":
        _refuse(kind, name, _check_claim({**obj, "spec": spec}))
        obj["metadata"] = _with_finalizer(meta, PVC_PROTECTION)
    else:
        _refuse(kind, name, _check_volume({**obj, "spec": spec}))
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        obj["metadata"] = _with_finalizer(meta, PV_PROTECTION)
    spec.setdefault("volumeMode", "Filesystem")
    obj["spec"] = spec
    status = dict(obj.get("status") or {})
    status.setdefault("phase", "Pending")
    obj["status"] = status
    return obj


def check_storage_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse an update of a claim or class that the API server refuses (module
    docstring); a PV's updates are all allowed here."""
    kind = str(new.get("kind"))
    name = str((new.get("metadata") or {}).get("name", ""))
    if kind == "StorageClass":
        causes = [
            FieldCause(f, "Forbidden: updates to " + f + " are forbidden.")
            for f in _CLASS_IMMUTABLE
            if old.get(f) != new.get(f)
        ]
        _refuse(kind, name, causes)
        return
    if kind != "PersistentVolumeClaim":
        return
    before = dict(old.get("spec") or {})
    after = dict(new.get("spec") or {})
    if not before.get("volumeName"):
        before.pop("volumeName", None)
        after.pop("volumeName", None)
    for f in _CLAIM_MUTABLE:
        before.pop(f, None)
        after.pop(f, None)
    if before != after:
        _refuse(
            kind,
            name,
            [
                FieldCause(
                    "spec",
                    "Forbidden: spec is immutable after creation except resources.requests "
                    "and volumeAttributesClassName for bound claims",
                )
            ],
        )
