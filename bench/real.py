"""``python -m bench real``: Sluice and kube-scheduler side by side through a real API
server, and the server's raw bind limit (bench/README.md describes options and figures).

Job: for each runner and each shape (SchedulingBasic, PreemptionBasic, a gang shape),
one **run** on one real API server (``../shared/k8s``, v1.36), in a namespace of its own:

* ``kube-scheduler``: the stock scheduler (``schedulerName: default-scheduler``), a
  process started for the run at Sluice's QPS and stopped after it;
* ``sluice``: ``sluice run`` as a subprocess (``schedulerName: sluice``), the same way;
  ``sluice-event-qps``: with ``--event-qps`` limiting its Scheduled events;
* ``raw``: no scheduler: the bench binds every measured pod round-robin over the nodes,
  with no decision and no event: the server's bind limit.

Every run's nodes carry the label ``bench.sluice.dev/run=<run>`` and its pods a
``nodeSelector`` on it, so a scheduler only places pods on its own run's nodes; after
the run its pods (grace period 0), nodes, PodGroups and events are deleted, so the next
run starts on an empty server.

Setup (not measured): the namespace, the nodes (created, then their status patched),
the running pods (created bound, then marked Running), the PodGroups (Sluice's gang
runs), then every measured pod (**a backlog**: created while no scheduler runs, since
on 2 cores the server creates pods about as fast as a scheduler binds them). Measured:
the bench watches the namespace's bound pods and Scheduled events, starts the scheduler
process (time 0) and notes when each pod is first seen bound and when its event is first
seen. After the last bind it waits (up to ``events_wait``) for every pod's event, so
both schedulers are stopped only once they did the same work (not with
``--event-qps``). With a kube-scheduler the bench did not start, its runs are **live**:
the pods are created while it runs, and time 0 is the first create.

Contracts: one JSON line per run, then one per shape comparing the runners; CPU and peak
RSS from ``/proc/<pid>`` (a new process per run: its whole CPU counts); the control plane
this command started is stopped (``down``) however it ends, SIGTERM included."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import yaml

from bench.http_workload import _cpu_seconds, _free_port, _get, _vm_hwm_kib, sluice_command
from bench.workloads import NODE_ALLOCATABLE, POD_REQUESTS, source_revision
from scheduler.api import labels as L
from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    GoneError,
    NotFoundError,
    TooManyRequestsError,
)
from scheduler.kube import KubeClient
from scheduler.kube.resources import EVENTS, MERGE_PATCH, NODES, POD_GROUPS, PODS, QUEUES

K8S_DIR: Final = Path(os.environ.get("SLUICE_K8S_DIR", "/work/shared/k8s"))
"""Where ``up`` and ``down`` are (``../shared/k8s``)."""
ROOT: Final = Path(__file__).resolve().parent.parent
RUN_LABEL: Final = "bench.sluice.dev/run"
KUBE_SCHEDULER: Final = "default-scheduler"
RAW_SCHEDULER: Final = "bench-nobody"
"""The schedulerName of the raw runs' pods: no scheduler takes them."""
HIGH_PRIORITY_CLASS: Final = "bench-high"
HIGH_PRIORITY: Final = 10
SETTLE_SECONDS: Final = 1.0
RUNNERS: Final = ("kube-scheduler", "raw", "sluice", "sluice-event-qps")


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
    )
}


@dataclass(slots=True)
class Options:
    kube_api_qps: float = 5000.0
    kube_api_burst: int = 5000
    event_qps: float = 50.0
    """``--event-qps`` of the ``sluice-event-qps`` runs (kube-scheduler's default QPS)."""
    event_burst: int = 100
    creators: int = 32
    """Measured pods created at once."""
    raw_binds: int = 64
    """Binds at once in a raw run (Sluice's bind pool: ``bindConcurrency`` 64)."""
    setup_concurrency: int = 32
    timeout: float = 900.0
    """How long the measured pods of one run may take to be bound."""
    events_wait: float = 120.0
    """After the last bind, how long the bench waits for the Scheduled events of every
    measured pod before it stops the scheduler (not in ``sluice-event-qps`` runs)."""
    profile: bool = False
    """Run ``sluice run`` under cProfile (its figures are then inflated)."""


# --------------------------------------------------------------------------- objects


def node_object(run: str, i: int) -> dict[str, Any]:
    name = f"{run}-node-{i}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RUN_LABEL: run}},
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
) -> dict[str, Any]:
    requests = {**POD_REQUESTS, "cpu": cpu}
    labels = {RUN_LABEL: run}
    if group:
        labels[L.POD_GROUP_LABEL] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "nodeSelector": {RUN_LABEL: run},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
    }
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


