"""The cluster side of ``python -m bench real`` (see :mod:`bench.real`): the shapes and
the objects of a run, the control plane and the processes measured, the API calls that
set a run up and clean it away, and the watches that note when each pod is bound and
when its Scheduled event is written.

Contracts: every object of a run is in its namespace or carries its label
``bench.sluice.dev/run``, so :func:`cleanup_run` removes it all; calls go through one
:class:`~scheduler.kube.KubeClient` (no rate limit), setup calls are retried a few times
on a server error, and the first failure ends a bounded batch (:func:`bounded`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import yaml

from bench.http_workload import _cpu_seconds, _free_port, _vm_hwm_kib
from bench.real_volumes import BOUND as BOUND_PVS
from bench.real_volumes import LOCAL as LOCAL_PVS
from bench.real_volumes import (
    bind_claim,
    bound_volume,
    cleanup_volumes,
    pod_volumes,
    storage_objects,
)
from bench.workloads import NODE_ALLOCATABLE, POD_REQUESTS
from scheduler.api import labels as L
from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    GoneError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.kube import KubeClient
from scheduler.kube.resource_paths import EVENTS, MERGE_PATCH, NODES, POD_GROUPS, PODS, QUEUES

K8S_DIR: Final = Path(os.environ.get("SLUICE_K8S_DIR", "/work/shared/k8s"))
"""Where ``up`` and ``down`` are (``../shared/k8s``)."""
ROOT: Final = Path(__file__).resolve().parent.parent
RUN_LABEL: Final = "bench.sluice.dev/run"
KUBE_SCHEDULER: Final = "default-scheduler"
RAW_SCHEDULER: Final = "bench-nobody"
"""The schedulerName of the raw runs' pods: no scheduler takes them."""
HIGH_PRIORITY_CLASS: Final = "bench-high"
HIGH_PRIORITY: Final = 10


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    nodes: int
    running: int
    """Pods bound before the run (round-robin over the nodes)."""
    pods: int
    """Measured pods."""
    description: str
    running_cpu: str = POD_REQUESTS["cpu"]
    pod_cpu: str = POD_REQUESTS["cpu"]
    high_priority: bool = False
    """Measured pods of PriorityClass ``bench-high`` (preemptors)."""
    gang_size: int = 0
    """Measured pods in PodGroups of this many (minMember), for Sluice; 0: none."""
    devices: int = 0
    """DRA devices per node (a ResourceSlice each); every measured pod then has a claim of
    one device (even pods) or two (odd pods), created in the setup. 0: no DRA."""
    shared_base: bool = False
    """The nodes and running pods are made once for every run of the shape, in a
    namespace of their own (:mod:`bench.real_base`), kubelet-like; each run makes only its
    measured pods, which select the base's nodes."""
    volumes: str = ""
    """A volume shape of :mod:`bench.real_volumes` (``bound-pvs``, ``local-pvs``): every
    measured pod then has a PersistentVolumeClaim, made in the setup with its PVs."""
    placement: str = ""
    """The measured pods' placement rules: a key of :data:`PLACEMENT` (scheduler_perf's
    pod template of that shape); "" for none."""
    running_placement: str = ""
    """The running pods' (scheduler_perf's init pods'), likewise."""
    zones: tuple[str, ...] = ()
    """``topology.kubernetes.io/zone`` values given to the nodes round-robin (scheduler_perf's
    labelNodePrepareStrategy); none: no zone label."""


ZONE: Final = "topology.kubernetes.io/zone"
MOONS: Final = ("moon-1", "moon-2", "moon-3")


def _term(color: str, run: str) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": {"color": color}},
        "topologyKey": "kubernetes.io/hostname",
        "namespaces": [run],
    }


def _spread(when: str) -> dict[str, Any]:
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": 5,
                "topologyKey": ZONE,
                "whenUnsatisfiable": when,
                "labelSelector": {"matchLabels": {"color": "blue"}},
            }
        ]
    }


