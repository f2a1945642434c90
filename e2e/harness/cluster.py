"""One test's view of the cluster: its namespace, fake nodes, objects, CRDs.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import yaml
from fault_proxy import FaultProxy, Faults

if TYPE_CHECKING:
    from harness.emulated import EmulatedApiServer

from harness.api import Api, ApiFailure, core_path, custom_path
from harness.constants import (
    API_VERSION,
    CRD_DIR,
    MERGE_PATCH,
    PAUSE_IMAGE,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    RUN_LABEL,
    STRATEGIC_MERGE_PATCH,
)
from harness.kubelet import FakeKubelet
from harness.recorders import (
    PodInformer,
    PodRecorder,
    is_running,
    name_of,
    node_of,
    quantity,
    uid_of,
)
from harness.waiting import gather_bounded, wait_for


def load_crds(directory: Path = CRD_DIR, pattern: str = "*.yaml") -> list[dict[str, Any]]:
    """The CRDs of ``directory`` (``crds/``; ``pattern`` ``upstream/*/*.yaml``: the other
    schedulers' CRDs, as their projects publish them)."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob(pattern)):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return docs


UPSTREAM_CRDS: Final = "upstream/*/*.yaml"


async def install_crds(
    api: Api,
    *,
    timeout: float = 60.0,
    crds: list[dict[str, Any]] | None = None,
    directory: Path | None = None,
) -> list[str]:
    """Create or replace ``crds`` (by default those of ``directory``, or those of
    ``crds/`` and the other schedulers' of ``crds/upstream/``) and wait until they are
    served (the emulator serves them built in, and keeps the CRD objects as any cluster
    does). Returns the names of the CRDs created (not those that existed)."""
    crd_api = "apiextensions.k8s.io/v1"
    if crds is None:
        crds = (
            load_crds(directory)
            if directory is not None
            else [*load_crds(), *load_crds(pattern=UPSTREAM_CRDS)]
        )
    served = await api.get_or_none(f"/apis/{API_VERSION}")
    if await api.get_or_none(f"/apis/{crd_api}") is None:
        if served is None:
            raise RuntimeError(
                f"the API server serves neither {API_VERSION} nor {crd_api}: cannot install CRDs"
            )
        return []
    created: list[str] = []
    for crd in crds:
        name = crd["metadata"]["name"]
        path = core_path("customresourcedefinitions", group=crd_api)
        try:
            await api.request("POST", path, body=crd)
            created.append(name)
        except ApiFailure as exc:
            if exc.status != 409:
                raise
            existing = await api.request("GET", f"{path}/{name}")
            replacement = {
                **crd,
                "metadata": {
                    **crd["metadata"],
                    "resourceVersion": existing["metadata"]["resourceVersion"],
                },
            }
            await api.request("PUT", f"{path}/{name}", body=replacement)
    wanted: dict[str, set[str]] = defaultdict(set)
    for c in crds:
        for v in c["spec"]["versions"]:
            if v.get("served"):
                wanted[f"{c['spec']['group']}/{v['name']}"].add(c["spec"]["names"]["plural"])

    async def all_served() -> bool:
        for group_version, plurals in wanted.items():
            doc = await api.get_or_none(f"/apis/{group_version}")
            if not plurals <= {r.get("name") for r in (doc or {}).get("resources") or ()}:
                return False
        return True

    await wait_for(all_served, timeout=timeout, what=f"the CRDs of {', '.join(wanted)} served")
    return created


@dataclass
class NodeSpec:
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 110

    def allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}