def measured_pods(shape: Shape, run: str, scheduler_name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(shape.pods):
        group = f"gang-{i // shape.gang_size}" if shape.gang_size else ""
        name = f"{group}-{i % shape.gang_size}" if group else f"pod-{i}"
        out.append(
            pod_object(
                run,
                name,
                scheduler_name=scheduler_name,
                cpu=shape.pod_cpu,
                high_priority=shape.high_priority,
                group=group,
            )
        )
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


def _pid_file(state: Path | None, name: str) -> int | None:
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
        return _pid_file(self.state, "kube-apiserver")

    @property
    def etcd_pid(self) -> int | None:
        return _pid_file(self.state, "etcd")


def _cmdline(pid: int | None) -> list[str]:
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


def start_control_plane(state: Path) -> ControlPlane:
    """``up --state STATE`` (without kube-scheduler: each kube-scheduler run starts its
    own, with the same QPS as Sluice's)."""
    subprocess.run(
        [str(K8S_DIR / "up"), "--state", str(state)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
    )
    return ControlPlane(state / "kubeconfig", state, started=True)


def kube_scheduler_argv(kubeconfig: Path, opts: Options) -> list[str]:
    """The stock kube-scheduler as ``up --kube-scheduler`` starts it, but at Sluice's QPS
    (``up`` leaves it at its default 50, which would cap it at 50 binds a second)."""
    return [
        str(_kube_bin("kube-scheduler")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={_free_port()}",
        "--leader-elect=false",
        f"--kube-api-qps={opts.kube_api_qps:g}",
        f"--kube-api-burst={opts.kube_api_burst}",
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


async def _bounded(limit: int, jobs: Iterable[Callable[[], Awaitable[None]]]) -> None:
    """Run ``jobs`` with at most ``limit`` at once; the first failure ends them all."""
    it = iter(jobs)

    async def worker() -> None:
        for job in it:
            await job()

    async with anyio.create_task_group() as tg:
        for _ in range(limit):
            tg.start_soon(worker)


async def _create(api: KubeClient, path: str, obj: dict[str, Any]) -> dict[str, Any]:
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


async def _list_all(api: KubeClient, path: str, query: Sequence[tuple[str, str]] = ()) -> Any:
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
    api: KubeClient, shape: Shape, run: str, *, scheduler_name: str, pod_groups: bool, opts: Options
) -> None:
    """The namespace, nodes (with status), running pods (bound, Running) and PodGroups."""
    await _create(
        api,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}},
    )

    def node_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            obj = node_object(run, i)
            await _create(api, NODES.path(), obj)
            name = obj["metadata"]["name"]
            await _patch_status(api, NODES.path(None, name, "status"), node_status())

        return job

    await _bounded(opts.setup_concurrency, (node_job(i) for i in range(shape.nodes)))

    def running_job(i: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            name = f"running-{i}"
            obj = pod_object(
                run,
                name,
                scheduler_name=scheduler_name,
                cpu=shape.running_cpu,
                node_name=f"{run}-node-{i % shape.nodes}",
            )
            await _create(api, PODS.path(run), obj)
            await _patch_status(api, PODS.path(run, name, "status"), running_status())

        return job

    await _bounded(opts.setup_concurrency, (running_job(i) for i in range(shape.running)))
    if pod_groups and shape.gang_size:
        groups = -(-shape.pods // shape.gang_size)

        def group_job(g: int) -> Callable[[], Awaitable[None]]:
            async def job() -> None:
                members = min(shape.gang_size, shape.pods - g * shape.gang_size)
                await _create(
                    api, POD_GROUPS.path(run), pod_group_object(run, f"gang-{g}", members)
                )

            return job

        await _bounded(opts.setup_concurrency, (group_job(g) for g in range(groups)))


async def cleanup_run(api: KubeClient, run: str) -> None:
    """Delete the run's pods (grace period 0: no kubelet finishes them), nodes, PodGroups
    and events. The namespace stays (no namespace controller would finish deleting it)."""
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    selector = [("labelSelector", f"{RUN_LABEL}={run}")]
    for path, query in (
        (PODS.path(run), ()),
        (NODES.path(), selector),
        (POD_GROUPS.path(run), ()),
        (EVENTS.path(run), ()),
        ("/api/v1/namespaces/" + run + "/events", ()),
    ):
        with contextlib.suppress(NotFoundError):
            await api.request("DELETE", path, query=query, body=now, timeout=600)


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
        items, version = await _list_all(self.api, self.path, self.query)
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
    items, _ = await _list_all(api, EVENTS.path(run))
    return sum(1 for e in items if e.get("reason") == "Scheduled")


# --------------------------------------------------------------------------- one run


@dataclass
class RunContext:
    api: KubeClient
    plane: ControlPlane
    opts: Options
    workdir: Path


def _binding(run: str, name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": run, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


async def _create_pods(
    api: KubeClient, run: str, pods: list[dict[str, Any]], limit: int, *, nodes: int = 0
) -> dict[str, str]:
    """Create ``pods``, ``limit`` at once; with ``nodes``, bind each at once after its
    create, round-robin over the run's nodes (the live raw run). Returns name -> uid."""
    uids: dict[str, str] = {}

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            name = pods[i]["metadata"]["name"]
            created = await _create(api, PODS.path(run), pods[i])
            uids[name] = created["metadata"]["uid"]
            if nodes:
                body = _binding(run, name, uids[name], f"{run}-node-{i % nodes}")
                await api.request("POST", PODS.path(run, name, "binding"), body=body, kind="Pod")

        return go

    await _bounded(limit, (job(i) for i in range(len(pods))))
    return uids


async def _bind_all(
    api: KubeClient, run: str, uids: dict[str, str], *, nodes: int, limit: int
) -> None:
    """The raw run: bind every pod of ``uids`` (name -> uid, in creation order),
    round-robin over the run's nodes, ``limit`` at once."""
    names = list(uids)

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            body = _binding(run, names[i], uids[names[i]], f"{run}-node-{i % nodes}")
            await api.request("POST", PODS.path(run, names[i], "binding"), body=body, kind="Pod")

        return go

    await _bounded(limit, (job(i) for i in range(len(names))))


async def _start(argv: list[str], log_path: Path) -> anyio.abc.Process:
    with open(log_path, "wb") as log:
        return await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _sluice_argv(ctx: RunContext, port: int, extra: list[str]) -> list[str]:
    return [
        *sluice_command(),
        "run",
        "--kubeconfig",
        str(ctx.plane.kubeconfig),
        "--port",
        str(port),
        "--bind-address",
        "127.0.0.1",
        "--kube-api-qps",
        f"{ctx.opts.kube_api_qps:g}",
        "--kube-api-burst",
        str(ctx.opts.kube_api_burst),
        *extra,
    ]


async def _wait_ready(proc: anyio.abc.Process, port: int, log_path: Path) -> None:
    """Until ``sluice run`` answers ``/readyz`` (its informers listed everything)."""
    deadline = time.monotonic() + 120
    while True:
        if proc.returncode is not None:
            raise RuntimeError(f"sluice run exited with {proc.returncode}; see {log_path}")
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            if (await _get(port, "/readyz"))[0] == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sluice run not ready after 120 s; see {log_path}")
        await anyio.sleep(0.1)


async def _stop(proc: anyio.abc.Process) -> int | None:
    """SIGTERM (Sluice then writes the events still due), SIGKILL after 30 s."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(30):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode


async def run_one(ctx: RunContext, shape: Shape, runner: str) -> dict[str, Any]:
    """Set up, measure and clean up one run of ``shape`` by ``runner``; its figures."""
    api, opts, plane = ctx.api, ctx.opts, ctx.plane
    run = f"bench-{shape.name[:4]}-{runner[:6].rstrip('-')}-{secrets.token_hex(3)}"
    scheduler_name = {"kube-scheduler": KUBE_SCHEDULER, "raw": RAW_SCHEDULER}.get(
        runner, L.SCHEDULER_NAME
    )
    is_sluice = runner.startswith("sluice")
    live = runner == "kube-scheduler" and plane.external_kube_scheduler is not None
    t_setup = time.monotonic()
    figures: dict[str, Any] = {
        "shape": shape.name,
        "runner": runner,
        "mode": "live" if live else "backlog",
        "namespace": run,
        "nodes": shape.nodes,
        "running_pods": shape.running,
        "pods": shape.pods,
        "pod_groups": -(-shape.pods // shape.gang_size) if shape.gang_size and is_sluice else 0,
    }
    proc: anyio.abc.Process | None = None
    log_path = ctx.workdir / f"{run}.log"
    try:
        await setup_run(
            api, shape, run, scheduler_name=scheduler_name, pod_groups=is_sluice, opts=opts
        )
        pods = measured_pods(shape, run, scheduler_name)
        names = [p["metadata"]["name"] for p in pods]
        uids: dict[str, str] = {}
        if not live:  # the backlog: every measured pod exists before the scheduler starts
            t_create = time.monotonic()
            uids = await _create_pods(api, run, pods, opts.creators)
            figures["create_seconds"] = round(time.monotonic() - t_create, 2)
        figures["setup_seconds"] = round(time.monotonic() - t_setup, 1)

        watch = bind_watch(api, run, set(names))
        events = event_watch(api, run, set(names)) if runner != "raw" else None
        apiserver = ProcessMeter(plane.apiserver_pid)
        etcd = ProcessMeter(plane.etcd_pid)
        scheduler = ProcessMeter(None)
        cpu_at_last_bind: dict[str, float | None] = {}
        cpu_at_last_event: dict[str, float | None] = {}

        def on_done() -> None:
            cpu_at_last_bind.update(
                scheduler=scheduler.cpu(), apiserver=apiserver.cpu(), etcd=etcd.cpu()
            )

        def on_events_done() -> None:
            cpu_at_last_event.update(scheduler=scheduler.cpu())

        watch.on_done = on_done
        if events is not None:
            events.on_done = on_events_done
        bench_cpu0 = time.process_time()
        load0 = os.getloadavg()
        port = _free_port()
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run_watch)
            if events is not None:
                await tg.start(events.run_watch)
            apiserver.start()
            etcd.start()
            t_start = time.monotonic()
            if live:
                scheduler = ProcessMeter(plane.external_kube_scheduler)
                scheduler.start(reset_peak=True)
                await _create_pods(api, run, pods, opts.creators)
                figures["create_seconds"] = round(time.monotonic() - t_start, 2)
            elif runner == "raw":
                await _bind_all(api, run, uids, nodes=shape.nodes, limit=opts.raw_binds)
            else:
                if runner == "kube-scheduler":
                    argv = kube_scheduler_argv(plane.kubeconfig, opts)
                    figures["kube_scheduler_args"] = argv[5:]
                else:
                    extra = []
                    if runner == "sluice-event-qps":
                        extra = ["--event-qps", f"{opts.event_qps:g}"]
                        extra += ["--event-burst", str(opts.event_burst)]
                        figures.update(event_qps=opts.event_qps, event_burst=opts.event_burst)
                    argv = _sluice_argv(ctx, port, extra)
                    if opts.profile:  # cProfile of the scheduler process, kept beside its log
                        prof = log_path.with_suffix(".prof")
                        argv = [sys.executable, "-m", "cProfile", "-o", str(prof), *argv]
                        figures["scheduler_profile"] = str(prof)
                proc = await _start(argv, log_path)
                if plane.state is not None and runner == "kube-scheduler":  # `down` stops it
                    (plane.state / "run" / "kube-scheduler.pid").write_text(f"{proc.pid}\n")
                scheduler = ProcessMeter(proc.pid)
                scheduler.start()
                scheduler.cpu_start = 0.0  # a new process: all of its CPU counts
                if is_sluice:
                    await _wait_ready(proc, port, log_path)
                    figures["ready_after"] = round(time.monotonic() - t_start, 2)
            with anyio.move_on_after(opts.timeout):
                while not watch.done.is_set():
                    if proc is not None and proc.returncode is not None:
                        raise RuntimeError(
                            f"{runner} exited with {proc.returncode}; see {log_path}"
                        )
                    with anyio.move_on_after(1.0):
                        await watch.done.wait()
            events_at_last_bind = len(events.seen) if events is not None else None
            if events is not None and runner != "sluice-event-qps":
                with anyio.move_on_after(opts.events_wait):  # the same work: every event
                    await events.done.wait()
            tg.cancel_scope.cancel()
        bench_cpu = time.process_time() - bench_cpu0
        times = list(watch.seen.values())
        event_times = list(events.seen.values()) if events is not None else []
        last_event = max(event_times) if event_times else None
        all_events = events is not None and events.done.is_set()
        last = max(times) if times else None
        sched_cpu = cpu_at_last_bind.get("scheduler")
        figures.update(
            bound=len(times),
            unbound=shape.pods - len(times),
            **throughput(times, shape.pods),
            seconds_to_last_bind=round(last - t_start, 2) if last is not None else None,
            pods_per_second=round(len(times) / (last - t_start), 1) if last is not None else None,
            first_bind_after=round(min(times) - t_start, 2) if times else None,
            scheduler_cpu_seconds=sched_cpu,
            scheduler_peak_rss_mb=scheduler.peak_rss_mb(),
            cpu_ms_per_pod=round(1000 * sched_cpu / len(times), 2) if sched_cpu and times else None,
            apiserver_cpu_seconds=cpu_at_last_bind.get("apiserver"),
            etcd_cpu_seconds=cpu_at_last_bind.get("etcd"),
            bench_cpu_seconds=round(bench_cpu, 2),
            load_average=[round(load0[0], 2), round(os.getloadavg()[0], 2)],
            scheduled_events_at_last_bind=events_at_last_bind,
            seconds_to_last_event=(
                round(last_event - t_start, 2) if all_events and last_event else None
            ),
            events_per_second=throughput(event_times, len(event_times))["binds_per_second"],
            scheduler_cpu_seconds_to_last_event=cpu_at_last_event.get("scheduler"),
            watch_restarts=watch.restarts + (events.restarts if events is not None else 0),
        )
        if is_sluice and proc is not None:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                _, text = await _get(port, "/metrics")
                figures["events_dropped"] = _metric_sum(text, "scheduler_events_dropped_total")
        if proc is not None:
            figures["scheduler_exit_code"] = await _stop(proc)  # Sluice writes what is due
        if runner != "raw":
            figures["scheduled_events"] = await count_scheduled_events(api, run)
        # kube-scheduler exits with 1 on SIGTERM; Sluice with 0
        if figures["unbound"] or (is_sluice and figures.get("scheduler_exit_code") != 0):
            figures["scheduler_log"] = str(log_path)
        else:
            log_path.unlink(missing_ok=True)
    finally:
        if proc is not None:
            with anyio.CancelScope(shield=True):
                await _stop(proc)
            if plane.state is not None and runner == "kube-scheduler":
                (plane.state / "run" / "kube-scheduler.pid").unlink(missing_ok=True)
        with anyio.CancelScope(shield=True):
            t_clean = time.monotonic()
            try:
                await cleanup_run(api, run)
            except ApiError as exc:
                figures["cleanup_error"] = str(exc)
            figures["cleanup_seconds"] = round(time.monotonic() - t_clean, 1)
    return figures


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] == name:
                total += float(value)
    return total


def compare(shape: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One shape's runners side by side, and Sluice's ratios to kube-scheduler and raw:
    ``_vs_`` on the bind rate between 10 and 90 % (first to last when missing), and
    ``_vs_..._overall`` on ``pods_per_second`` (pods over the time from the start to the
    last bind: the figure for PreemptionBasic, whose binds come in a burst at the end)."""
    by = {r["runner"]: r for r in runs if r["shape"] == shape}

    def rate(runner: str) -> float | None:
        r = by.get(runner)
        return None if r is None else (r.get("binds_per_second_10_90") or r.get("binds_per_second"))

    def overall(runner: str) -> float | None:
        r = by.get(runner)
        return None if r is None else r.get("pods_per_second")

    out: dict[str, Any] = {"shape": shape, "summary": True}
    for runner in RUNNERS:
        if runner in by:
            out[runner] = {
                "binds_per_second_10_90": rate(runner),
                "pods_per_second": overall(runner),
                "seconds_to_last_bind": by[runner].get("seconds_to_last_bind"),
                "scheduler_cpu_seconds": by[runner].get("scheduler_cpu_seconds"),
                "scheduler_peak_rss_mb": by[runner].get("scheduler_peak_rss_mb"),
            }
    for runner in ("sluice", "sluice-event-qps"):
        for other, key in (("kube-scheduler", "kube_scheduler"), ("raw", "raw")):
            for suffix, fn in (("", rate), ("_overall", overall)):
                mine, theirs = fn(runner), fn(other)
                if mine is not None and theirs:
                    out[f"{runner}_vs_{key}{suffix}"] = round(mine / theirs, 2)
    return out


# --------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench real",
        description=(
            "Sluice and kube-scheduler side by side through a real API server; JSON lines."
        ),
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="use this cluster (default: start ../shared/k8s/up and stop it at the end)",
    )
    p.add_argument(
        "--state",
        type=Path,
        help="state dir of `up`: used if it holds a kubeconfig (its kube-scheduler, "
        "kube-apiserver and etcd pids are read from it), else `up` starts there",
    )
    p.add_argument(
        "--kube-scheduler-pid", type=int, help="pid of the cluster's kube-scheduler (CPU, RSS)"
    )
    p.add_argument(
        "--shapes",
        default="scheduling-basic,preemption-basic,gang",
        help=f"comma-separated, of {', '.join(SHAPES)} (default: all)",
    )
    p.add_argument(
        "--runners",
        default=",".join(RUNNERS),
        help=f"comma-separated, of {', '.join(RUNNERS)} (default: all, in that order)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every shape's nodes and pods by this (e.g. 0.1 for a quick look)",
    )
    p.add_argument("--kube-api-qps", type=float, default=5000.0)
    p.add_argument("--kube-api-burst", type=int, default=5000)
    p.add_argument("--event-qps", type=float, default=50.0, help="of the sluice-event-qps runs")
    p.add_argument("--event-burst", type=int, default=100)
    p.add_argument("--creators", type=int, default=32, help="measured pods created at once")
    p.add_argument("--raw-binds", type=int, default=64, help="binds at once in the raw runs")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    p.add_argument("--keep", action="store_true", help="leave the control plane running")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run sluice under cProfile; the profile's path is in scheduler_profile",
    )
    return p


def _shapes(args: argparse.Namespace) -> list[Shape]:
    out = []
    for name in (s.strip() for s in args.shapes.split(",") if s.strip()):
        if name not in SHAPES:
            raise SystemExit(f"--shapes: unknown shape {name!r} (known: {', '.join(SHAPES)})")
        s = SHAPES[name]
        if args.scale != 1.0:
            if not 0 < args.scale <= 10:
                raise SystemExit("--scale must be in (0, 10]")
            pods = max(int(s.pods * args.scale), 10)
            if s.gang_size:
                pods = max(pods // s.gang_size, 1) * s.gang_size
            s = replace(
                s,
                nodes=max(int(s.nodes * args.scale), 1),
                running=int(s.running * args.scale),
                pods=pods,
            )
        out.append(s)
    return out


def _runners(args: argparse.Namespace) -> list[str]:
    names = [r.strip() for r in args.runners.split(",") if r.strip()]
    for name in names:
        if name not in RUNNERS:
            raise SystemExit(f"--runners: unknown runner {name!r} (known: {', '.join(RUNNERS)})")
    return [r for r in RUNNERS if r in names]


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _main(args: argparse.Namespace, plane: ControlPlane, opts: Options) -> int:
    shapes, runners = _shapes(args), _runners(args)
    workdir = Path(tempfile.mkdtemp(prefix="sluice-real-bench-"))
    api = await KubeClient.connect(plane.kubeconfig, qps=0, burst=1, timeout=60)
    status = 0
    results: list[dict[str, Any]] = []
    common = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "revision": source_revision(),
        "kube_api_qps": opts.kube_api_qps,
        "kube_api_burst": opts.kube_api_burst,
        "external_kube_scheduler": _cmdline(plane.external_kube_scheduler) or None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    async with api:
        await ensure_cluster_objects(api)
        ctx = RunContext(api, plane, opts, workdir)
        for runner in runners:
            for shape in shapes:
                figures = await run_one(ctx, shape, runner)
                ks = plane.external_kube_scheduler
                figures["kube_scheduler_running"] = ks is not None and Path(f"/proc/{ks}").exists()
                figures.update(common)
                results.append(figures)
                _emit(figures)
                if figures["unbound"]:
                    status = 1
        for shape in shapes:
            _emit(compare(shape.name, results))
    with contextlib.suppress(OSError):
        workdir.rmdir()  # unless it holds a log or a profile worth keeping
    return status


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    opts = Options(
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        event_qps=args.event_qps,
        event_burst=args.event_burst,
        creators=args.creators,
        raw_binds=args.raw_binds,
        timeout=args.timeout,
        profile=args.profile,
    )
    _shapes(args), _runners(args)  # check them before starting anything
    if args.kubeconfig is not None or (args.state and (args.state / "kubeconfig").exists()):
        kubeconfig = args.kubeconfig or args.state / "kubeconfig"
        plane = ControlPlane(kubeconfig, args.state, started=False)
        plane.external_kube_scheduler = args.kube_scheduler_pid or _pid_file(
            args.state, "kube-scheduler"
        )
    else:
        state = args.state or Path(tempfile.mkdtemp(prefix="sluice-real-k8s-"))
        plane = start_control_plane(state)
        if args.keep:
            plane.started = False
            sys.stderr.write(f"bench real: control plane kept in {state}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still run `down` below
    try:
        return anyio.run(_main, args, plane, opts)
    finally:
        stop_control_plane(plane)
