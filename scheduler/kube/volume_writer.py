"""Volume writes against a real API server (layer 4, kube).

:class:`KubeVolumeWriter` implements :class:`~scheduler.ports.VolumeWriter` as
kube-scheduler's VolumeBinding PreBind writes PVs and claims: merge patches guarded by
the resourceVersion the scheduler's view had (:mod:`scheduler.api.volumes.volume_patches`), so
a PV the PV controller bound to another claim meanwhile is never taken over, and nothing
but the fields written is sent: a PV's ``spec.claimRef`` (and ``bound-by-controller``),
a claim's ``selected-node``. RBAC: ``patch`` and ``get`` on ``persistentvolumes`` and
``persistentvolumeclaims``.
"""

from __future__ import annotations

from scheduler.api.errors import NotFoundError
from scheduler.api.volumes.prebind import ClaimTarget
from scheduler.api.volumes.volume_patches import (
    VolumeState,
    claim_ref_patch,
    selected_node_patch,
    volume_state,
)
from scheduler.kube.client import KubeClient
from scheduler.kube.resource_paths import MERGE_PATCH, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES

__all__ = ["KubeVolumeWriter"]


class KubeVolumeWriter:
    """VolumeWriter over ``client``; ``timeout`` overrides the client's request timeout."""

    def __init__(self, client: KubeClient, *, timeout: float | None = None) -> None:
        self.client = client
        self.timeout = timeout

    async def bind_volume(
        self, volume: str, claim: ClaimTarget, resource_version: str, *, by_controller: bool
    ) -> str:
        reply = await self.client.request(
            "PATCH",
            PERSISTENT_VOLUMES.path(None, volume),
            body=claim_ref_patch(claim, resource_version, by_controller=by_controller),
            content_type=MERGE_PATCH,
            timeout=self.timeout,
            kind="PersistentVolume",
            name=volume,
        )
        return volume_state(reply).resource_version

    async def select_node(self, claim: ClaimTarget, node: str, resource_version: str) -> str:
        reply = await self.client.request(
            "PATCH",
            PERSISTENT_VOLUME_CLAIMS.path(claim.namespace, claim.name),
            body=selected_node_patch(claim, node, resource_version),
            content_type=MERGE_PATCH,
            timeout=self.timeout,
            kind="PersistentVolumeClaim",
            name=claim.name,
        )
        return volume_state(reply).resource_version

    async def read_volume(self, name: str) -> VolumeState | None:
        try:
            obj = await self.client.request(
                "GET",
                PERSISTENT_VOLUMES.path(None, name),
                timeout=self.timeout,
                kind="PersistentVolume",
                name=name,
            )
        except NotFoundError:
            return None
        return volume_state(obj)

    async def read_volume_claim(self, namespace: str, name: str) -> VolumeState | None:
        try:
            obj = await self.client.request(
                "GET",
                PERSISTENT_VOLUME_CLAIMS.path(namespace, name),
                timeout=self.timeout,
                kind="PersistentVolumeClaim",
                name=name,
            )
        except NotFoundError:
            return None
        return volume_state(obj)