PLACEMENT: Final[dict[str, Callable[[str], tuple[dict[str, str], dict[str, Any]]]]] = {
    "spread": lambda run: ({"color": "blue"}, _spread("DoNotSchedule")),
    "preferred-spread": lambda run: ({"color": "blue"}, _spread("ScheduleAnyway")),
    "anti-affinity": lambda run: (
        {"color": "green"},
        {"affinity": {"podAntiAffinity": {REQUIRED: [_term("green", run)]}}},
    ),
    "preferred-affinity": lambda run: (
        {"color": "red"},
        {
            "affinity": {
                "podAffinity": {PREFERRED: [{"weight": 1, "podAffinityTerm": _term("red", run)}]}
            }
        },
    ),
    "preferred-anti-affinity": lambda run: (
        {"color": "yellow"},
        {
            "affinity": {
                "podAntiAffinity": {
                    PREFERRED: [{"weight": 1, "podAffinityTerm": _term("yellow", run)}]
                }
            }
        },
    ),
}
"""scheduler_perf's pod templates of the placement shapes (pod-with-topology-spreading,
pod-with-preferred-topology-spreading, pod-with-pod-anti-affinity,
pod-with-preferred-pod-affinity, pod-with-preferred-pod-anti-affinity): their labels and
spec fields, for a run's namespace (the templates name scheduler_perf's two namespaces;
a run has one)."""


SHAPES: Final[dict[str, Shape]] = {
    s.name: s
    for s in (
        Shape(
            "scheduling-basic",
            nodes=5000,
            running=1000,
            pods=10000,
            description="5,000 nodes, 1,000 running pods, 10,000 pending pods of 100m / 500Mi",
        ),
        Shape(
            "scheduling-15k",
            nodes=15000,
            running=30000,
            pods=10000,
            description=(
                "15,000 nodes (scheduler_perf's largest shape), 30,000 running pods, "
                "10,000 pending pods of 100m / 500Mi"
            ),
        ),
        Shape(
            "restart",
            nodes=5000,
            running=130000,
            pods=10000,
            shared_base=True,
            description=(
                "a restart at the scale of volcano#5819: 5,000 nodes and 130,000 running pods "
                "(kubelet-like, made once for every run), 10,000 pending pods of 100m / 500Mi; "
                "each scheduler started cold"
            ),
        ),
        Shape(
            "preemption-basic",
            nodes=1000,
            running=4000,
            pods=1000,
            running_cpu="900m",
            pod_cpu="3",
            high_priority=True,
            description=(
                "1,000 nodes, 4,000 running pods of 900m (priority 0), 1,000 pods of "
                "priority 10 asking 3 CPU: each must preempt three"
            ),
        ),
        Shape(
            "gang",
            nodes=1000,
            running=0,
            pods=8000,
            gang_size=16,
            description=(
                "1,000 nodes, 500 PodGroups of 16 pods of 100m / 500Mi (minMember 16; "
                "kube-scheduler, which has no PodGroup, places the same pods one by one)"
            ),
        ),
        Shape(
            "topology-spreading",
            nodes=5000,
            running=5000,
            pods=2000,
            placement="spread",
            zones=MOONS,
            description=(
                "scheduler_perf's TopologySpreading/5000Nodes: 5,000 nodes in 3 zones, 5,000 "
                "running pods, 2,000 pods spread over zones (maxSkew 5, DoNotSchedule)"
            ),
        ),
        Shape(
            "preferred-topology-spreading",
            nodes=5000,
            running=5000,
            pods=2000,
            placement="preferred-spread",
            zones=MOONS,
            description=(
                "scheduler_perf's PreferredTopologySpreading/5000Nodes: as topology-spreading, "
                "ScheduleAnyway"
            ),
        ),
        Shape(
            "pod-anti-affinity",
            nodes=5000,
            running=1000,
            pods=2000,
            placement="anti-affinity",
            running_placement="anti-affinity",
            description=(
                "scheduler_perf's SchedulingPodAntiAffinity/5000Nodes_2000Pods: 1,000 running "
                "and 2,000 pending pods, each with required anti-affinity to the others per node"
            ),
        ),
        Shape(
            "preferred-pod-affinity",
            nodes=5000,
            running=5000,
            pods=1000,
            placement="preferred-affinity",
            running_placement="preferred-affinity",
            description=(
                "scheduler_perf's SchedulingPreferredPodAffinity/5000Nodes: 5,000 running and "
                "1,000 pending pods preferring (weight 1) a node with one of them"
            ),
        ),
        Shape(
            "preferred-pod-anti-affinity",
            nodes=5000,
            running=5000,
            pods=1000,
            placement="preferred-anti-affinity",
            running_placement="preferred-anti-affinity",
            description=(
                "scheduler_perf's SchedulingPreferredPodAntiAffinity/5000Nodes: as "
                "preferred-pod-affinity, preferring a node without one of them"
            ),
        ),
        Shape(
            "dra",
            nodes=1000,
            running=0,
            pods=4000,
            devices=8,
            description=(
                "1,000 nodes with 8 DRA devices each (a ResourceSlice per node), 4,000 pods "
                "of 100m / 500Mi each with a ResourceClaim of 1 or 2 devices (scheduler_perf's "
                "SchedulingWithResourceClaimTemplate, the claims made in the setup)"
            ),
        ),
        Shape(
            BOUND_PVS,
            nodes=1000,
            running=0,
            pods=4000,
            volumes=BOUND_PVS,
            description=(
                "1,000 nodes with a CSINode attach limit of 39, 4,000 pods of 100m / 500Mi "
                "each with a claim bound to a CSI PV of its own (scheduler_perf's "
                "SchedulingCSIPVs)"
            ),
        ),
        Shape(
            LOCAL_PVS,
            nodes=1000,
            running=0,
            pods=4000,
            volumes=LOCAL_PVS,
            description=(
                "1,000 nodes with 4 local PVs each (WaitForFirstConsumer), 4,000 pods of "
                "100m / 500Mi each with an unbound claim: the scheduler picks the PV, the "
                "PV controller of the controller manager binds the claim, then the pod"
            ),
        ),
    )
}

