"""A cluster that is already there when the scheduler starts: the shared base of a shape
of ``python -m bench real`` (the ``restart`` shape, issue 39).

Job: a shape whose nodes and running pods are many (5,000 nodes and 130,000 running pods)
sets them up **once** for every run of the shape, in a namespace of their own (the
*base*), instead of once per run: 260,000 writes per run would take minutes on 2 cores,
and the runners would not start from the same cluster. Each run then only creates its
measured pods (in its own namespace, selecting the base's nodes), starts its scheduler
cold, and deletes its pods afterwards, so the next run finds the base as it was.

The base's objects look as a kubelet leaves them (:func:`kubelet_node_status`,
:func:`kubelet_pod_status`): a restart reads what a real cluster holds, and most of a
running pod's bytes are its status. Its running pods are Sluice's
(``schedulerName: sluice``): for kube-scheduler a bound pod is a bound pod whatever
scheduler placed it; for Sluice its own pods are jobs to keep (the harder case, and the
real one after a restart).

Contracts: a base is complete when its namespace carries :data:`COMPLETE` with the
shape's sizes; :func:`ensure_base` reuses a complete base with those sizes (so a control
plane kept with ``--keep`` serves the next invocation at once) and removes and remakes
any other; :func:`delete_base` removes the mark, its pods (grace period 0) and its
nodes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from bench.real_cluster import (
    RUN_LABEL,
    Shape,
    _patch_status,
    bounded,
    create,
    node_object,
    pod_object,
)
from bench.workloads import NODE_ALLOCATABLE
from scheduler.api import labels as L
from scheduler.api.errors import AlreadyExistsError, NotFoundError
from scheduler.kube import KubeClient
from scheduler.kube.resource_paths import MERGE_PATCH, NODES, PODS

COMPLETE: Final = "bench.sluice.dev/base-complete"
"""Annotation of a base's namespace once every object of it exists: ``nodes/running``."""
STAMP: Final = "2026-11-28T00:00:00Z"
"""The times written in kubelet-like statuses (the bench's objects do not age)."""
IMAGES: Final = 8
"""Container images a kubelet-like node reports."""


@dataclass(frozen=True, slots=True)
class Base:
    """A base set up: its namespace, which is also the value of its nodes' run label."""

    namespace: str
    nodes: int
    running: int
    setup_seconds: float
    reused: bool


def base_name(shape: Shape) -> str:
    return f"bench-base-{shape.name[:8]}-{shape.nodes}-{shape.running}"


