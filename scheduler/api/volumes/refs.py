"""A pod's volumes as the scheduler reads them, parsed with the pod's spec (layer 0).

:func:`parse_volumes` reads ``spec.volumes``: the claims a pod uses (a
``persistentVolumeClaim``, or the claim made for a generic ``ephemeral`` volume, named
``<pod>-<volume>``), and the disks it names inline that VolumeRestrictions checks. Other
volumes (configMap, emptyDir, ...) need nothing of the scheduler and are left out, so a
pod without claims or such disks has ``()`` and every volume plugin skips it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class InlineDisk:
    """A disk a pod names inline (not through a claim) that VolumeRestrictions checks:
    ``kind`` gce (``pdName``), aws (``volumeID``), iscsi (``iqn``) or rbd (``pool/image``
    on ``monitors``)."""

    kind: str
    id: str
    read_only: bool = False
    monitors: frozenset[str] = frozenset()

    def conflicts(self, other: InlineDisk) -> bool:
        """Do two mounts of one disk conflict (kube's isVolumeConflict)? Two GCE PD,
        iSCSI or RBD mounts conflict unless both are read-only (RBD: when they share a
        monitor); two mounts of one EBS volume always do."""
        if self.kind != other.kind or self.id != other.id:
            return False
        if self.kind == "aws":
            return True
        if self.kind == "rbd" and not (self.monitors & other.monitors):
            return False
        return not (self.read_only and other.read_only)


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One entry of ``spec.volumes`` the scheduler cares about."""

    name: str
    claim: str = ""
    """``persistentVolumeClaim.claimName`` ("" for an ephemeral volume or a disk)."""
    ephemeral: bool = False
    """A generic ephemeral volume: its claim is ``<pod>-<name>``, made for the pod."""
    disk: InlineDisk | None = None

    def claim_name(self, pod: str) -> str:
        """The claim this volume uses in pod ``pod`` ("" for an inline disk)."""
        return f"{pod}-{self.name}" if self.ephemeral else self.claim


def _source(v: Mapping[str, Any], key: str, *, obj: str, field: str) -> Mapping[str, Any] | None:
    raw = v.get(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidInputError(obj, f"{field}.{key}", "must be an object")
    return raw


def _disk(v: Mapping[str, Any], *, obj: str, field: str) -> InlineDisk | None:
    gce = _source(v, "gcePersistentDisk", obj=obj, field=field)
    if gce is not None:
        return InlineDisk("gce", str(gce.get("pdName") or ""), bool(gce.get("readOnly")))
    aws = _source(v, "awsElasticBlockStore", obj=obj, field=field)
    if aws is not None:
        return InlineDisk("aws", str(aws.get("volumeID") or ""), bool(aws.get("readOnly")))
    iscsi = _source(v, "iscsi", obj=obj, field=field)
    if iscsi is not None:
        return InlineDisk("iscsi", str(iscsi.get("iqn") or ""), bool(iscsi.get("readOnly")))
    rbd = _source(v, "rbd", obj=obj, field=field)
    if rbd is not None:
        monitors = rbd.get("monitors") or []
        if not isinstance(monitors, list):
            raise InvalidInputError(obj, f"{field}.rbd.monitors", "must be a list of strings")
        pool = str(rbd.get("pool") or "rbd")
        return InlineDisk(
            "rbd",
            f"{pool}/{rbd.get('image') or ''}",
            bool(rbd.get("readOnly")),
            frozenset(str(m) for m in monitors),
        )
    return None


def parse_volumes(raw: object, *, obj: str) -> tuple[PodVolume, ...]:
    """The claims and inline disks of ``spec.volumes``; errors name ``obj`` and the field
    (a volume without a name, a claim without a ``claimName``)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidInputError(obj, "spec.volumes", f"must be a list, got {type(raw).__name__}")
    out: list[PodVolume] = []
    for i, v in enumerate(raw):
        field = f"spec.volumes[{i}]"
        if not isinstance(v, Mapping):
            raise InvalidInputError(obj, field, "must be an object")
        claim = _source(v, "persistentVolumeClaim", obj=obj, field=field)
        ephemeral = _source(v, "ephemeral", obj=obj, field=field)
        disk = _disk(v, obj=obj, field=field) if claim is None and ephemeral is None else None
        if claim is None and ephemeral is None and disk is None:
            continue
        name = v.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInputError(obj, f"{field}.name", "Required value")
        if claim is not None:
            claim_name = claim.get("claimName")
            if not isinstance(claim_name, str) or not claim_name:
                raise InvalidInputError(
                    obj, f"{field}.persistentVolumeClaim.claimName", "Required value"
                )
            out.append(PodVolume(name, claim=claim_name))
        elif ephemeral is not None:
            out.append(PodVolume(name, ephemeral=True))
        else:
            out.append(PodVolume(name, disk=disk))
    return tuple(out)