DRA_DRIVER: Final = "gpu.bench.sluice.dev"
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"


def dra_class_name(run: str) -> str:
    return f"{run}-gpu"


def dra_objects(shape: Shape, run: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, object) of the DeviceClass, the ResourceSlices (one per node) and the
    ResourceClaims (one per measured pod, named like it) of a DRA run."""
    base = "/apis/resource.k8s.io/v1"
    out: list[tuple[str, dict[str, Any]]] = [
        (
            f"{base}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": dra_class_name(run), "labels": {RUN_LABEL: run}},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.driver == "{DRA_DRIVER}" && '
                                f'device.attributes["{DRA_DRIVER}"].run == "{run}"'
                            }
                        }
                    ]
                },
            },
        )
    ]
    for i in range(shape.nodes):
        node = f"{run}-node-{i}"
        devices = [
            {"name": f"gpu-{d}", "attributes": {"run": {"string": run}, "index": {"int": d}}}
            for d in range(shape.devices)
        ]
        out.append(
            (
                f"{base}/resourceslices",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-gpus", "labels": {RUN_LABEL: run}},
                    "spec": {
                        "driver": DRA_DRIVER,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": devices,
                    },
                },
            )
        )
    for i in range(shape.pods):
        request = {"deviceClassName": dra_class_name(run), "count": 1 + i % 2}
        out.append(
            (
                f"{base}/namespaces/{run}/resourceclaims",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"pod-{i}", "namespace": run},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
                },
            )
        )
    return out


async def dra_devices_used_twice(api: KubeClient, run: str) -> tuple[int, int]:
    """(devices allocated, devices allocated to more than one claim) in ``run``'s claims."""
    items, _ = await list_all(api, f"/apis/resource.k8s.io/v1/namespaces/{run}/resourceclaims")
    seen: dict[str, int] = {}
    for claim in items:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or ():
            key = f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
            seen[key] = seen.get(key, 0) + 1
    return sum(seen.values()), sum(1 for n in seen.values() if n > 1)


# --------------------------------------------------------------------------- objects


def node_object(run: str, i: int, zones: tuple[str, ...] = ()) -> dict[str, Any]:
    name = f"{run}-node-{i}"
    labels = {"kubernetes.io/hostname": name, RUN_LABEL: run}
    if zones:
        labels[ZONE] = zones[i % len(zones)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
    }


def node_status() -> dict[str, Any]:
    return {
        "status": {
            "allocatable": dict(NODE_ALLOCATABLE),
            "capacity": dict(NODE_ALLOCATABLE),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "bench node",
                }
            ],
        }
    }


def pod_object(
    run: str,
    name: str,
    *,
    scheduler_name: str,
    cpu: str,
    node_name: str = "",
    high_priority: bool = False,
    group: str = "",
    nodes_of: str = "",
    placement: str = "",
) -> dict[str, Any]:
    """A pod of ``run`` that selects the nodes labelled with ``nodes_of`` (default: the
    run's own)."""
    requests = {**POD_REQUESTS, "cpu": cpu}
    labels = {RUN_LABEL: run}
    extra: dict[str, Any] = {}
    if placement:
        more, extra = PLACEMENT[placement](run)
        labels.update(more)
    if group:
        labels[L.POD_GROUP_LABEL] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "nodeSelector": {RUN_LABEL: nodes_of or run},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
    }
    spec.update(extra)
    if node_name:
        spec["nodeName"] = node_name
    if high_priority:
        spec["priorityClassName"] = HIGH_PRIORITY_CLASS
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": run, "labels": labels},
        "spec": spec,
    }


