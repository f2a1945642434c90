"""A pod's claims, as kube-scheduler finds them, and the devices they count (layer 0).

:func:`claims_of_pod` resolves ``spec.resourceClaims``: an entry naming a claim is that
claim (in the pod's namespace); an entry naming a template is the claim the claim
controller made for it, named in ``status.resourceClaimStatuses`` (an entry with no
claim name needs no claim). A claim not made yet, missing, being deleted, or made for
another pod is a problem the pod waits on, as in kube-scheduler's PreFilter.

:func:`device_counts` is what queue shares count of a pod's devices: per DeviceClass, as
the resource ``deviceclass/NAME`` (Volcano's DRA quota does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.api.dra.inventory import Inventory
from scheduler.api.dra.model import ALLOCATION_MODE_EXACT, ClaimInfo
from scheduler.api.task import TaskInfo

DEVICE_CLASS_PREFIX = "deviceclass/"
"""Queue shares count devices as the resource ``deviceclass/<class name>``."""


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's claims (``keys``: ``ns/name``, in the pod's order), or ``problem``: why the
    pod cannot be placed on any node yet."""

    keys: tuple[str, ...] = ()
    problem: str = ""


def claims_of_pod(
    task: TaskInfo, claims: Mapping[str, ClaimInfo], invalid: Mapping[str, str] | None = None
) -> PodClaims:
    """``task``'s claims among ``claims`` (by ``ns/name``); ``invalid``: claims that exist
    but cannot be read, and why."""
    entries = task.spec.resource_claims
    if not entries:
        return PodClaims()
    statuses = dict(task.claim_statuses)
    keys: list[str] = []
    for entry in entries:
        name = entry.claim_name
        if not name:
            if entry.name not in statuses:
                return PodClaims(
                    problem=f"waiting for the ResourceClaim of pod claim {entry.name!r} "
                    f"(template {entry.template_name}) to be created"
                )
            name = statuses[entry.name]
            if not name:
                continue  # no claim is needed for this entry
        key = f"{task.namespace}/{name}"
        claim = claims.get(key)
        if claim is None:
            if invalid and key in invalid:
                return PodClaims(problem=f"ResourceClaim {key} cannot be read: {invalid[key]}")
            return PodClaims(problem=f"waiting for ResourceClaim {key} to be created")
        if claim.deleting:
            return PodClaims(problem=f"ResourceClaim {key} is being deleted")
        if not entry.claim_name and claim.owner_pod != task.uid:
            return PodClaims(problem=f"ResourceClaim {key} was not created for this pod")
        keys.append(key)
    return PodClaims(tuple(keys))


def device_counts(claims: Sequence[ClaimInfo]) -> dict[str, int]:
    """Devices per ``deviceclass/NAME`` that ``claims`` hold (allocated) or ask (their
    first alternative; a request for ``All`` devices counts as one until allocated)."""
    out: dict[str, int] = {}
    for claim in claims:
        classes = {}
        for request in claim.requests:
            for sub in request.alternatives:
                full = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                classes[full] = sub.device_class
        if claim.allocation is not None:
            for result in claim.allocation.results:
                cls = classes.get(result.request)
                if cls is not None:
                    key = DEVICE_CLASS_PREFIX + cls
                    out[key] = out.get(key, 0) + 1
            continue
        for request in claim.requests:
            sub = request.alternatives[0]
            n = sub.count if sub.mode == ALLOCATION_MODE_EXACT else 1
            key = DEVICE_CLASS_PREFIX + sub.device_class
            out[key] = out.get(key, 0) + n
    return out


def class_capacity(inventory: Inventory, devices: Sequence[int]) -> dict[str, int]:
    """Per ``deviceclass/NAME``, how many of ``devices`` (inventory indexes) the class
    selects: what queue shares are cut from."""
    out: dict[str, int] = {}
    for name in sorted(inventory.classes):
        matched = inventory.class_match(name)
        n = sum(1 for d in devices if matched[d])
        if n:
            out[DEVICE_CLASS_PREFIX + name] = n
    return out
