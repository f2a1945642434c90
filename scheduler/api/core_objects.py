"""Kubernetes objects (JSON dicts) to domain objects (layer 0).

Both backends hand the cache plain JSON dicts in Kubernetes shape (the kube backend
reads raw JSON; the embedded cluster stores it), so one pure conversion serves both.
Every function raises :class:`InvalidInputError` naming the object and the field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import DisruptionBudget, TopologyInfo
from scheduler.api.disruption import pod_ready
from scheduler.api.errors import InvalidInputError
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.label_selectors import parse_label_selector
from scheduler.api.membership import pod_group_ref, pod_preemptable, pod_role, resolve_job_id
from scheduler.api.node import NodeInfo
from scheduler.api.owners import controller_ref
from scheduler.api.pod import PodSpecView, Taint, parse_pod_spec
from scheduler.api.resource import MAX_AMOUNT, Resource, over_max
from scheduler.api.task import TaskInfo, TaskStatus

Obj = Mapping[str, Any]


def parse_time(value: object) -> float:
    """RFC 3339 timestamp to epoch seconds; absent or malformed reads as 0."""
    if not isinstance(value, str) or not value:
        return 0.0
    return _parse_stamp(value)


@functools.lru_cache(maxsize=65536)
def _parse_stamp(value: str) -> float:
    """:func:`parse_time` of a string, kept: pods made together share their times (a
    restart reads 130,000 creation and start times, few of them distinct)."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def ref(obj: Obj) -> str:
    """``Kind namespace/name`` (or ``Kind name``) for messages."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return (
        f"{obj.get('kind', 'Object')} {ns}/{name}" if ns else f"{obj.get('kind', 'Object')} {name}"
    )


def pod_group_name(pod: Obj) -> str:
    """The name of the PodGroup a pod names, of whichever API; "" if none. The rule (and
    the API) is :func:`scheduler.api.membership.pod_group_ref`."""
    group = pod_group_ref(pod)
    return group.name if group is not None else ""


def job_id_of_pod(pod: Obj) -> str:
    """The job of the PodGroup ``pod`` names, or its own as a gang of one. The cache
    resolves it further with what PodGroups exist
    (:func:`~scheduler.api.membership.resolve_job_id`)."""
    meta = pod["metadata"]
    ns = str(meta.get("namespace", "default"))
    return resolve_job_id(pod_group_ref(pod), ns, str(meta["name"]))


def pod_status(pod: Obj) -> TaskStatus:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    if phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if phase == "Failed":
        return TaskStatus.FAILED
    if spec.get("nodeName"):
        if meta.get("deletionTimestamp"):
            return TaskStatus.RELEASING
        return TaskStatus.RUNNING if phase == "Running" else TaskStatus.BOUND
    if spec.get("schedulingGates"):
        return TaskStatus.GATED
    return TaskStatus.PENDING


def scheduling_gates(pod: Obj) -> tuple[str, ...]:
    """The names of ``pod``'s ``spec.schedulingGates``, in order."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return tuple(str(g.get("name", "")) if isinstance(g, Mapping) else str(g) for g in gates)


def parse_pod_spec_of(spec: Obj, where: str) -> PodSpecView:
    """:func:`~scheduler.api.pod.parse_pod_spec` of ``spec``, errors naming ``where``."""
    return parse_pod_spec(spec, obj=where)


