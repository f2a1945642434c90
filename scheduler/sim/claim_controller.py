"""The claim controller of the embedded cluster (layer 4).

:class:`SimClaimController` plays what the controller manager's ``resourceclaim``
controller does in a cluster (``../shared/k8s/up --controller-manager`` runs the real
one), on the :class:`~scheduler.sim.store.ObjectStore`, from its watch callbacks (at
once, in commit order; its own writes follow the event that caused them):

* for each ``spec.resourceClaims`` entry of a pod that names a template and has no
  ``status.resourceClaimStatuses`` entry yet, it creates a ResourceClaim from the
  template (``generateName: <pod>-<entry>-``, owned by the pod, annotated
  ``resource.kubernetes.io/pod-claim-name``) and records its name in the pod's status;
  a pod whose template does not exist yet gets its claim when the template appears;
* when a pod is gone, or done (Succeeded, Failed, or deleted before it was bound), it
  removes the pod from every claim's ``status.reservedFor``; a claim nobody is reserved
  for any more loses its allocation, and then its finalizer, when it carries
  ``resource.kubernetes.io/delete-protection`` (the scheduler puts it there when it
  allocates); a claim made from a template for that pod is deleted.

A write that fails (the object changed or went meanwhile) is logged and left: the next
event of the pod or claim tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from scheduler.api.dra.model import FINALIZER, POD_CLAIM_ANNOTATION
from scheduler.api.errors import ApiError
from scheduler.sim.store import ObjectStore, WatchEvent

__all__ = ["SimClaimController"]

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})
_MAX_BASE = 57


def _done(pod: Mapping[str, Any]) -> bool:
    """kube's isPodDone: terminal, or deleted before it was bound."""
    phase = (pod.get("status") or {}).get("phase")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return phase in _TERMINAL or (bool(meta.get("deletionTimestamp")) and not spec.get("nodeName"))