def kubelet_node_status(name: str, i: int) -> dict[str, Any]:
    """A node's status as a kubelet reports it: capacity, allocatable, the four
    conditions, addresses, its software, and a few images."""
    amounts = {
        **NODE_ALLOCATABLE,
        "ephemeral-storage": "100Gi",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    condition = {"lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
    return {
        "status": {
            "capacity": dict(amounts),
            "allocatable": dict(amounts),
            "conditions": [
                {**condition, "type": kind, "status": "False", "reason": f"KubeletHas{ok}"}
                for kind, ok in (
                    ("MemoryPressure", "SufficientMemory"),
                    ("DiskPressure", "NoDiskPressure"),
                    ("PIDPressure", "SufficientPID"),
                )
            ]
            + [
                {
                    **condition,
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"{i:08x}-0000-4000-8000-000000000000",
                "bootID": f"{i:08x}-0000-4000-8000-000000000001",
                "kernelVersion": "6.1.0-28-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/team/app-{k}@sha256:{k:064x}",
                        f"registry.example.com/team/app-{k}:v1.{k}",
                    ],
                    "sizeBytes": 50_000_000 + k * 1_000_000,
                }
                for k in range(IMAGES)
            ],
        }
    }


def kubelet_node(base: str, i: int) -> dict[str, Any]:
    """A base's node, labelled as a kubelet labels its node."""
    obj = node_object(base, i)
    labels = obj["metadata"]["labels"]
    labels.update(
        {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "bench-4x32",
            "topology.kubernetes.io/region": "bench",
            "topology.kubernetes.io/zone": f"bench-{i % 3}",
        }
    )
    return obj


def kubelet_pod_status(i: int) -> dict[str, Any]:
    """A running pod's status as its kubelet writes it: the five conditions, the IPs,
    the start and the one container's state."""
    ip = f"10.{128 + i // 65536 % 128}.{i // 256 % 256}.{i % 256}"
    host = f"10.0.{i // 256 % 256}.{i % 256}"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
        for kind in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host,
            "hostIPs": [{"ip": host}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": STAMP,
            "containerStatuses": [
                {
                    "name": "pause",
                    "state": {"running": {"startedAt": STAMP}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "registry.k8s.io/pause@sha256:" + "e" * 64,
                    "containerID": f"containerd://{i:064x}",
                    "started": True,
                }
            ],
        }
    }


async def _namespace(api: KubeClient, name: str) -> dict[str, Any] | None:
    try:
        return await api.request("GET", f"/api/v1/namespaces/{name}", kind="Namespace")
    except NotFoundError:
        return None


async def ensure_base(api: KubeClient, shape: Shape, *, concurrency: int) -> Base:
    """The base of ``shape``: reused when complete with its sizes, else (re)made: its
    namespace, its nodes (kubelet-like, status patched), its running pods (created bound
    round-robin, status patched Running), then the namespace marked complete."""
    name = base_name(shape)
    want = f"{shape.nodes}/{shape.running}"
    t0 = time.monotonic()
    ns = await _namespace(api, name)
    if ns is not None:
        if ((ns.get("metadata") or {}).get("annotations") or {}).get(COMPLETE) == want:
            return Base(name, shape.nodes, shape.running, 0.0, reused=True)
        await _delete_objects(api, name)
    else:
        with contextlib.suppress(AlreadyExistsError):
            await create(
                api,
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            )

    def node_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            obj = kubelet_node(name, i)
            with contextlib.suppress(AlreadyExistsError):
                await create(api, NODES.path(), obj)
            node = obj["metadata"]["name"]
            await _patch_status(api, NODES.path(None, node, "status"), kubelet_node_status(node, i))

        return job

    await bounded(concurrency, (node_job(i) for i in range(shape.nodes)))

    def pod_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            pod = f"running-{i}"
            node = f"{name}-node-{i % shape.nodes}"
            obj = pod_object(
                name, pod, scheduler_name=L.SCHEDULER_NAME, cpu=shape.running_cpu, node_name=node
            )
            obj["metadata"]["labels"]["app"] = f"app-{i % 100}"
            with contextlib.suppress(AlreadyExistsError):
                await create(api, PODS.path(name), obj)
            await _patch_status(api, PODS.path(name, pod, "status"), kubelet_pod_status(i))

        return job

    await bounded(concurrency, (pod_job(i) for i in range(shape.running)))
    await api.request(
        "PATCH",
        f"/api/v1/namespaces/{name}",
        body={"metadata": {"annotations": {COMPLETE: want}}},
        content_type=MERGE_PATCH,
        kind="Namespace",
    )
    return Base(name, shape.nodes, shape.running, round(time.monotonic() - t0, 1), reused=False)


async def _delete_objects(api: KubeClient, name: str) -> None:
    """The pods of base ``name`` (grace period 0: no kubelet finishes them) and its nodes."""
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    for path, query in (
        (PODS.path(name), []),
        (NODES.path(), [("labelSelector", f"{RUN_LABEL}={name}")]),
    ):
        with contextlib.suppress(NotFoundError):
            await api.request("DELETE", path, query=query, body=now, timeout=900)


async def delete_base(api: KubeClient, base: Base) -> None:
    """Remove ``base``: no longer marked complete, then its pods and its nodes. The
    namespace stays, as every run's does (no namespace controller would finish deleting
    it); :func:`ensure_base` makes the base again in it."""
    with contextlib.suppress(NotFoundError):
        await api.request(
            "PATCH",
            f"/api/v1/namespaces/{base.namespace}",
            body={"metadata": {"annotations": {COMPLETE: None}}},
            content_type=MERGE_PATCH,
            kind="Namespace",
        )
    await _delete_objects(api, base.namespace)