def running_status() -> dict[str, Any]:
    return {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }


def pod_group_object(run: str, name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": run},
        "spec": {"minMember": min_member, "queue": L.DEFAULT_QUEUE},
    }


def measured_pods(
    shape: Shape, run: str, scheduler_name: str, *, nodes_of: str = ""
) -> list[dict[str, Any]]:
    """The measured pods of a run, selecting the nodes of ``nodes_of`` (a shared base's
    namespace; default: the run's own)."""
    out: list[dict[str, Any]] = []
    for i in range(shape.pods):
        group = f"gang-{i // shape.gang_size}" if shape.gang_size else ""
        name = f"{group}-{i % shape.gang_size}" if group else f"pod-{i}"
        pod = pod_object(
            run,
            name,
            scheduler_name=scheduler_name,
            cpu=shape.pod_cpu,
            high_priority=shape.high_priority,
            group=group,
            nodes_of=nodes_of,
            placement=shape.placement,
        )
        if shape.devices:
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
        if shape.volumes:
            pod["spec"]["volumes"] = pod_volumes(name)
        out.append(pod)
    return out


# --------------------------------------------------------------------------- processes


@dataclass(slots=True)
class ProcessMeter:
    """CPU seconds and peak RSS of one process, from /proc."""

    pid: int | None
    cpu_start: float | None = None

    def start(self, *, reset_peak: bool = False) -> None:
        if self.pid is None:
            return
        if reset_peak:  # "5" resets VmHWM (proc(5), clear_refs); best effort
            with contextlib.suppress(OSError):
                Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.cpu_start = _cpu_seconds(self.pid)

    def cpu(self) -> float | None:
        if self.pid is None or self.cpu_start is None:
            return None
        now = _cpu_seconds(self.pid)
        return None if now is None else round(now - self.cpu_start, 2)

    def peak_rss_mb(self) -> float | None:
        if self.pid is None:
            return None
        kib = _vm_hwm_kib(self.pid)
        return round(kib / 1024, 1) if kib else None


def pid_file(state: Path | None, name: str) -> int | None:
    if state is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        pid = int((state / "run" / f"{name}.pid").read_text().strip())
        if Path(f"/proc/{pid}").exists():
            return pid
    return None


@dataclass
class ControlPlane:
    """The API server used: the kubeconfig, and the state dir of ``up`` when known."""

    kubeconfig: Path
    state: Path | None
    started: bool
    """This command ran ``up`` (and runs ``down`` at the end)."""
    external_kube_scheduler: int | None = None
    """The pid of a kube-scheduler this command did not start (``up --kube-scheduler``,
    ``--kube-scheduler-pid``): its runs are live (see the module's docstring)."""

    @property
    def apiserver_pid(self) -> int | None:
        return pid_file(self.state, "kube-apiserver")

    @property
    def etcd_pid(self) -> int | None:
        return pid_file(self.state, "etcd")


def cmdline(pid: int | None) -> list[str]:
    """The arguments of ``pid`` (its QPS shows there), or none."""
    if pid is None:
        return []
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[1:-1]
    return []


def _kube_bin(name: str) -> Path:
    cache = os.environ.get("SLUICE_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-k8s/v1.36.2"
    )
    return Path(cache) / "bin" / name


def start_control_plane(state: Path, *, controller_manager: bool = False) -> ControlPlane:
    """``up --state STATE`` (without kube-scheduler: each kube-scheduler run starts its
    own, with the same QPS as Sluice's); ``controller_manager``: with it (the PV
    controller of the volume shapes)."""
    extra = ["--controller-manager"] if controller_manager else []
    subprocess.run(
        [str(K8S_DIR / "up"), "--state", str(state), *extra],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
    )
    return ControlPlane(state / "kubeconfig", state, started=True)