class Cluster:
    """One test's view of the cluster named by a kubeconfig.

    Namespaced objects live in :attr:`namespace` (``e2e-<run id>``); cluster-scoped ones
    (Nodes, Queues, PriorityClasses) are named ``<run id>-...``. Every pod gets
    ``schedulerName`` :attr:`scheduler_name`, a nodeSelector for the run's fake nodes and
    ``automountServiceAccountToken: false``. :meth:`cleanup` deletes all of it.
    """

    def __init__(
        self,
        api: Api,
        kubeconfig: str | None,
        *,
        scheduler_name: str = "sluice",
        emulator: EmulatedApiServer | None = None,
        run_id: str | None = None,
    ) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.scheduler_name = scheduler_name
        self.emulator = emulator
        self.run_id = run_id or f"e2e{uuid.uuid4().hex[:8]}"
        self.namespace = f"e2e-{self.run_id}"
        self.scheduler_kubeconfig = kubeconfig
        """What ``sluice run`` connects with: the ServiceAccount's on a real cluster."""
        self.controller_kubeconfig = kubeconfig
        """What ``sluice controller`` connects with."""
        self.proxy: FaultProxy | None = None
        """The fault-injecting front the scheduler talks through (tests marked ``faults``)."""
        self.port_token: str | None = None
        """The bearer token the harness reads ``sluice run``'s guarded port with (a real
        cluster: ``control_plane.PORT_READER``'s); None on the emulator, which answers no
        TokenReview: ``sluice run`` then serves with ``--insecure-serving``."""
        self.lease_namespace = self.namespace
        """Where the schedulers' Lease lives (``sluice-system`` under the RBAC of
        ``manifests/``, whose Role allows Leases there only)."""
        self.nodes: dict[str, dict[str, Decimal]] = {}
        self.queues: list[str] = []
        self.priority_classes: list[str] = []
        self.default_queue_created = False
        self.informer = PodInformer(api, self.namespace)
        self.recorder = PodRecorder(self.nodes)
        self.informer.listeners.append(self.recorder.observe)
        self.informer.sync_listeners.append(self.recorder.sync)
        self.kubelet = FakeKubelet(api, self.namespace, self.nodes, node_leases=emulator is None)
        self.informer.listeners.append(self.kubelet.on_pod)
        self.informer.sync_listeners.append(self.kubelet.on_sync)
        self._created_pods = 0

    @property
    def emulated(self) -> bool:
        return self.emulator is not None

    @property
    def faults(self) -> Faults:
        """What the fault proxy did (a test marked ``faults`` only)."""
        assert self.proxy is not None, "the test has no fault proxy (mark it with faults(...))"
        return self.proxy.faults

    async def put_behind_proxy(self, faults: Faults, workdir: Path) -> FaultProxy:
        """From now on ``sluice run`` talks to the API server through a :class:`FaultProxy`
        that acts as :attr:`scheduler_kubeconfig`'s user and injects ``faults``. The
        harness's own calls (and the fake kubelet's) stay direct. Stopped by the fixture."""
        proxy = FaultProxy(self.scheduler_kubeconfig, workdir, faults)
        await proxy.start()
        self.proxy = proxy
        self.scheduler_kubeconfig = proxy.kubeconfig
        return proxy

    def name(self, suffix: str) -> str:
        """A cluster-wide name unique to this run."""
        return f"{self.run_id}-{suffix}"

    # ----------------------------------------------------------------- set up, clean up

    async def setup(self) -> None:
        """Namespace (with its default ServiceAccount: no controller manager may create
        it), then the default Queue if missing."""
        await self.api.request(
            "POST",
            core_path("namespaces"),
            body={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {RUN_LABEL: self.run_id}},
            },
        )
        if not self.emulated:
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            try:
                await self.api.request(
                    "POST", core_path("serviceaccounts", self.namespace), body=sa
                )
            except ApiFailure as exc:
                if exc.status not in (404, 409):  # 404: a server without ServiceAccounts
                    raise
        if await self.api.get_or_none(custom_path("queues", None, "default")) is None:
            await self.create_queue("default", weight=1, raw_name=True)
            self.default_queue_created = True

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The pod informer and the fake kubelet, until cancelled."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.informer.list_watch.run)
            tg.start_soon(self.kubelet.run)
            task_status.started()

    async def cleanup(self) -> None:
        """Delete everything this run created (pods at once, with grace 0, since no real
        kubelet will finish them), best effort."""
        suppress = contextlib.suppress(ApiFailure)
        with suppress:
            doc = await self.api.request("GET", core_path("pods", self.namespace))
            async with anyio.create_task_group() as tg:
                for p in doc.get("items") or ():
                    tg.start_soon(
                        self._delete_quietly, core_path("pods", self.namespace, name_of(p))
                    )
        if not self.emulated:
            with suppress:
                await self.api.request(
                    "DELETE",
                    custom_path("podgroups", self.namespace),
                )
        for node in list(self.nodes):
            await self._delete_quietly(core_path("nodes", None, node))
            if not self.emulated:
                await self._delete_quietly(
                    core_path("leases", "kube-node-lease", node, group="coordination.k8s.io/v1")
                )
        for q in self.queues:
            await self._delete_quietly(custom_path("queues", None, q))
        for pc in self.priority_classes:
            await self._delete_quietly(
                core_path("priorityclasses", None, pc, group="scheduling.k8s.io/v1")
            )
        if self.lease_namespace != self.namespace:
            await self._delete_quietly(
                core_path(
                    "leases",
                    self.lease_namespace,
                    f"sluice-{self.run_id}",
                    group="coordination.k8s.io/v1",
                )
            )
        await self._delete_quietly(core_path("namespaces", None, self.namespace))

    async def _delete_quietly(self, path: str) -> None:
        with contextlib.suppress(ApiFailure):
            await self.api.request("DELETE", path, body={"gracePeriodSeconds": 0})

    # ----------------------------------------------------------------- nodes

    def node_manifest(
        self, suffix: str, spec: NodeSpec | None = None, *, labels: Mapping[str, str] = ()
    ) -> dict[str, Any]:
        """A fake Node (capacity, allocatable, Ready) labelled for this run, and known from
        now on to the recorder and the fake kubelet; not created."""
        spec = spec or NodeSpec()
        name = self.name(suffix)
        allocatable = spec.allocatable()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "sluice e2e fake kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.0-sluice-e2e"},
        }
        self.nodes[name] = {k: quantity(v) for k, v in allocatable.items()}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    RUN_LABEL: self.run_id,
                    "kubernetes.io/hostname": name,
                    "type": "sluice-e2e-fake",
                    **dict(labels),
                },
            },
            "spec": {},
            "status": status,
        }

    async def create_node(
        self, suffix: str, spec: NodeSpec | None = None, *, labels: Mapping[str, str] = ()
    ) -> str:
        """Create :meth:`node_manifest`, without the not-ready taint a real API server's
        admission adds; returns its name."""
        node = self.node_manifest(suffix, spec, labels=labels)
        name = node["metadata"]["name"]
        created = await self.api.request("POST", core_path("nodes"), body=node)
        # A real API server may drop status on create: write it through the status
        # subresource, then remove the not-ready taint that admission adds.
        await self.api.request(
            "PATCH",
            core_path("nodes", None, name, "status"),
            body={"status": node["status"]},
            content_type=STRATEGIC_MERGE_PATCH,
        )
        taints = (created.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if not str(t.get("key", "")).startswith("node.kubernetes.io/")]
        if kept != taints:
            await self.api.request(
                "PATCH",
                core_path("nodes", None, name),
                body={"spec": {"taints": kept or None}},
                content_type=MERGE_PATCH,
            )
        return name

    async def create_nodes(
        self, count: int, spec: NodeSpec | None = None, *, prefix: str = "n", concurrency: int = 16
    ) -> list[str]:
        """``count`` nodes named ``<prefix>0`` ..., ``concurrency`` at a time; their names."""
        return await gather_bounded(
            [lambda i=i: self.create_node(f"{prefix}{i}", spec) for i in range(count)],
            concurrency,
        )

    # ----------------------------------------------------------------- pods

    def pod_manifest(
        self,
        name: str,
        *,
        cpu: str = "100m",
        memory: str = "64Mi",
        priority: tuple[str, int] | None = None,
        group: str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] = (),
        node_selector: Mapping[str, str] = (),
        scheduler_name: str | None = None,
        scheduling_gates: Sequence[str] = (),
        resource_claims: Sequence[Mapping[str, str]] = (),
        volumes: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """A pod for this run. ``priority`` is (PriorityClass name, its value): the name is
        written, and the API server's Priority admission (the emulator's too) sets the
        value. ``scheduling_gates`` names its ``spec.schedulingGates`` (as Kueue creates
        the pods of a workload it has not admitted yet); ``resource_claims`` is its
        ``spec.resourceClaims`` (DRA); ``volumes`` its ``spec.volumes``."""
        meta_labels = {RUN_LABEL: self.run_id, **dict(labels)}
        if group:
            meta_labels[POD_GROUP_LABEL] = group
        if queue:
            meta_labels[QUEUE_LABEL] = queue
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name or self.scheduler_name,
            "nodeSelector": {RUN_LABEL: self.run_id, **dict(node_selector)},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        }
        if priority is not None:
            spec["priorityClassName"] = priority[0]
        if scheduling_gates:
            spec["schedulingGates"] = [{"name": g} for g in scheduling_gates]
        if resource_claims:
            spec["resourceClaims"] = [dict(c) for c in resource_claims]
        if volumes:
            spec["volumes"] = [dict(v) for v in volumes]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": meta_labels},
            "spec": spec,
        }

    async def create_pod(self, name: str, **options: Any) -> dict[str, Any]:
        self._created_pods += 1
        return await self.api.request(
            "POST", core_path("pods", self.namespace), body=self.pod_manifest(name, **options)
        )

    async def create_pods(
        self, names: Iterable[str], *, concurrency: int = 16, **options: Any
    ) -> None:
        """Create many pods, ``concurrency`` requests at a time."""
        await gather_bounded(
            [lambda n=n: self.create_pod(n, **options) for n in names], concurrency
        )

    async def delete_pod(self, name: str, *, grace: int | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        await self.api.request("DELETE", core_path("pods", self.namespace, name), body=body)

    async def patch_pod(self, name: str, patch: Any, *, json_patch: bool = False) -> None:
        """Patch a pod's main resource: a strategic-merge patch, or (``json_patch``) a
        list of JSON-patch operations."""
        kind = "json-patch+json" if json_patch else "strategic-merge-patch+json"
        await self.api.request(
            "PATCH",
            core_path("pods", self.namespace, name),
            body=patch,
            content_type=f"application/{kind}",
        )

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(core_path("pods", self.namespace, name))

    async def list_pods(self) -> list[dict[str, Any]]:
        doc = await self.api.request("GET", core_path("pods", self.namespace))
        return [p for p in doc.get("items") or () if isinstance(p, dict)]

    def pod(self, name: str) -> dict[str, Any] | None:
        """The latest state the pod watch showed (None: absent)."""
        return self.informer.pods.get(name)

    def bound(self, names: Iterable[str]) -> dict[str, str]:
        """name -> node of those of ``names`` the watch shows bound."""
        out = {}
        for n in names:
            p = self.informer.pods.get(n)
            if p is not None and node_of(p):
                out[n] = node_of(p)
        return out

    def all_bound(self, names: Sequence[str]) -> bool:
        return len(self.bound(names)) == len(names)

    def all_running(self, names: Sequence[str]) -> bool:
        return all((p := self.informer.pods.get(n)) is not None and is_running(p) for n in names)

    def describe_pods(self, names: Iterable[str] | None = None) -> str:
        """One line per pod (for failure messages): node, phase, conditions."""
        lines = []
        for n in sorted(names if names is not None else self.informer.pods):
            p = self.informer.pods.get(n)
            if p is None:
                lines.append(f"  {n}: absent")
                continue
            conds = [
                f"{c.get('type')}={c.get('status')}({c.get('reason', '')})"
                for c in (p.get("status") or {}).get("conditions") or ()
            ]
            status = p.get("status") or {}
            lines.append(
                f"  {n}: node={node_of(p) or '-'} phase={status.get('phase')} "
                f"nominated={status.get('nominatedNodeName', '-')} {' '.join(conds)}"
            )
        return "\n".join(lines[:60]) + ("\n  ..." if len(lines) > 60 else "")

    # ----------------------------------------------------------------- other objects

    async def create_queue(
        self, suffix: str, *, weight: int = 1, raw_name: bool = False, **spec: Any
    ) -> str:
        name = suffix if raw_name else self.name(suffix)
        body = {
            "apiVersion": API_VERSION,
            "kind": "Queue",
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
            "spec": {"weight": weight, **spec},
        }
        await self.api.request("POST", custom_path("queues"), body=body)
        self.queues.append(name)
        return name

    async def get_queue(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(custom_path("queues", None, name))

    async def create_pod_group(
        self, name: str, *, min_member: int, queue: str | None = None, **spec: Any
    ) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {RUN_LABEL: self.run_id},
            },
            "spec": {"minMember": min_member, **({"queue": queue} if queue else {}), **spec},
        }
        return await self.api.request("POST", custom_path("podgroups", self.namespace), body=body)

    async def get_pod_group(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(custom_path("podgroups", self.namespace, name))

    async def create_priority_class(
        self, suffix: str, value: int, *, preemption_policy: str = "PreemptLowerPriority"
    ) -> tuple[str, int]:
        """A PriorityClass for this run; returns (name, value) for :meth:`pod_manifest`.
        ``preemption_policy`` is the class's, which Priority admission gives its pods."""
        name = self.name(suffix)
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": preemption_policy,
        }
        await self.api.request(
            "POST", core_path("priorityclasses", group="scheduling.k8s.io/v1"), body=body
        )
        self.priority_classes.append(name)
        return name, value

    async def create_pdb(
        self, name: str, *, selector: Mapping[str, str], min_available: int
    ) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
        }
        await self.api.request(
            "POST", core_path("poddisruptionbudgets", self.namespace, group="policy/v1"), body=body
        )

    async def events(self) -> list[dict[str, Any]]:
        """The namespace's Events, in the events.k8s.io/v1 shape (``regarding``, ``note``),
        from events.k8s.io/v1 and core v1 both (a scheduler may write either)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        doc = await self.api.request(
            "GET", core_path("events", self.namespace, group="events.k8s.io/v1")
        )
        for e in doc.get("items") or ():
            seen.add(uid_of(e) or name_of(e))
            out.append(e)
        core = await self.api.request("GET", core_path("events", self.namespace))
        for e in core.get("items") or ():
            if (uid_of(e) or name_of(e)) in seen:
                continue
            out.append(
                {
                    **e,
                    "regarding": e.get("involvedObject") or {},
                    "note": e.get("message", ""),
                    "reportingController": (e.get("source") or {}).get("component", ""),
                }
            )
        return out

    async def get_lease(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return await self.api.get_or_none(
            core_path(
                "leases", namespace or self.lease_namespace, name, group="coordination.k8s.io/v1"
            )
        )
