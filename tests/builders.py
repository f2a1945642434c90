"""Small builders shared by the tests: Kubernetes objects as dicts, and sessions over them.

``pod`` and ``node`` return plain JSON dicts shaped as the API server returns them, so the
tests go through the same conversion (``scheduler.api.core_objects``) as the scheduler.
``session_with`` opens a real :class:`~scheduler.framework.session.Session` on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.core_objects import (
    job_for_lone_pod,
    node_from_object,
    pod_group_name,
    task_from_pod,
)
from scheduler.api.group_apis import VOLCANO, GroupApi, kind_key
from scheduler.api.group_apis.sluice import job_from_pod_group, queue_from_object
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache.placement_objects import PlacementObjects
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.registry import PluginSpec, Registry
from scheduler.framework.session import Session, open_session

Obj = dict[str, Any]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def pod(
    name: str,
    *,
    ns: str = "default",
    cpu: str | None = "100m",
    memory: str | None = "100Mi",
    node: str | None = None,
    priority: int = 0,
    labels: Mapping[str, str] | None = None,
    group: str | None = None,
    role: str | None = None,
    scheduler: str = L.SCHEDULER_NAME,
    phase: str | None = None,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """A Pod with one container requesting ``cpu`` and ``memory`` (None: no request).

    ``node`` sets ``spec.nodeName`` (the phase then defaults to Running); ``group`` and
    ``role`` set the PodGroup and task-role labels; any other keyword is a field of
    ``spec`` as spelled in the API (``tolerations=[...]``, ``affinity={...}``,
    ``containers=[...]`` replaces the default container).
    """
    meta_labels = dict(labels or {})
    if group is not None:
        meta_labels[L.POD_GROUP_LABEL] = group
    if role is not None:
        meta_labels[L.TASK_ROLE_LABEL] = role
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    body: Obj = {
        "schedulerName": scheduler,
        "priority": priority,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
    }
    if node is not None:
        body["nodeName"] = node
    body.update(spec)
    meta: Obj = {"name": name, "namespace": ns, "uid": f"{ns}/{name}", "labels": meta_labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": body,
        "status": {"phase": phase or ("Running" if node is not None else "Pending")},
    }


def taint(text: str) -> Obj:
    """``key=value:Effect`` or ``key:Effect`` (kubectl's syntax) as a taint object."""
    kv, _, effect = text.rpartition(":")
    key, _, value = kv.partition("=")
    out: Obj = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "32Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[str | Mapping[str, Any]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    gpus: int | None = None,
) -> Obj:
    """A Node. Labels include ``kubernetes.io/hostname: <name>`` unless overridden; taints
    are objects or strings in kubectl's syntax (``dedicated=gpu:NoSchedule``)."""
    allocatable: Obj = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {}
    if taints:
        spec["taints"] = [taint(t) if isinstance(t, str) else dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def snapshot_of(
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    *,
    pod_groups: Sequence[Obj] = (),
    queues: Sequence[Obj] = (),
    priority_classes: Mapping[str, int] | None = None,
    objects: Sequence[Obj] = (),
) -> Snapshot:
    """A Snapshot as the cache would build it (nodes by name, jobs by uid).

    ``objects``: Namespaces, Services and controllers, as placement reads them
    (:mod:`scheduler.cache.placement_objects`).

    Pods with ``spec.nodeName`` are added to their nodes (non-strict, as the cache does).
    A pod naming a group joins that PodGroup's job: the one given in ``pod_groups``, or
    else a job with ``minMember`` equal to the number of its pods. Every other pod is a
    gang of one. Queue ``default`` always exists.
    """
    classes = dict(priority_classes or {})
    infos = sorted((node_from_object(n) for n in nodes), key=lambda n: n.name)
    snap = Snapshot(nodes={n.name: n for n in infos}, priority_classes=classes)
    placement = PlacementObjects()
    for obj in objects:
        placement.handle(obj["kind"], "ADDED", obj)
    snap.namespaces = placement.namespaces
    snap.spread_selectors = placement.selectors
    for q in queues:
        info = queue_from_object(q)
        snap.queues[info.name] = info
    snap.queues.setdefault(L.DEFAULT_QUEUE, QueueInfo(L.DEFAULT_QUEUE))
    groups = {j.uid: j for j in (job_from_pod_group(pg, classes) for pg in pod_groups)}
    jobs: dict[str, JobInfo] = {}
    for raw in pods:
        task = task_from_pod(raw)
        job = jobs.get(task.job_id) or groups.get(task.job_id)
        if job is None:
            queue = (task.labels or {}).get(L.QUEUE_LABEL, L.DEFAULT_QUEUE)
            if not pod_group_name(raw):
                job = job_for_lone_pod(task, queue)
            else:
                job = JobInfo(
                    uid=task.job_id,
                    namespace=task.namespace,
                    name=task.job_id.split("/", 1)[1],
                    queue=queue,
                    min_member=0,
                    phase=PodGroupPhase.INQUEUE,
                    has_pod_group=True,
                )
        jobs[job.uid] = job
        job.add_task(task)
        if task.node_name:
            snap.nodes[task.node_name].add_task(task)
    for uid, job in groups.items():
        jobs.setdefault(uid, job)
    for job in jobs.values():
        if job.has_pod_group and job.uid not in groups:
            job.min_member = len(job.tasks)
    snap.jobs.update(sorted(jobs.items()))
    return snap


def default_registry() -> Registry:
    """A registry with the built-in plugins (or at least predicates and nodeorder)."""
    registry = Registry()
    try:
        from scheduler.plugins import register_builtin
    except ImportError:
        pass
    else:
        register_builtin(registry)
    from scheduler.plugins.nodeorder import NodeOrderArguments, NodeOrderPlugin
    from scheduler.plugins.predicates import PredicatesPlugin

    known = set(registry.plugin_names)
    if "predicates" not in known:
        registry.add_plugin(PluginSpec("predicates", PredicatesPlugin))
    if "nodeorder" not in known:
        registry.add_plugin(PluginSpec("nodeorder", NodeOrderPlugin, NodeOrderArguments))
    return registry


def session_with(
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    plugins: Sequence[PluginConfig],
    registry: Registry | None = None,
    **snapshot: Any,
) -> Session:
    """An open Session over ``nodes`` and ``pods`` with ``plugins`` as one tier and no
    actions. Extra keywords go to :func:`snapshot_of` (``pod_groups``, ``queues``, ...)."""
    config = SchedulerConfiguration(actions=(), tiers=(TierConfig(tuple(plugins)),))
    resolved = (registry or default_registry()).resolve(config)
    return open_session(snapshot_of(nodes, pods, **snapshot), resolved)


def task_of(session: Session, name: str, ns: str = "default") -> TaskInfo:
    """The session's TaskInfo of pod ``ns/name``."""
    for job in session.jobs.values():
        for task in job.tasks.values():
            if task.name == name and task.namespace == ns:
                return task
    raise KeyError(f"{ns}/{name}")


# Added for the decision-core tests (issue 2) --------------------------------------------------


def pod_group(
    name: str,
    *,
    ns: str = "default",
    min_member: int = 1,
    queue: str | None = None,
    min_task_member: Mapping[str, int] | None = None,
    min_resources: Mapping[str, str] | None = None,
    phase: str | None = None,
    **spec: Any,
) -> Obj:
    """A PodGroup. ``phase`` sets ``status.phase`` (as the enqueue action would have)."""
    body: Obj = {"minMember": min_member, **spec}
    if queue is not None:
        body["queue"] = queue
    if min_task_member is not None:
        body["minTaskMember"] = dict(min_task_member)
    if min_resources is not None:
        body["minResources"] = dict(min_resources)
    out: Obj = {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": f"pg-{ns}-{name}"},
        "spec": body,
    }
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


def queue(
    name: str,
    *,
    weight: int = 1,
    capability: Mapping[str, str] | None = None,
    deserved: Mapping[str, str] | None = None,
    guarantee: Mapping[str, str] | None = None,
    priority: int = 0,
    state: str | None = None,
    parent: str | None = None,
    reclaimable: bool | None = None,
) -> Obj:
    """A Queue (cluster-scoped)."""
    spec: Obj = {"weight": weight}
    if parent is not None:
        spec["parent"] = parent
    if reclaimable is not None:
        spec["reclaimable"] = reclaimable
    for key, value in (
        ("capability", capability),
        ("deserved", deserved),
        ("guarantee", guarantee),
    ):
        if value is not None:
            spec[key] = dict(value)
    if priority:
        spec["priority"] = priority
    out: Obj = {
        "apiVersion": L.API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }
    if state is not None:
        out["status"] = {"state": state}
    return out


def _plain(value: Any) -> Any:
    """numpy arrays and nested dicts of them as lists and dicts, for equality."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def session_dump(session: Session) -> dict[str, Any]:
    """Everything a decision changes, as plain values: compare before and after a rollback.

    Nodes' used/releasing/nominated and task sets, the NodeTable's idle and nominated arrays,
    every task's status and node, and the proportion plugin's per-queue allocation if it runs.
    """
    out: dict[str, Any] = {
        "nodes": {
            name: (n.used.to_dict(), n.releasing.to_dict(), n.nominated.to_dict(), sorted(n.tasks))
            for name, n in session.nodes.items()
        },
        "idle": session.table.idle.tolist(),
        "nominated": session.table.nominated.tolist(),
        "table": {
            name: _plain(value)
            for name, value in sorted(vars(session.table).items())
            if name in ("releasing", "nominations")
        },
        "tasks": {
            t.uid: (t.status.value, t.node_name)
            for job in session.jobs.values()
            for t in job.tasks.values()
        },
    }
    for _, plugin in session.plugins:
        attrs = getattr(plugin, "attrs", None)
        if plugin.name == "proportion" and attrs is not None:
            out["queues"] = {q: a.allocated.to_dict() for q, a in attrs.items()}
    return out


KIND_ORDER = (
    "PriorityClass",
    "Queue",
    "Topology",
    "Node",
    "PodGroup",
    "PodDisruptionBudget",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
)


def cache_with(*objects: Obj, scheduler_name: str = L.SCHEDULER_NAME, sharding: Any = None) -> Any:
    """A SchedulerCache fed an ADDED event per object, in the order given, with queue
    ``default`` added first unless one of the objects is that queue. ``sharding``: the
    cache of that shard (:class:`~scheduler.api.shards.Sharding`)."""
    from scheduler.cache import SchedulerCache

    cache = SchedulerCache(scheduler_name, sharding=sharding)
    if not any(o["kind"] == "Queue" and o["metadata"]["name"] == L.DEFAULT_QUEUE for o in objects):
        cache.handle("Queue", "ADDED", queue(L.DEFAULT_QUEUE))
    for obj in objects:
        cache.handle(key_of(obj), "ADDED", obj)
    return cache


def key_of(obj: Obj) -> str:
    """The kind key of ``obj`` (``PodGroup.scheduling.volcano.sh``), as backends hand it."""
    return kind_key(str(obj.get("apiVersion") or ""), str(obj["kind"]))


def api_pod_group(
    api: GroupApi,
    name: str,
    spec: Mapping[str, Any],
    *,
    ns: str = "default",
    status: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A PodGroup of another scheduler's ``api`` (Volcano, scheduler-plugins, Kubernetes)."""
    meta: Obj = {"name": name, "namespace": ns, "uid": f"{api.name}-{ns}-{name}"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    out: Obj = {
        "apiVersion": api.api_version,
        "kind": "PodGroup",
        "metadata": meta,
        "spec": dict(spec),
    }
    if status is not None:
        out["status"] = dict(status)
    return out


def volcano_queue(name: str, spec: Mapping[str, Any] | None = None, **status: Any) -> Obj:
    """A Volcano Queue (cluster-scoped); keywords are fields of its status."""
    out: Obj = {
        "apiVersion": VOLCANO.api_version,
        "kind": "Queue",
        "metadata": {"name": name, "uid": f"vq-{name}"},
        "spec": dict(spec or {}),
    }
    if status:
        out["status"] = status
    return out


def cached_session(
    objects: Sequence[Obj],
    plugins: Sequence[PluginConfig] | None = None,
    config: SchedulerConfiguration | None = None,
) -> Session:
    """A Session over the snapshot of :func:`cache_with` (objects sorted by kind first), as
    the loop opens it. ``plugins`` (one tier, no actions) or a whole ``config``."""
    from scheduler.app import builtin_registry

    ordered = sorted(objects, key=lambda o: KIND_ORDER.index(o["kind"]))
    cache = cache_with(*ordered)
    if config is None:
        config = SchedulerConfiguration(actions=(), tiers=(TierConfig(tuple(plugins or ())),))
    return open_session(cache.snapshot(), builtin_registry().resolve(config))


def gang_of(
    api: GroupApi,
    statuses: Sequence[TaskStatus],
    min_member: int,
    phase: PodGroupPhase = PodGroupPhase.INQUEUE,
    ns: str = "default",
) -> JobInfo:
    """The gang of ``api``'s PodGroup ``pg``, with one pod (of 100m CPU) per status."""
    job = JobInfo(
        api.job_id(ns, "pg"),
        ns,
        "pg",
        "default",
        min_member=min_member,
        phase=phase,
        has_pod_group=True,
    )
    for i, status in enumerate(statuses):
        task = task_from_pod(pod(f"p{i}", ns=ns))
        task.status = status
        job.add_task(task)
    return job