def kube_scheduler_argv(
    kubeconfig: Path, qps: float, burst: int, *, port: int | None = None
) -> list[str]:
    """The stock kube-scheduler as ``up --kube-scheduler`` starts it, but at Sluice's QPS
    (``up`` leaves it at its default 50, which would cap it at 50 binds a second);
    ``port``: its secure port (/readyz), a free one by default."""
    return [
        str(_kube_bin("kube-scheduler")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port or _free_port()}",
        "--leader-elect=false",
        f"--kube-api-qps={qps:g}",
        f"--kube-api-burst={burst}",
        "--v=1",
    ]


def stop_control_plane(plane: ControlPlane) -> None:
    if plane.started and plane.state is not None:
        subprocess.run(
            [str(K8S_DIR / "down"), str(plane.state)],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=sys.stderr,
        )


# --------------------------------------------------------------------------- API helpers


async def bounded(limit: int, jobs: Iterable[Callable[[], Awaitable[None]]]) -> None:
    """Run ``jobs`` with at most ``limit`` at once; the first failure ends them all."""
    it = iter(jobs)

    async def worker() -> None:
        for job in it:
            await job()

    async with anyio.create_task_group() as tg:
        for _ in range(limit):
            tg.start_soon(worker)


async def create(api: KubeClient, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Create ``obj`` (retried on 5xx/429 a few times: setup must not fail for a blip)."""
    for attempt in range(5):
        try:
            return await api.request("POST", path, body=obj, kind=obj["kind"], timeout=60)
        except AlreadyExistsError:
            raise
        except ApiError:
            if attempt == 4:
                raise
            await anyio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


async def _patch_status(api: KubeClient, path: str, patch: dict[str, Any]) -> None:
    await api.request("PATCH", path, body=patch, content_type=MERGE_PATCH, timeout=60)


async def ensure_cluster_objects(api: KubeClient) -> None:
    """The CRDs of ``crds/`` (served), the Queue ``default`` and the PriorityClass
    ``bench-high``, each created when missing."""
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd_file in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(crd_file.read_text()):
            if isinstance(doc, dict):
                with contextlib.suppress(AlreadyExistsError):
                    await api.request("POST", crd_path, body=doc, kind="CustomResourceDefinition")
    deadline = time.monotonic() + 60
    while True:
        try:
            await api.request("GET", QUEUES.path())
            await api.request("GET", POD_GROUPS.path("default"))
            break
        except (NotFoundError, TooManyRequestsError):  # 429: "storage is (re)initializing"
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.5)
    queue = {
        "apiVersion": L.API_VERSION,
        "kind": "Queue",
        "metadata": {"name": L.DEFAULT_QUEUE},
        "spec": {"weight": 1},
    }
    with contextlib.suppress(AlreadyExistsError):
        await api.request("POST", QUEUES.path(), body=queue, kind="Queue")
    priority_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": HIGH_PRIORITY_CLASS},
        "value": HIGH_PRIORITY,
        "description": "the preemptors of python -m bench real",
    }
    with contextlib.suppress(AlreadyExistsError):
        await api.request(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            body=priority_class,
            kind="PriorityClass",
        )


PORT_READER: Final = "sluice-bench-port-reader"
"""The bench's reader of ``sluice run``'s guarded port: a ServiceAccount of ``default``
bound to ``manifests/clusterrole-port.yaml``'s ``sluice-metrics-reader``."""


async def port_reader_token(api: KubeClient) -> str:
    """The ClusterRole ``sluice-metrics-reader`` of ``manifests/``, :data:`PORT_READER`
    bound to it, and a token of it (TokenRequest, 24 h), once a SubjectAccessReview shows
    the binding in force."""
    role = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests" / "clusterrole-port.yaml").read_text())
        if isinstance(d, dict) and d["metadata"]["name"] == "sluice-metrics-reader"
    )
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": PORT_READER, "namespace": "default"},
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PORT_READER},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "sluice-metrics-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": PORT_READER, "namespace": "default"}],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path, obj in (
        (f"{rbac}/clusterroles", role),
        ("/api/v1/namespaces/default/serviceaccounts", account),
        (f"{rbac}/clusterrolebindings", binding),
    ):
        with contextlib.suppress(AlreadyExistsError):
            await api.request("POST", path, body=obj, kind=obj["kind"])
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:default:{PORT_READER}",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    deadline = time.monotonic() + 30
    while True:
        reply = await api.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
        )
        if (reply.get("status") or {}).get("allowed"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{PORT_READER}: its binding not in force after 30 s")
        await anyio.sleep(0.2)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 86400},
    }
    reply = await api.request(
        "POST",
        f"/api/v1/namespaces/default/serviceaccounts/{PORT_READER}/token",
        body=request,
        kind="TokenRequest",
    )
    return str(reply["status"]["token"])


