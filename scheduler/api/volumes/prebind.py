"""What binding a pod's volumes asks of the cluster before its bind (layer 0).

A :class:`VolumeBindings` is decided when a statement that placed a pod commits (the
``volumebinding`` plugin's answer) and travels in the pod's
:class:`~scheduler.framework.effects.Bind`: the writes kube-scheduler's PreBind makes (a
PV's ``claimRef`` for a claim matched to a static PV, a claim's ``selected-node``
annotation for one to provision), then the wait until the PV controller has bound every
claim, for at most ``timeout`` seconds. The cache assumes the writes at once
(:mod:`scheduler.cache` shows them in the next snapshots) and forgets them when the bind
fails; :func:`bound_status` is the check the waiting makes (kube's checkBindings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.volumes.model import PvcInfo, PvInfo


@dataclass(frozen=True, slots=True)
class ClaimTarget:
    """A claim a binding writes or waits for: its key and uid."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def of(claim: PvcInfo) -> ClaimTarget:
        return ClaimTarget(claim.namespace, claim.name, claim.uid)


@dataclass(frozen=True, slots=True)
class StaticBinding:
    """Bind ``claim`` to the existing PV ``volume``: write the claim into the PV's
    ``claimRef`` against the PV's ``resource_version`` (with ``bound-by-controller`` when
    ``by_controller``: the PV was not pre-bound to the claim by a user), unless ``write``
    is False (the PV names the claim already); the PV controller then binds the claim."""

    claim: ClaimTarget
    volume: str
    resource_version: str
    write: bool = True
    by_controller: bool = True


@dataclass(frozen=True, slots=True)
class Provision:
    """Have a PV provisioned for ``claim`` on the pod's node: write the node into the
    claim's ``volume.kubernetes.io/selected-node`` annotation against the claim's
    ``resource_version``, unless ``write`` is False (it names the node already)."""

    claim: ClaimTarget
    resource_version: str
    write: bool = True


@dataclass(frozen=True, slots=True)
class VolumeBindings:
    """The volume writes of one pod's bind to ``node``, and how long to wait for the PV
    controller to bind its claims (seconds)."""

    node: str
    static: tuple[StaticBinding, ...] = ()
    provisions: tuple[Provision, ...] = ()
    timeout: float = 600.0

    @property
    def claims(self) -> tuple[ClaimTarget, ...]:
        """Every claim waited for, static bindings first."""
        return tuple(b.claim for b in self.static) + tuple(p.claim for p in self.provisions)

    @property
    def writes(self) -> bool:
        """Is anything to be written?"""
        return any(b.write for b in self.static) or any(p.write for p in self.provisions)


@dataclass(frozen=True, slots=True)
class BindingStatus:
    """What a check of the events says of a pod's volume binding: ``done`` (every claim
    bound), or ``failed`` with why (the binding cannot finish: kube's checkBindings
    errors), or neither (wait on)."""

    done: bool = False
    failed: str = ""
    waiting_for: tuple[str, ...] = ()
    """The claims not bound yet (``ns/name``)."""


def _newer_or_same(seen: str, written: str) -> bool:
    """Is the version ``seen`` at least the version ``written`` (both are etcd revisions
    on a real server and counters in the embedded one; unknown ones compare equal)?"""
    if not written or not seen:
        return True
    try:
        return int(seen) >= int(written)
    except ValueError:
        return seen == written


def bound_status(
    bindings: VolumeBindings,
    claims: Mapping[str, PvcInfo],
    volumes: Mapping[str, PvInfo],
    node_labels: Mapping[str, str] | None,
    written: Mapping[str, str],
) -> BindingStatus:
    """kube's checkBindings on the events as they stand (``claims`` by ``ns/name``,
    ``volumes`` by name, as the API shows them, nothing assumed): every claim bound, or
    why the binding failed: the node gone, a PV's ``claimRef`` reset or its node affinity
    no longer admitting the node, a claim's ``selected-node`` annotation removed or
    changed (its provisioning failed), a claim or PV gone. ``written`` gives, per object
    written (``PersistentVolume/name``, ``PersistentVolumeClaim/ns/name``), the
    resourceVersion its write's reply gave: an event older than that is not judged yet."""
    if node_labels is None:
        return BindingStatus(failed=f"node {bindings.node} is gone")
    waiting: list[str] = []
    for b in bindings.static:
        pv = volumes.get(b.volume)
        claim = claims.get(b.claim.key)
        if pv is None:
            return BindingStatus(failed=f"PersistentVolume {b.volume} is gone")
        if claim is None or claim.uid != b.claim.uid:
            return BindingStatus(failed=f"PersistentVolumeClaim {b.claim.key} is gone")
        if not _newer_or_same(pv.resource_version, written.get(f"PersistentVolume/{b.volume}", "")):
            waiting.append(b.claim.key)
            continue
        if not pv.allows(node_labels):
            return BindingStatus(
                failed=f"PersistentVolume {b.volume}'s node affinity does not admit node "
                f"{bindings.node} any more"
            )
        if pv.claim_ref is None or not pv.claim_ref.uid:
            return BindingStatus(failed=f"the claimRef of PersistentVolume {b.volume} was reset")
        if not claim.fully_bound:
            waiting.append(b.claim.key)
    for p in bindings.provisions:
        claim = claims.get(p.claim.key)
        if claim is None or claim.uid != p.claim.uid:
            return BindingStatus(failed=f"PersistentVolumeClaim {p.claim.key} is gone")
        if not _newer_or_same(
            claim.resource_version, written.get(f"PersistentVolumeClaim/{p.claim.key}", "")
        ):
            waiting.append(p.claim.key)
            continue
        if claim.selected_node != bindings.node:
            return BindingStatus(
                failed=f"provisioning failed for PersistentVolumeClaim {p.claim.key} "
                "(its selected-node annotation was removed)"
            )
        if not claim.fully_bound:
            waiting.append(p.claim.key)
            continue
        pv = volumes.get(claim.volume_name)
        if pv is None:
            # not seen yet (or deleted: the claim will be unbound then), as kube tolerates
            waiting.append(p.claim.key)
            continue
        if not pv.allows(node_labels):
            return BindingStatus(
                failed=f"PersistentVolume {pv.name}'s node affinity does not admit node "
                f"{bindings.node}"
            )
    if waiting:
        return BindingStatus(waiting_for=tuple(waiting))
    return BindingStatus(done=True)
