"""DRA in the embedded cluster: what the API server checks and defaults (layer 4).

The store calls :func:`default_object` on every create of a ``ResourceClaim`` or
``ResourceClaimTemplate`` (a request's ``allocationMode`` defaults to ``ExactCount`` and
its ``count`` to 1, as the API server does) and :func:`check_claim_status` on every status
write of a ResourceClaim, refusing what a v1.36 API server refuses (checked against it):

* ``status.allocation`` cannot change once set (``field is immutable``); it may only be
  removed, and only while ``status.reservedFor`` is empty;
* ``status.reservedFor`` needs an allocation (``may not be specified when `allocated` is
  not set``), has at most 256 entries, and no uid twice.

:func:`check_claim` checks a new claim as the API server does the parts the scheduler
writes when it creates one for a pod's extended resources (request names are DNS labels,
once each; an owner reference names a uid), and :func:`check_pod_status` a pod's
``status.extendedResourceClaimStatus`` on every status write of a Pod (at least one
request mapping, each naming a container of the pod and a resource that container
requests, a DNS label as request name, no mapping twice; a valid claim name). The API
server cuts a ``generateName`` to 58 characters; the store does too.

The claim controller of the controller manager is played by
:mod:`scheduler.sim.claim_controller`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.dra.model import MAX_RESERVED_FOR
from scheduler.api.errors import FieldCause, InvalidObjectError
from scheduler.schema.builtin_rules import DNS_LABEL, DNS_LABEL_MESSAGE
from scheduler.schema.validator import DNS_SUBDOMAIN, DNS_SUBDOMAIN_MESSAGE
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


def _refuse(kind: str, name: str, causes: list[FieldCause]) -> None:
    if not causes:
        return
    text = "; ".join(f"{c.field}: {c.message}" for c in causes)
    group = ".resource.k8s.io" if kind == "ResourceClaim" else ""
    raise InvalidObjectError(
        f'{kind}{group} "{name}" is invalid: {text}', kind=kind, name=name, causes=tuple(causes)
    )


def _label(value: object, field: str) -> list[FieldCause]:
    text = str(value)
    if len(text) <= 63 and DNS_LABEL.fullmatch(text):
        return []
    return [FieldCause(field, f'Invalid value: "{text}": {DNS_LABEL_MESSAGE}')]


def check_claim(claim: Mapping[str, Any]) -> None:
    """Refuse a new ResourceClaim whose request names or owner references the API server
    refuses."""
    meta = claim.get("metadata") or {}
    causes: list[FieldCause] = []
    for owner in meta.get("ownerReferences") or ():
        for key in ("apiVersion", "kind", "name", "uid"):
            if not (owner or {}).get(key):
                causes.append(
                    FieldCause(
                        f"metadata.ownerReferences.{key}", 'Invalid value: "": must not be empty'
                    )
                )
    seen: set[str] = set()
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    for i, request in enumerate(requests):
        name = str((request or {}).get("name") or "")
        causes += _label(name, f"spec.devices.requests[{i}].name")
        if name in seen:
            causes.append(FieldCause(f"spec.devices.requests[{i}]", f'Duplicate value: "{name}"'))
        seen.add(name)
    _refuse("ResourceClaim", str(meta.get("name", "")), causes)


def check_pod_status(pod: Mapping[str, Any]) -> None:
    """Refuse a Pod status write whose ``extendedResourceClaimStatus`` the API server
    refuses (module docstring)."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if status is None:
        return
    field = "status.extendedResourceClaimStatus"
    spec = pod.get("spec") or {}
    requests: dict[str, Mapping[str, Any]] = {}
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        requests[str(c.get("name"))] = (c.get("resources") or {}).get("requests") or {}
    causes: list[FieldCause] = []
    mappings = status.get("requestMappings") or []
    if not mappings:
        causes.append(
            FieldCause(
                f"{field}.requestMappings",
                "Required value: at least one request mapping is required",
            )
        )
    seen: set[tuple[str, str, str]] = set()
    for i, m in enumerate(mappings):
        at = f"{field}.requestMappings[{i}]"
        container, resource, request = (
            str(m.get("containerName", "")),
            str(m.get("resourceName", "")),
            str(m.get("requestName", "")),
        )
        if container not in requests:
            causes.append(
                FieldCause(
                    f"{at}.containerName",
                    f'Invalid value: "{container}": must match the name of an entry in '
                    "spec.initContainers.name or spec.containers.name",
                )
            )
        elif resource not in requests[container]:
            causes.append(
                FieldCause(
                    f"{at}.resourceName",
                    f'Invalid value: "{resource}": must match the extended resource name of an '
                    "entry in spec.initContainers.resources.requests or "
                    "spec.containers.resources.requests",
                )
            )
        causes += _label(request, f"{field}.requestName")
        if (container, resource, request) in seen:
            for key, value in (
                ("containerName", container),
                ("resourceName", resource),
                ("requestName", request),
            ):
                causes.append(FieldCause(f"{at}.{key}", f'Duplicate value: "{value}"'))
        seen.add((container, resource, request))
    claim = str(status.get("resourceClaimName") or "")
    if not claim:
        causes.append(FieldCause(f"{field}.resourceClaimName", "Required value"))
    elif len(claim) > 253 or not DNS_SUBDOMAIN.fullmatch(claim):
        causes.append(
            FieldCause(
                f"{field}.resourceClaimName", f'Invalid value: "{claim}": {DNS_SUBDOMAIN_MESSAGE}'
            )
        )
    _refuse("Pod", str((pod.get("metadata") or {}).get("name", "")), causes)