async def list_all(api: KubeClient, path: str, query: Sequence[tuple[str, str]] = ()) -> Any:
    """Every item of a (paged) list, and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token = ""
    version = ""
    while True:
        q = [*query, ("limit", "1000")] + ([("continue", token)] if token else [])
        doc = await api.request("GET", path, query=q, timeout=120)
        items.extend(doc.get("items") or ())
        meta = doc.get("metadata") or {}
        version = version or str(meta.get("resourceVersion") or "")
        token = str(meta.get("continue") or "")
        if not token:
            return items, version


async def setup_run(
    api: KubeClient,
    shape: Shape,
    run: str,
    *,
    scheduler_name: str,
    pod_groups: bool,
    concurrency: int,
) -> None:
    """The namespace, nodes (with status), running pods (bound, Running) and PodGroups;
    for a shape with a shared base (made by :mod:`bench.real_base`), the namespace only."""
    await create(
        api,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}},
    )
    if shape.shared_base:
        return

    def node_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            obj = node_object(run, i, shape.zones)
            await create(api, NODES.path(), obj)
            name = obj["metadata"]["name"]
            await _patch_status(api, NODES.path(None, name, "status"), node_status())

        return job

    await bounded(concurrency, (node_job(i) for i in range(shape.nodes)))

    def running_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            name = f"running-{i}"
            obj = pod_object(
                run,
                name,
                scheduler_name=scheduler_name,
                cpu=shape.running_cpu,
                node_name=f"{run}-node-{i % shape.nodes}",
                placement=shape.running_placement,
            )
            await create(api, PODS.path(run), obj)
            await _patch_status(api, PODS.path(run, name, "status"), running_status())

        return job

    await bounded(concurrency, (running_job(i) for i in range(shape.running)))
    if pod_groups and shape.gang_size:
        groups = -(-shape.pods // shape.gang_size)

        def group_job(g: int) -> Callable[[], Awaitable[None]]:
            async def job() -> None:
                members = min(shape.gang_size, shape.pods - g * shape.gang_size)
                await create(api, POD_GROUPS.path(run), pod_group_object(run, f"gang-{g}", members))

            return job

        await bounded(concurrency, (group_job(g) for g in range(groups)))
    if shape.devices:

        def dra_job(path: str, obj: dict[str, Any]) -> Callable[[], Awaitable[None]]:
            async def job() -> None:
                await create(api, path, obj)

            return job

        objects = dra_objects(shape, run)
        await create(api, *objects[0])  # the class first
        await bounded(concurrency, (dra_job(path, obj) for path, obj in objects[1:]))
    if shape.volumes:
        storage = list(storage_objects(shape.volumes, run, shape.nodes, shape.pods))

        def storage_job(path: str, obj: dict[str, Any]) -> Callable[[], Awaitable[None]]:
            async def job() -> None:
                await create(api, path, obj)

            return job

        # a claim's class (and the local PVs it may take) before the claim
        for kinds in (
            ("StorageClass", "CSINode"),
            ("PersistentVolume",),
            ("PersistentVolumeClaim",),
        ):
            step = [o for o in storage if o[1]["kind"] in kinds]
            await bounded(concurrency, (storage_job(*o) for o in step))
        if shape.volumes == BOUND_PVS:
            await bind_claims(api, shape, run, concurrency)


async def bind_claims(api: KubeClient, shape: Shape, run: str, concurrency: int) -> None:
    """The bound shape's claims bound as the PV controller leaves them: a PV pre-bound to
    each (its ``claimRef`` naming the claim's uid: a claimRef without it, or a claim naming
    a PV not there yet, is Lost for good to the PV controller), then the claim's
    ``volumeName`` and annotations, then both Bound."""
    claims = f"/api/v1/namespaces/{run}/persistentvolumeclaims"

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            made = await api.request("GET", f"{claims}/pod-{i}", timeout=60)
            obj = bound_volume(run, i, made["metadata"]["uid"])
            pv = await create(api, "/api/v1/persistentvolumes", obj)
            name = pv["metadata"]["name"]
            bound = {"status": {"phase": "Bound"}}
            await _patch_status(api, f"/api/v1/persistentvolumes/{name}/status", bound)
            await api.request(
                "PATCH",
                f"{claims}/pod-{i}",
                body=bind_claim(run, i),
                content_type=MERGE_PATCH,
                timeout=60,
            )
            await _patch_status(api, f"{claims}/pod-{i}/status", bound)

        return go

    await bounded(concurrency, (job(i) for i in range(shape.pods)))


CLEANUP_SECONDS: Final = 900.0
"""How long the deletion of a run's objects may be tried again (a collection delete of
10,000 pods can outlast the API server's own 60 s request timeout on a loaded machine,
which answers 504 and goes on deleting)."""


CLEANUP_ATTEMPTS: Final = 5
"""Tries of each collection's deletion: a server busy with thousands of deletions answers
504 (its own timeout) while it goes on deleting, and pods left behind would weigh on
every later run (both schedulers list and watch every pod)."""


async def cleanup_run(api: KubeClient, run: str) -> None:
    """Delete the run's pods (grace period 0: no kubelet finishes them), nodes, PodGroups
    and events. The namespace stays (no namespace controller would finish deleting it).
    Its pods are deleted again, while the server times out, until none is left (up to
    :data:`CLEANUP_SECONDS`): the next run must not find them (a shared base's nodes would
    hold them). Each other collection is deleted again after a server error (up to
    :data:`CLEANUP_ATTEMPTS` times); the last error is raised after the rest was tried."""
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    failed: ApiError | None = None
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        try:
            with contextlib.suppress(NotFoundError):
                await api.request("DELETE", PODS.path(run), body=now, timeout=600)
            left = await api.request("GET", PODS.path(run), query=[("limit", "1")])
            if not left.get("items"):
                break
            problem: ApiError = ServerError(f"the pods of {run} still there after their deletion")
        except ServerError as exc:
            problem = exc
        if time.monotonic() > deadline:
            failed = problem  # raised once the rest is deleted
            break
        await anyio.sleep(2)
    selector = [("labelSelector", f"{RUN_LABEL}={run}")]
    with contextlib.suppress(NotFoundError):
        await cleanup_volumes(api, run)
    for path, query in (
        ("/apis/resource.k8s.io/v1/namespaces/" + run + "/resourceclaims", ()),
        ("/apis/resource.k8s.io/v1/resourceslices", selector),
        ("/apis/resource.k8s.io/v1/deviceclasses", selector),
        (NODES.path(), selector),
        (POD_GROUPS.path(run), ()),
        (EVENTS.path(run), ()),
        ("/api/v1/namespaces/" + run + "/events", ()),
    ):
        for attempt in range(CLEANUP_ATTEMPTS):
            try:
                with contextlib.suppress(NotFoundError):
                    await api.request("DELETE", path, query=query, body=now, timeout=600)
                break
            except ApiError as exc:
                if attempt == CLEANUP_ATTEMPTS - 1:
                    failed = exc
                else:
                    await anyio.sleep(2.0 * (attempt + 1))
    if failed is not None:
        raise failed


# --------------------------------------------------------------------------- measuring


class FirstSeen:
    """Lists then watches ``path`` (with ``query``) and notes when each key is first seen
    (``time.monotonic``): ``key_of(obj)`` is the key of an object, or None to ignore it.
    ``done`` is set, and ``on_done`` called, once every key of ``expected`` was seen."""

    def __init__(
        self,
        api: KubeClient,
        path: str,
        query: Sequence[tuple[str, str]],
        key_of: Callable[[dict[str, Any]], str | None],
        expected: set[str],
    ) -> None:
        self.api = api
        self.path = path
        self.query = list(query)
        self.key_of = key_of
        self.expected = expected
        self.seen: dict[str, float] = {}
        self.done = anyio.Event()
        self.on_done: Callable[[], None] | None = None
        self.restarts = 0

    def _see(self, obj: dict[str, Any]) -> None:
        key = self.key_of(obj)
        if key is not None and key in self.expected and key not in self.seen:
            self.seen[key] = time.monotonic()
            if len(self.seen) == len(self.expected) and not self.done.is_set():
                if self.on_done is not None:
                    self.on_done()
                self.done.set()

    async def _list(self) -> str:
        items, version = await list_all(self.api, self.path, self.query)
        for item in items:
            self._see(item)
        return str(version)

    async def run_watch(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        version = await self._list()
        task_status.started()
        while not self.done.is_set():
            try:
                async with self.api.stream(
                    self.path,
                    query=[
                        *self.query,
                        ("watch", "true"),
                        ("allowWatchBookmarks", "true"),
                        ("resourceVersion", version),
                        ("timeoutSeconds", "600"),
                    ],
                    timeout=aiohttp.ClientTimeout(total=700, sock_connect=10),
                ) as reader:
                    while (line := await reader.read()) is not None:
                        obj = line.get("object") or {}
                        kind = line.get("type")
                        if kind == "ERROR":
                            raise GoneError(str(obj.get("message")))
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if kind in ("ADDED", "MODIFIED"):
                            self._see(obj)
            except GoneError:
                self.restarts += 1
                version = await self._list()
            except ApiError:
                self.restarts += 1
                await anyio.sleep(0.2)


def bound_pod(obj: dict[str, Any]) -> str | None:
    """The name of a pod that has a node, else None."""
    if (obj.get("spec") or {}).get("nodeName"):
        return str((obj.get("metadata") or {}).get("name"))
    return None


def scheduled_event(obj: dict[str, Any]) -> str | None:
    """The name of the pod a ``Scheduled`` Event (events.k8s.io/v1) is about, else None."""
    if obj.get("reason") == "Scheduled":
        return str((obj.get("regarding") or {}).get("name"))
    return None


def bind_watch(api: KubeClient, run: str, names: set[str]) -> FirstSeen:
    """When each measured pod is first seen bound (only bound pods are sent)."""
    return FirstSeen(api, PODS.path(run), [("fieldSelector", "spec.nodeName!=")], bound_pod, names)


def event_watch(api: KubeClient, run: str, names: set[str]) -> FirstSeen:
    """When the Scheduled event of each measured pod is first seen."""
    return FirstSeen(api, EVENTS.path(run), [], scheduled_event, names)


def throughput(times: Sequence[float], total: int) -> dict[str, float | None]:
    """Binds a second from the first bind to the last, and between 10 % and 90 %."""
    ts = sorted(times)
    out: dict[str, float | None] = {"binds_per_second": None, "binds_per_second_10_90": None}
    if len(ts) >= 2 and ts[-1] > ts[0]:
        out["binds_per_second"] = round((len(ts) - 1) / (ts[-1] - ts[0]), 1)
    if total >= 10 and len(ts) >= total:
        lo, hi = ts[int(total * 0.1)], ts[int(total * 0.9) - 1]
        if hi > lo:
            out["binds_per_second_10_90"] = round(
                (int(total * 0.9) - 1 - int(total * 0.1)) / (hi - lo), 1
            )
    return out


async def count_scheduled_events(api: KubeClient, run: str) -> int:
    items, _ = await list_all(api, EVENTS.path(run))
    return sum(1 for e in items if e.get("reason") == "Scheduled")


def binding(run: str, name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": run, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


async def create_pods(
    api: KubeClient,
    run: str,
    pods: list[dict[str, Any]],
    limit: int,
    *,
    nodes: int = 0,
    nodes_of: str = "",
) -> dict[str, str]:
    """Create ``pods``, ``limit`` at once; with ``nodes``, bind each at once after its
    create, round-robin over the nodes of ``nodes_of`` (default: the run's; the live raw
    run). Returns name -> uid."""
    uids: dict[str, str] = {}

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            name = pods[i]["metadata"]["name"]
            created = await create(api, PODS.path(run), pods[i])
            uids[name] = created["metadata"]["uid"]
            if nodes:
                body = binding(run, name, uids[name], f"{nodes_of or run}-node-{i % nodes}")
                await api.request("POST", PODS.path(run, name, "binding"), body=body, kind="Pod")

        return go

    await bounded(limit, (job(i) for i in range(len(pods))))
    return uids


async def bind_all(
    api: KubeClient, run: str, uids: dict[str, str], *, nodes: int, limit: int, nodes_of: str = ""
) -> None:
    """The raw run: bind every pod of ``uids`` (name -> uid, in creation order),
    round-robin over the nodes of ``nodes_of`` (default: the run's), ``limit`` at once."""
    names = list(uids)
    prefix = nodes_of or run

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            body = binding(run, names[i], uids[names[i]], f"{prefix}-node-{i % nodes}")
            await api.request("POST", PODS.path(run, names[i], "binding"), body=body, kind="Pod")

        return go

    await bounded(limit, (job(i) for i in range(len(names))))
