"""A pod's claims, found and sorted as kube-scheduler's VolumeBinding does (layer 0).

:func:`claims_of_pod` reads the claims of a pod's volumes in a
:class:`~scheduler.api.volumes.view.VolumeView` (kube's podHasPVCs, then
GetPodVolumeClaims): a claim that is missing, being deleted, lost, unreadable, or an
ephemeral volume's claim not made for this pod makes the pod unschedulable everywhere
with kube's words; an unbound claim of an Immediate class (or of a class that does not
exist, or pre-bound by ``volumeName`` and not bound yet) too ("pod has unbound immediate
PersistentVolumeClaims": the PV controller binds those, not the scheduler). The others
are bound (fully: ``volumeName`` and the PV controller's ``bind-completed``) or wait for
their first consumer (WaitForFirstConsumer, no ``volumeName``): those the scheduler binds.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api.volumes.model import PvcInfo
from scheduler.api.volumes.refs import PodVolume
from scheduler.api.volumes.view import VolumeView

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
"""kube's reason for a pod with a claim the PV controller has yet to bind."""


def missing(name: str, *, ephemeral: bool = False) -> str:
    """kube's reason for a claim that does not exist (an ephemeral volume's: not yet)."""
    if ephemeral:
        return (
            f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
        )
    return f'persistentvolumeclaim "{name}" not found'


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's claims (each once, in the order of its volumes), or why no node can take
    it (``problem``, with ``immediate`` set when the reason is an unbound Immediate
    claim)."""

    problem: str = ""
    bound: tuple[PvcInfo, ...] = ()
    """Claims bound to their PV."""
    delayed: tuple[PvcInfo, ...] = ()
    """Unbound claims of a WaitForFirstConsumer class: the scheduler picks their PV (or
    their node, to provision one)."""
    all: tuple[PvcInfo, ...] = ()
    """Every claim found, in the order of the pod's volumes (each once)."""


def claim_names(volumes: tuple[PodVolume, ...], pod: str) -> list[tuple[str, bool]]:
    """The names of the claims a pod named ``pod`` uses, each with whether it is an
    ephemeral volume's, in the order of its volumes (a claim used twice: twice)."""
    return [(v.claim_name(pod), v.ephemeral) for v in volumes if v.disk is None]


def claims_of_pod(
    namespace: str, pod: str, pod_uid: str, volumes: tuple[PodVolume, ...], view: VolumeView
) -> PodClaims:
    """The claims of pod ``namespace/pod`` (uid ``pod_uid``) with ``volumes`` in ``view``
    (the module docstring)."""
    found: list[PvcInfo] = []
    seen: set[str] = set()
    for name, ephemeral in claim_names(volumes, pod):
        key = f"{namespace}/{name}"
        claim = view.claims.get(key)
        if claim is None:
            why = view.invalid_claims.get(key)
            if why is not None:
                return PodClaims(f'persistentvolumeclaim "{name}" cannot be read: {why}')
            return PodClaims(missing(name, ephemeral=ephemeral))
        if claim.phase == "Lost":
            return PodClaims(
                f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                f'"{claim.volume_name}"'
            )
        if claim.deleting:
            return PodClaims(f'persistentvolumeclaim "{name}" is being deleted')
        if ephemeral and claim.controller_uid != pod_uid:
            return PodClaims(
                f"PVC {namespace}/{name} was not created for pod {namespace}/{pod} "
                "(pod is not owner)"
            )
        if key not in seen:
            seen.add(key)
            found.append(claim)
    bound: list[PvcInfo] = []
    delayed: list[PvcInfo] = []
    for claim in found:
        if claim.fully_bound:
            bound.append(claim)
            continue
        cls = view.classes.get(claim.storage_class) if claim.storage_class else None
        if cls is not None and cls.delays_binding and not claim.volume_name:
            delayed.append(claim)
        else:
            return PodClaims(UNBOUND_IMMEDIATE, all=tuple(found))
    return PodClaims("", tuple(bound), tuple(delayed), tuple(found))
