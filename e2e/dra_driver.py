"""A fake DRA driver for the end-to-end tests, and a watch of the claims' invariants.

:class:`FakeDriver` does what a DRA driver's kubelet plugin does for the scheduler: it
publishes one ResourceSlice per node (``nodeName``, a pool named after the node,
generation 1) with ``devices`` devices ``gpu-0``.. carrying the attributes ``run`` (this
test run) and ``index``, and a DeviceClass that selects this run's devices only (slices
and classes are cluster-scoped: other runs may publish theirs meanwhile). It deletes them
again in :meth:`FakeDriver.cleanup`.

:class:`ClaimWatch` lists and watches the test namespace's ResourceClaims and checks on
every event that no device is allocated to two claims; :meth:`ClaimWatch.check_pods`
checks every bound pod against its claims (allocated, reserved for it, on its node).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from harness import ApiFailure, Cluster, ListWatch, core_path, name_of, node_of, uid_of

RESOURCE = "resource.k8s.io/v1"
DRIVER = "gpu.sluice-e2e.example.com"


def resource_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    return core_path(plural, namespace, name, sub, group=RESOURCE)


class FakeDriver:
    """Publishes this run's devices and their DeviceClass (see the module docstring)."""

    def __init__(self, cluster: Cluster, *, devices: int = 2) -> None:
        self.cluster = cluster
        self.devices = devices
        self.class_name = f"gpu-{cluster.run_id}"
        self.slices: list[str] = []

    async def publish(self, nodes: Iterable[str]) -> None:
        """The DeviceClass, then one ResourceSlice per node of ``nodes``."""
        await self.cluster.api.request(
            "POST",
            resource_path("deviceclasses"),
            body={
                "apiVersion": RESOURCE,
                "kind": "DeviceClass",
                "metadata": {"name": self.class_name},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.driver == "{DRIVER}" && '
                                f'device.attributes["{DRIVER}"].run == "{self.cluster.run_id}"'
                            }
                        }
                    ]
                },
            },
        )
        for node in nodes:
            name = f"{node}-gpus"
            devices = [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"run": {"string": self.cluster.run_id}, "index": {"int": i}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(self.devices)
            ]
            await self.cluster.api.request(
                "POST",
                resource_path("resourceslices"),
                body={
                    "apiVersion": RESOURCE,
                    "kind": "ResourceSlice",
                    "metadata": {"name": name},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": devices,
                    },
                },
            )
            self.slices.append(name)

    async def cleanup(self) -> None:
        with contextlib.suppress(ApiFailure):
            for name in self.slices:
                await self.cluster.api.request(
                    "DELETE", resource_path("resourceslices", None, name)
                )
            await self.cluster.api.request(
                "DELETE", resource_path("deviceclasses", None, self.class_name)
            )

    def request(self, name: str = "gpu", count: int = 1) -> dict[str, Any]:
        """A claim request of ``count`` devices of this run's class."""
        return {"name": name, "exactly": {"deviceClassName": self.class_name, "count": count}}

    async def _create(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        plural = kind.lower() + "s"
        await self.cluster.api.request(
            "POST",
            resource_path(plural, self.cluster.namespace),
            body={"apiVersion": RESOURCE, "kind": kind, "metadata": {"name": name}, "spec": spec},
        )

    async def create_claim(self, name: str, count: int = 1) -> None:
        await self._create(
            "ResourceClaim", name, {"devices": {"requests": [self.request(count=count)]}}
        )

    async def create_template(self, name: str, count: int = 1) -> None:
        claim = {"devices": {"requests": [self.request(count=count)]}}
        await self._create("ResourceClaimTemplate", name, {"spec": claim})


def devices_of(claim: Mapping[str, Any]) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        f"{r['driver']}/{r['pool']}/{r['device']}"
        for r in (allocation.get("devices") or {}).get("results") or ()
    ]


class ClaimWatch:
    """The namespace's claims, checked on every watch event (module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.claims: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.events = 0
        self.list_watch = ListWatch(
            cluster.api,
            resource_path("resourceclaims", cluster.namespace),
            self._sync,
            self._event,
        )

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        await self.list_watch.run(task_status=task_status)

    def _sync(self, items: list[dict[str, Any]]) -> None:
        self.claims = {name_of(c): c for c in items}
        self._check()

    def _event(self, kind: str, claim: dict[str, Any]) -> None:
        self.events += 1
        if kind == "DELETED":
            self.claims.pop(name_of(claim), None)
        else:
            self.claims[name_of(claim)] = claim
        self._check()

    def _check(self) -> None:
        owner: dict[str, str] = {}
        for name, claim in self.claims.items():
            for device in devices_of(claim):
                if device in owner:
                    self.violations.append(f"{device} allocated to {owner[device]} and {name}")
                owner[device] = name

    def claims_of(self, pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The claims of ``pod`` (None while one is not known yet)."""
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        out = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            claim = self.claims.get(str(name))
            if claim is None:
                return None
            out.append(claim)
        return out

    def check_pods(self, pods: Iterable[Mapping[str, Any]]) -> list[str]:
        """Every bound pod's claims: allocated, reserved for it, usable on its node."""
        problems = []
        for pod in pods:
            node = node_of(pod)
            if not node:
                continue
            claims = self.claims_of(pod)
            if claims is None:
                problems.append(f"{name_of(pod)} bound to {node} without its claims")
                continue
            for claim in claims:
                status = claim.get("status") or {}
                reserved = {r.get("uid") for r in status.get("reservedFor") or ()}
                terms = ((status.get("allocation") or {}).get("nodeSelector") or {}).get(
                    "nodeSelectorTerms"
                ) or []
                nodes = {v for t in terms for f in t.get("matchFields") or () for v in f["values"]}
                if not devices_of(claim):
                    problems.append(f"{name_of(pod)}: claim {name_of(claim)} not allocated")
                elif uid_of(pod) not in reserved:
                    problems.append(f"{name_of(pod)}: claim {name_of(claim)} not reserved for it")
                elif nodes and node not in nodes:
                    problems.append(f"{name_of(pod)} on {node}, claim {name_of(claim)} on {nodes}")
        return problems