def generate_name(pod: str, entry: str) -> str:
    """``<pod>-<entry>-``, shortened as the controller does to leave room for 5 random
    characters in 63."""
    name = f"{pod}-{entry}-"
    if len(name) > _MAX_BASE:
        name = (
            pod[: len(pod) * _MAX_BASE // len(name)]
            + "-"
            + entry[: len(entry) * _MAX_BASE // len(name)]
        )
    return name


class SimClaimController:
    """Makes claims from templates and releases the claims of pods that are gone.

    :meth:`attach` subscribes it to ``store`` (and handles what the store holds now);
    everything afterwards happens inside the store's watch callbacks.
    """

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._reserved: dict[str, set[str]] = {}
        """Pod uid -> keys (``ns/name``) of the claims reserved for it."""
        self._waiting: dict[str, set[tuple[str, str]]] = {}
        """Template key -> pods (namespace, name) waiting for it."""
        self._owned: dict[str, set[str]] = {}
        """Pod uid -> keys of the claims made for it from templates."""

    def attach(self) -> None:
        self._adopt_reservations()
        self._store.subscribe(self._on_event)
        claims, _ = self._store.list("ResourceClaim")
        for claim in claims:
            self._index(claim)
        pods, _ = self._store.list("Pod")
        for pod in pods:
            self._sync_pod(pod)

    def _adopt_reservations(self) -> None:
        """A scenario describes pods already running with their claims reserved for them
        by name; the store gave the pods their uids when it created them. Reservations
        naming a pod that exists are given its uid."""
        claims, _ = self._store.list("ResourceClaim")
        for claim in claims:
            meta = claim["metadata"]
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            fixed = []
            for entry in reserved:
                pod = self._store.try_get("Pod", meta["namespace"], str(entry.get("name")))
                if entry.get("resource") == "pods" and pod is not None:
                    fixed.append({**entry, "uid": pod["metadata"]["uid"]})
                else:
                    fixed.append(entry)
            if fixed != reserved:
                self._store.patch(
                    "ResourceClaim",
                    meta["namespace"],
                    meta["name"],
                    {"status": {"reservedFor": fixed}},
                    subresource="status",
                )

    # Events -------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        try:
            if event.kind == "Pod":
                if event.type == "DELETED":
                    self._release(str(event.obj["metadata"].get("uid") or ""))
                elif event.type in ("ADDED", "MODIFIED"):
                    self._sync_pod(event.obj)
            elif event.kind == "ResourceClaim" and event.type in ("ADDED", "MODIFIED"):
                self._index(event.obj)
                self._check_claim(event.obj)
            elif event.kind == "ResourceClaimTemplate" and event.type == "ADDED":
                self._template_added(event.obj)
        except ApiError as exc:
            log.info("claim controller: %s (tried again on the next event)", exc)

    def _index(self, claim: Mapping[str, Any]) -> None:
        meta = claim["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        for r in (claim.get("status") or {}).get("reservedFor") or ():
            if r.get("resource") == "pods":
                self._reserved.setdefault(str(r.get("uid")), set()).add(key)
        for o in meta.get("ownerReferences") or ():
            if o.get("kind") == "Pod" and o.get("controller"):
                self._owned.setdefault(str(o.get("uid")), set()).add(key)

    def _sync_pod(self, pod: Mapping[str, Any]) -> None:
        if _done(pod):
            self._release(str(pod["metadata"].get("uid") or ""))
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        entries = (pod.get("spec") or {}).get("resourceClaims") or ()
        if not entries:
            return
        made = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
        new: list[dict[str, Any]] = []
        for entry in entries:
            template = entry.get("resourceClaimTemplateName")
            if not template or entry.get("name") in made:
                continue
            claim = self._make_claim(pod, str(entry["name"]), str(template))
            if claim is not None:
                new.append({"name": entry["name"], "resourceClaimName": claim})
        if new:
            meta = pod["metadata"]
            self._store.patch(
                "Pod",
                meta["namespace"],
                meta["name"],
                {"metadata": {"uid": meta["uid"]}, "status": {"resourceClaimStatuses": new}},
                patch_type="strategic",
                subresource="status",
            )

    def _make_claim(self, pod: Mapping[str, Any], entry: str, template: str) -> str | None:
        meta = pod["metadata"]
        ns = meta["namespace"]
        found = self._store.try_get("ResourceClaimTemplate", ns, template)
        if found is None:
            self._waiting.setdefault(f"{ns}/{template}", set()).add((ns, meta["name"]))
            return None
        spec = found.get("spec") or {}
        tmeta = spec.get("metadata") or {}
        claim = self._store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "generateName": generate_name(meta["name"], entry),
                    "namespace": ns,
                    "annotations": {
                        **(tmeta.get("annotations") or {}),
                        POD_CLAIM_ANNOTATION: entry,
                    },
                    "labels": dict(tmeta.get("labels") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec.get("spec") or {},
            }
        )
        return str(claim["metadata"]["name"])

    def _template_added(self, template: Mapping[str, Any]) -> None:
        meta = template["metadata"]
        for ns, name in sorted(self._waiting.pop(f"{meta.get('namespace')}/{meta['name']}", ())):
            pod = self._store.try_get("Pod", ns, name)
            if pod is not None:
                self._sync_pod(pod)

    def _pod_gone(self, ns: str, name: str, uid: str) -> bool:
        pod = self._store.try_get("Pod", ns, name)
        return pod is None or pod["metadata"].get("uid") != uid or _done(pod)

    def _check_claim(self, claim: Mapping[str, Any]) -> None:
        """A reservation for a pod that is gone already goes at once (the scheduler may
        reserve for a pod deleted meanwhile)."""
        meta = claim["metadata"]
        for r in (claim.get("status") or {}).get("reservedFor") or ():
            if r.get("resource") == "pods" and self._pod_gone(
                meta["namespace"], r["name"], r["uid"]
            ):
                self._unreserve(meta["namespace"], meta["name"], str(r["uid"]))

    def _release(self, uid: str) -> None:
        for key in sorted(self._reserved.pop(uid, ())):
            ns, _, name = key.partition("/")
            self._unreserve(ns, name, uid)
        # Claims made for the pod from templates go with it.
        for key in sorted(self._owned.pop(uid, ())):
            ns, _, name = key.partition("/")
            claim = self._store.try_get("ResourceClaim", ns, name)
            if claim is not None and not (claim.get("status") or {}).get("reservedFor"):
                self._store.delete("ResourceClaim", ns, name)

    def _unreserve(self, ns: str, name: str, uid: str) -> None:
        claim = self._store.try_get("ResourceClaim", ns, name)
        if claim is None:
            return
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        remaining = [r for r in reserved if r.get("uid") != uid]
        if len(remaining) == len(reserved):
            return
        finalizers = list(claim["metadata"].get("finalizers") or ())
        new_status: dict[str, Any] = {"reservedFor": remaining or None}
        if not remaining and FINALIZER in finalizers:
            new_status["allocation"] = None
        self._store.patch(
            "ResourceClaim",
            ns,
            name,
            {"metadata": {"uid": claim["metadata"]["uid"]}, "status": new_status},
            patch_type="merge",
            subresource="status",
        )
        if not remaining and FINALIZER in finalizers:
            finalizers.remove(FINALIZER)
            self._store.patch(
                "ResourceClaim",
                ns,
                name,
                {"metadata": {"finalizers": finalizers or None}},
                patch_type="merge",
            )
