"""DRA claim writes against a real API server (layer 4, kube).

:class:`KubeClaimWriter` implements :class:`~scheduler.ports.ClaimWriter` as
kube-scheduler's PreBind and Unreserve write ResourceClaims: the finalizer
``resource.kubernetes.io/delete-protection`` on a claim it allocates (so that the claim
controller deallocates it once nobody holds it), then ``status.allocation`` and the pod
in ``status.reservedFor`` through ``resourceclaims/status``. kube-scheduler updates the
whole status with the claim's resourceVersion; a strategic-merge patch guarded by the
claim's uid does the same without a read: the API server merges ``reservedFor`` entries
by uid and refuses to change an allocation once set (422 ``field is immutable``), so
two schedulers cannot give one claim two allocations, and writing the same allocation
again (a retry, or a second pod of a shared claim) changes nothing.

The claim of a pod's extended resources (KEP-5004) is created first (``POST``, the API
server naming it from ``<pod>-extended-resources-``), then written as any claim; it is
deleted again, its finalizer removed first, when the bind fails.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.api.dra.codec import (
    deallocate_patch,
    drop_finalizer_patch,
    extended_claim_object,
    finalizer_patch,
    reserve_patch,
    reserved_uids,
    unreserve_patch,
)
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import NotFoundError
from scheduler.kube.client import KubeClient
from scheduler.kube.resource_paths import MERGE_PATCH, RESOURCE_CLAIMS, STRATEGIC_MERGE_PATCH
from scheduler.ports import ClaimState

__all__ = ["KubeClaimWriter"]


class KubeClaimWriter:
    """ClaimWriter over ``client``; ``timeout`` overrides the client's request timeout."""

    def __init__(self, client: KubeClient, *, timeout: float | None = None) -> None:
        self.client = client
        self.timeout = timeout

    async def _patch(self, binding: ClaimBinding, body: dict[str, object], sub: str = "") -> None:
        await self.client.request(
            "PATCH",
            RESOURCE_CLAIMS.path(binding.namespace, binding.name, sub),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
            timeout=self.timeout,
            kind="ResourceClaim",
            name=binding.name,
            decode=False,
        )

    async def create_claim(self, binding: ClaimBinding) -> ClaimBinding:
        obj = extended_claim_object(binding)
        created = await self.client.request(
            "POST",
            RESOURCE_CLAIMS.path(binding.namespace),
            body=obj,
            timeout=self.timeout,
            kind="ResourceClaim",
            name=str(obj["metadata"]["generateName"]),
        )
        meta = created.get("metadata") or {}
        return replace(binding, name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""))

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        await self.client.request(
            "PATCH",
            RESOURCE_CLAIMS.path(namespace, name),
            body=drop_finalizer_patch(uid),
            content_type=STRATEGIC_MERGE_PATCH,
            timeout=self.timeout,
            kind="ResourceClaim",
            name=name,
            decode=False,
        )
        await self.client.request(
            "DELETE",
            RESOURCE_CLAIMS.path(namespace, name),
            body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
            timeout=self.timeout,
            kind="ResourceClaim",
            name=name,
            decode=False,
        )

    async def reserve_claim(self, binding: ClaimBinding) -> None:
        if binding.add_finalizer:
            await self._patch(binding, finalizer_patch(binding))
        await self._patch(binding, reserve_patch(binding), "status")

    async def unreserve_claim(self, binding: ClaimBinding) -> None:
        await self._patch(binding, unreserve_patch(binding), "status")

    async def deallocate_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        await self.client.request(
            "PATCH",
            RESOURCE_CLAIMS.path(namespace, name, "status"),
            body=deallocate_patch(uid, resource_version),
            content_type=MERGE_PATCH,
            timeout=self.timeout,
            kind="ResourceClaim",
            name=name,
            decode=False,
        )

    async def read_claim(self, namespace: str, name: str) -> ClaimState | None:
        try:
            obj = await self.client.request(
                "GET",
                RESOURCE_CLAIMS.path(namespace, name),
                timeout=self.timeout,
                kind="ResourceClaim",
                name=name,
            )
        except NotFoundError:
            return None
        return ClaimState(*reserved_uids(obj))
