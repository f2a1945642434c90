"""DRA in the embedded cluster: what the API server checks and defaults (layer 4).

The store calls :func:`default_object` on every create of a ``ResourceClaim`` or
``ResourceClaimTemplate`` (a request's ``allocationMode`` defaults to ``ExactCount`` and
its ``count`` to 1, as the API server does) and :func:`check_claim_status` on every status
write of a ResourceClaim, refusing what a v1.36 API server refuses (checked against it):

* ``status.allocation`` cannot change once set (``field is immutable``); it may only be
  removed, and only while ``status.reservedFor`` is empty;
* ``status.reservedFor`` needs an allocation (``may not be specified when `allocated` is
  not set``), has at most 256 entries, and no uid twice.

The claim controller of the controller manager is played by
:mod:`scheduler.sim.claims`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.dra.model import MAX_RESERVED_FOR
from scheduler.api.errors import FieldCause, InvalidObjectError
from scheduler.sim.patch import clone

CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})


def _default_request(request: Any) -> Any:
    if not isinstance(request, Mapping):
        return request
    out = dict(request)
    exactly = out.get("exactly")
    if isinstance(exactly, Mapping):
        exactly = dict(exactly)
        exactly.setdefault("allocationMode", "ExactCount")
        if exactly["allocationMode"] == "ExactCount":
            exactly.setdefault("count", 1)
        out["exactly"] = exactly
    subs = out.get("firstAvailable")
    if isinstance(subs, list):
        defaulted = []
        for sub in subs:
            if isinstance(sub, Mapping):
                one = dict(sub)
                one.setdefault("allocationMode", "ExactCount")
                if one["allocationMode"] == "ExactCount":
                    one.setdefault("count", 1)
                defaulted.append(one)
            else:
                defaulted.append(sub)
        out["firstAvailable"] = defaulted
    return out


def _default_spec(spec: Any) -> Any:
    if not isinstance(spec, Mapping):
        return spec
    devices = spec.get("devices")
    if not isinstance(devices, Mapping) or not isinstance(devices.get("requests"), list):
        return spec
    return {
        **spec,
        "devices": {**devices, "requests": [_default_request(r) for r in devices["requests"]]},
    }


def default_object(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a claim or a template, a fresh copy the caller owns) with the defaults the
    API server fills in."""
    kind = obj.get("kind")
    spec = obj.get("spec")
    if kind == "ResourceClaim":
        obj["spec"] = _default_spec(clone(spec))
    elif kind == "ResourceClaimTemplate" and isinstance(spec, Mapping):
        obj["spec"] = {**spec, "spec": _default_spec(clone(spec.get("spec")))}
    return obj


def _invalid(name: str, field: str, message: str) -> InvalidObjectError:
    return InvalidObjectError(
        f'ResourceClaim.resource.k8s.io "{name}" is invalid: {field}: {message}',
        kind="ResourceClaim",
        name=name,
        causes=(FieldCause(field, message),),
    )


def check_claim_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse a status write of a ResourceClaim that the API server refuses."""
    name = str((new.get("metadata") or {}).get("name", ""))
    before = (old.get("status") or {}).get("allocation")
    status = new.get("status") or {}
    after = status.get("allocation")
    reserved = status.get("reservedFor") or []
    if before and after and before != after:
        raise _invalid(name, "status.allocation", "field is immutable")
    if reserved and not after:
        raise _invalid(
            name,
            "status.reservedFor",
            "Forbidden: may not be specified when `allocated` is not set",
        )
    if len(reserved) > MAX_RESERVED_FOR:
        raise _invalid(
            name, "status.reservedFor", f"Too many: {len(reserved)}: must have at most 256 items"
        )
    uids = [r.get("uid") for r in reserved if isinstance(r, Mapping)]
    if len(set(uids)) != len(uids):
        raise _invalid(name, "status.reservedFor", "Duplicate value")
