"""A fake DRA driver for the end-to-end tests, and a watch of the claims' invariants.

:class:`FakeDriver` does what a DRA driver's kubelet plugin does for the scheduler: it
publishes one ResourceSlice per node (``nodeName``, a pool named after the node,
generation 1) with ``devices`` devices ``gpu-0``.. carrying the attributes ``run`` (this
test run) and ``index``, and a DeviceClass that selects this run's devices only (slices
and classes are cluster-scoped: other runs may publish theirs meanwhile), naming the
run's extended resource :attr:`FakeDriver.extended_resource` (KEP-5004) when asked. It
deletes them again in :meth:`FakeDriver.cleanup`.

:class:`ClaimWatch` lists and watches the test namespace's ResourceClaims and checks on
every event that no device is allocated to two claims, and that a claim made for a pod's
extended resources is shaped as kube-scheduler makes it; :meth:`ClaimWatch.check_pod_event`
checks each pod event (a pod bound while asking an extended resource already names its
claim in ``status.extendedResourceClaimStatus``); :meth:`ClaimWatch.check_pods` checks
every bound pod against its claims (allocated, reserved for it, on its node).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from harness import ApiFailure, Cluster, ListWatch, core_path, name_of, node_of, uid_of

RESOURCE = "resource.k8s.io/v1"
DRIVER = "gpu.sluice-e2e.example.com"
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
FINALIZER = "resource.kubernetes.io/delete-protection"


def resource_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    return core_path(plural, namespace, name, sub, group=RESOURCE)


class FakeDriver:
    """Publishes this run's devices and their DeviceClass (see the module docstring)."""

    def __init__(self, cluster: Cluster, *, devices: int = 2, extended: bool = False) -> None:
        self.cluster = cluster
        self.devices = devices
        self.class_name = f"gpu-{cluster.run_id}"
        self.extended_resource = f"{cluster.run_id}.example.com/gpu" if extended else ""
        """The extended resource the class serves ("" when none): one per run, since of
        two classes naming the same resource only the newer serves it."""
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
                    ],
                    **(
                        {"extendedResourceName": self.extended_resource}
                        if self.extended_resource
                        else {}
                    ),
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

    def __init__(self, cluster: Cluster, driver: FakeDriver | None = None) -> None:
        self.cluster = cluster
        self.driver = driver
        self.claims: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.events = 0
        self.pod_events = 0
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
            if (claim["metadata"].get("annotations") or {}).get(EXTENDED_ANNOTATION):
                self.violations.extend(self._extended_shape(claim))

    def _extended_shape(self, claim: Mapping[str, Any]) -> list[str]:
        """How the claim made for a pod's extended resources differs from kube-scheduler's
        (annotated, controlled by its pod, named after it, ``ExactCount`` requests named
        ``container-<i>-request-<j>`` of the driver's class; once allocated: the
        finalizer, and reserved for its pod only)."""
        meta = claim["metadata"]
        name = meta["name"]
        owners = meta.get("ownerReferences") or []
        if meta["annotations"][EXTENDED_ANNOTATION] != "true" or len(owners) != 1:
            return [f"extended claim {name}: annotations {meta['annotations']}, owners {owners}"]
        owner = owners[0]
        problems = []
        if (owner.get("apiVersion"), owner.get("kind"), owner.get("controller")) != (
            "v1",
            "Pod",
            True,
        ):
            problems.append(f"extended claim {name}: owner {owner}")
        if meta.get("generateName") != f"{owner['name']}-extended-resources-":
            problems.append(f"extended claim {name}: generateName {meta.get('generateName')}")
        for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
            exactly = r.get("exactly") or {}
            parts = str(r.get("name")).split("-")
            if (
                len(parts) != 4
                or parts[0::2] != ["container", "request"]
                or exactly.get("allocationMode") != "ExactCount"
                or (
                    self.driver is not None
                    and exactly.get("deviceClassName") != self.driver.class_name
                )
            ):
                problems.append(f"extended claim {name}: request {r}")
        status = claim.get("status") or {}
        if status.get("allocation"):
            reserved = [(c.get("resource"), c.get("uid")) for c in status.get("reservedFor") or ()]
            if FINALIZER not in (meta.get("finalizers") or ()):
                problems.append(f"extended claim {name} allocated without the finalizer")
            if reserved not in ([], [("pods", owner["uid"])]):
                problems.append(f"extended claim {name} reserved for {reserved}")
        return problems

    def check_pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pod listener (``cluster.informer.listeners``): a pod bound while asking the
        driver's extended resource carries ``status.extendedResourceClaimStatus`` already,
        which kube-scheduler writes before the binding."""
        self.pod_events += 1
        resource = self.driver.extended_resource if self.driver is not None else ""
        if kind == "DELETED" or not resource or not node_of(pod) or not asks(pod, resource):
            return
        status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
        if not status.get("resourceClaimName") or not status.get("requestMappings"):
            self.violations.append(f"{name_of(pod)} bound without extendedResourceClaimStatus")

    def claims_of(self, pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The claims of ``pod``, the one made for its extended resources included (None
        while one is not known yet)."""
        status = pod.get("status") or {}
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or ()
        }
        names = [
            entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            for entry in (pod.get("spec") or {}).get("resourceClaims") or ()
        ]
        resource = self.driver.extended_resource if self.driver is not None else ""
        if resource and asks(pod, resource):
            names.append((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
        out = []
        for name in names:
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


def asks(pod: Mapping[str, Any], resource: str) -> bool:
    """Does ``pod`` request ``resource`` in one of its containers?"""
    spec = pod.get("spec") or {}
    return any(
        resource in ((c.get("resources") or {}).get("requests") or {})
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    )