def task_from_pod(
    pod: Obj,
    *,
    scheduler_name: str = L.SCHEDULER_NAME,
    job_id: str | None = None,
    parse: Callable[[Obj, str], PodSpecView] = parse_pod_spec_of,
) -> TaskInfo:
    """A TaskInfo for ``pod``. ``spec.priority`` must already be resolved (API server does).
    ``job_id``: its job, when the caller resolved it (else :func:`job_id_of_pod`).
    ``parse(spec, where)``: the parse of its spec (the cache shares one among equal
    specs: :mod:`scheduler.cache.specs`)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ns = meta.get("namespace")
    where = f"Pod {ns}/{meta.get('name', '?')}" if ns else f"Pod {meta.get('name', '?')}"
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    status = pod.get("status") or {}
    priority = spec.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidInputError(where, "spec.priority", f"must be an integer, got {priority!r}")
    return TaskInfo(
        uid=str(meta.get("uid") or where),
        namespace=str(meta.get("namespace", "default")),
        name=str(meta["name"]),
        job_id=job_id if job_id is not None else job_id_of_pod(pod),
        spec=parse(spec, where),
        priority=priority,
        creation=parse_time(meta.get("creationTimestamp")),
        role=pod_role(labels, annotations),
        labels=labels,
        annotations=annotations,
        status=pod_status(pod),
        node_name=str(spec.get("nodeName") or ""),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        preemptable=pod_preemptable(labels, annotations),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        priority_class=str(spec.get("priorityClassName") or ""),
        start_time=parse_time(status.get("startTime")),
        terminating=bool(meta.get("deletionTimestamp")),
        ready=pod_ready(status),
        sluice=spec.get("schedulerName", "default-scheduler") == scheduler_name,
        scheduling_gates=scheduling_gates(pod),
        claim_statuses=claim_statuses(status),
        controller=controller_ref(pod),
    )


def claim_statuses(status: Obj) -> tuple[tuple[str, str], ...]:
    """A pod's ``status.resourceClaimStatuses`` (DRA) as (pod claim name, claim name); the
    claim name is "" for an entry saying that no claim is needed."""
    return tuple(
        (str(s.get("name") or ""), str(s.get("resourceClaimName") or ""))
        for s in status.get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    )


def node_from_object(node: Obj) -> NodeInfo:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    where = ref({"kind": "Node", "metadata": meta})
    raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = Resource.parse(raw, obj=where, field="status.allocatable")
    capped = tuple(over_max(allocatable))
    if capped:  # an absurd allocatable (1000Ei) is capped: see MAX_AMOUNT
        allocatable = Resource({n: min(a, MAX_AMOUNT) for n, a in allocatable.items()})
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "NoSchedule")))
        for t in spec.get("taints") or ()
    )
    ready = True
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return NodeInfo(
        name=str(meta["name"]),
        allocatable=allocatable,
        labels=dict(meta.get("labels") or {}),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        capped=capped,
    )


def class_priority(
    name: str,
    priority_classes: Mapping[str, int],
    where: str,
    field: str = "spec.priorityClassName",
) -> int:
    """The value of PriorityClass ``name`` (0 for ""); InvalidInputError naming ``field``
    of ``where`` when no PriorityClass has that name."""
    if name and name not in priority_classes:
        raise InvalidInputError(where, field, f"no PriorityClass named {name!r}")
    return priority_classes.get(name, 0)


def conditions_of(status: Mapping[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
    """A status's conditions as (type, status, reason, message) tuples."""
    return tuple(
        (
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason", "")),
            str(c.get("message", "")),
        )
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )


def job_for_lone_pod(task: TaskInfo, queue: str) -> JobInfo:
    """The gang of one that a pod without a PodGroup forms."""
    return JobInfo(
        uid=task.job_id,
        namespace=task.namespace,
        name=task.name,
        queue=queue,
        min_member=1,
        priority=task.priority,
        creation=task.creation,
        phase=PodGroupPhase.INQUEUE,
        has_pod_group=False,
        problem=task.spec.problem,
    )


def budget_from_object(
    pdb: Obj, disruptions_allowed: int, unhealthy_evictable: bool = False
) -> DisruptionBudget:
    meta = pdb.get("metadata") or {}
    where = ref({"kind": "PodDisruptionBudget", "metadata": meta})
    selector = parse_label_selector(
        (pdb.get("spec") or {}).get("selector"),
        obj=where,
        field="spec.selector",
        null_matches=False,
    )
    disrupted = (pdb.get("status") or {}).get("disruptedPods") or {}
    return DisruptionBudget(
        str(meta.get("namespace", "default")),
        str(meta["name"]),
        selector,
        disruptions_allowed,
        unhealthy_evictable,
        frozenset(str(name) for name in disrupted) if isinstance(disrupted, dict) else frozenset(),
    )


def topology_from_object(topo: Obj) -> TopologyInfo:
    meta = topo.get("metadata") or {}
    levels = tuple(
        str(lv.get("nodeLabel", "")) for lv in (topo.get("spec") or {}).get("levels") or ()
    )
    return TopologyInfo(str(meta["name"]), levels)
