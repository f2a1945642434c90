"""The fake kubelet: plays the kubelet through the API for the fake nodes.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc

from harness.api import Api, ApiFailure, core_path
from harness.constants import MERGE_PATCH, STRATEGIC_MERGE_PATCH
from harness.recorders import is_running, name_of, node_of, uid_of


class FakeKubelet:
    """The kubelet of the fake nodes, played through the API.

    For every pod of the namespace bound to one of ``nodes``: not Running yet -> a
    strategic-merge patch of its status (phase Running, Ready, ContainersReady,
    Initialized); being deleted -> deleted again with ``gracePeriodSeconds: 0`` (what
    the kubelet does when the containers have stopped). Calls run in ``workers``
    concurrent tasks and are retried until they succeed or the pod is gone. With
    ``node_leases``, the nodes' Leases in ``kube-node-lease`` are renewed every
    ``lease_interval`` seconds (the heartbeat a real cluster's node lifecycle
    controller checks).
    """

    def __init__(
        self,
        api: Api,
        namespace: str,
        nodes: Mapping[str, Any],
        *,
        workers: int = 16,
        node_leases: bool = False,
        lease_interval: float = 10.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.nodes = nodes
        self.workers = workers
        self.node_leases = node_leases
        self.lease_interval = lease_interval
        send, receive = anyio.create_memory_object_stream[tuple[str, str, str]](math.inf)
        self._send = send
        self._receive = receive
        self._queued: set[tuple[str, str, str]] = set()
        self.started = 0
        self.finished = 0
        self.failures = 0

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED" or node_of(pod) not in self.nodes:
            return
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            self._enqueue(("finish", name_of(pod), uid_of(pod)))
        elif phase not in ("Succeeded", "Failed") and not is_running(pod):
            self._enqueue(("start", name_of(pod), uid_of(pod)))

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        for p in pods:
            self.on_pod("MODIFIED", p)

    def _enqueue(self, item: tuple[str, str, str]) -> None:
        if item not in self._queued:
            self._queued.add(item)
            self._send.send_nowait(item)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(self.workers):
                tg.start_soon(self._worker)
            if self.node_leases:
                tg.start_soon(self._heartbeat)

    async def _worker(self) -> None:
        async for item in self._receive:
            action, name, uid = item
            try:
                await self._do(action, name, uid)
            except ApiFailure as exc:
                if exc.status in (404, 409):  # gone, or another pod of that name now
                    self._queued.discard(item)
                    continue
                self.failures += 1
                await anyio.sleep(0.2)
                self._queued.discard(item)
                self._enqueue(item)
                continue
            self._queued.discard(item)

    async def _do(self, action: str, name: str, uid: str) -> None:
        if action == "start":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            conditions = [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("Initialized", "ContainersReady", "Ready")
            ]
            body = {
                "metadata": {"uid": uid},
                "status": {
                    "phase": "Running",
                    "startTime": now,
                    "conditions": conditions,
                },
            }
            await self.api.request(
                "PATCH",
                core_path("pods", self.namespace, name, "status"),
                body=body,
                content_type=STRATEGIC_MERGE_PATCH,
            )
            self.started += 1
        else:
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid},
            }
            await self.api.request("DELETE", core_path("pods", self.namespace, name), body=options)
            self.finished += 1

    async def _heartbeat(self) -> None:
        namespace = "kube-node-lease"
        while True:
            for node in list(self.nodes):
                now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
                path = core_path("leases", namespace, group="coordination.k8s.io/v1")
                lease = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": node, "namespace": namespace},
                    "spec": {
                        "holderIdentity": node,
                        "leaseDurationSeconds": 40,
                        "renewTime": now,
                    },
                }
                with contextlib.suppress(ApiFailure):
                    try:
                        await self.api.request("POST", path, body=lease)
                    except ApiFailure as exc:
                        if exc.status != 409:
                            raise
                        await self.api.request(
                            "PATCH",
                            f"{path}/{node}",
                            body={"spec": {"renewTime": now}},
                            content_type=MERGE_PATCH,
                        )
            await anyio.sleep(self.lease_interval)
