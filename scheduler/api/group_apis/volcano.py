"""Volcano's ``scheduling.volcano.sh/v1beta1`` PodGroup and Queue, in and out (layer 0).

In: :func:`job_from_pod_group` and :func:`queue_from_queue`. Out:
:func:`pod_group_status` and :func:`queue_status`, the status Volcano's scheduler and
controllers write, because other controllers wait on it: Volcano's Job controller (and
Kubeflow's and Spark's Volcano integrations, which create a PodGroup and then the pods)
create pods only once the PodGroup's phase is set and not ``Pending``
(``pkg/controllers/job/job_controller_actions.go`` of volcano-sh/volcano, ``syncJob``), so
``Inqueue`` is written as soon as the gang is admitted.

Mapped:

* ``minMember``, ``minTaskMember`` (a pod's task is its ``volcano.sh/task-spec``
  annotation or label), ``queue``, ``priorityClassName``: as Sluice's own;
* ``minResources``: as Volcano's ``NewResource`` reads a resource list
  (``pkg/scheduler/api/resource_info.go``): CPU, memory, ``pods``, ephemeral storage and
  the scalar resources of Kubernetes' ``IsScalarResourceName`` (extended resources such
  as ``nvidia.com/gpu``, ``hugepages-*``, ``*kubernetes.io/*``, ``attachable-volumes-*``);
  quota names are left out, as Volcano's job controller writes them beside the plain ones
  (``count/pods``, ``requests.cpu``, ``limits.memory``: :func:`counted_resource`);
* ``networkTopology`` (``mode`` hard or soft, ``highestTierAllowed`` or
  ``highestTierName``): the gang within one domain of a level of a Sluice Topology, tier 1
  being its narrowest level (see :class:`~scheduler.api.job.TopologyConstraint`);
* ``subGroupPolicy``: an entry selecting one task (``matchLabels`` of just
  ``volcano.sh/task-spec``, as Volcano's Job controller writes it) needs
  ``minSubGroups * subGroupSize`` pods of that role; partitions (``matchLabelKeys``) and
  their own ``networkTopology`` are not honoured;
* Queue ``weight``, ``capability``, ``deserved``, ``guarantee.resource``, ``reclaimable``,
  ``parent`` (Volcano's ``root`` queue is Sluice's root), ``priority``, ``status.state``;
  the annotations ``volcano.sh/hierarchy`` and ``volcano.sh/hierarchy-weights`` are told
  as not honoured (``parent`` and ``weight`` are Sluice's hierarchy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from scheduler.api import labels as L
from scheduler.api.core_objects import class_priority
from scheduler.api.errors import InvalidInputError
from scheduler.api.group_apis import VOLCANO, GroupApi
from scheduler.api.group_apis.base import GroupApiBase, spec_queue
from scheduler.api.group_apis.conditions import set_condition
from scheduler.api.group_apis.objects import Converted, GroupObject
from scheduler.api.group_apis.protocol import (
    GroupEvent,
    GroupReport,
    GroupStatus,
    QueueReport,
    ShownQueue,
)
from scheduler.api.job import JobInfo, PodGroupPhase, TopologyConstraint
from scheduler.api.membership import VOLCANO_TASK_SPEC
from scheduler.api.queue import QueueInfo
from scheduler.api.resource import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    Resource,
    ResourceSum,
    parse_limits,
)
from scheduler.api.task import TaskStatus
from scheduler.api.task_states import HOLDS_ROOM, USES_NODE

Obj = Mapping[str, Any]

__all__ = [
    "ROOT_QUEUE",
    "VolcanoGroups",
    "counted_resource",
    "events_of",
    "job_from_pod_group",
    "min_resources",
    "pod_group_status",
    "queue_from_queue",
    "queue_status",
]

ROOT_QUEUE: Final = VOLCANO.root_queue
"""Volcano's root queue: the root of Sluice's queue tree, not a queue of its own."""

NOT_ENOUGH_RESOURCES: Final = "NotEnoughResources"
"""The reason Volcano's gang plugin gives its ``Unschedulable`` condition."""
SCHEDULED_REASON: Final = "tasks in gang are ready to be scheduled"
"""The reason Volcano's gang plugin gives its ``Scheduled`` condition (with no message)."""
POD_GROUP_READY: Final = "pod group is ready"
"""The message of the ``Scheduled`` event Volcano's scheduler records on a PodGroup."""


_QUALIFIED_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


def _qualified(name: str) -> bool:
    """Kubernetes' ``IsQualifiedName``: ``[prefix/]name``, a DNS subdomain prefix."""
    prefix, sep, rest = name.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return bool(_QUALIFIED_NAME.fullmatch(rest))


def counted_resource(name: str) -> bool:
    """Does Volcano count resource ``name`` of a resource list it reads (``NewResource``,
    compared by ``LessEqualWithDimension``)? CPU, memory, ``pods`` (a scalar since Volcano
    v1.9) and ephemeral storage do; the object-count quotas (``count/*``:
    ``IsCountQuota``) do not; any other name does when Kubernetes' ``IsScalarResourceName``
    holds: an extended resource (a qualified name with a domain, neither
    ``*kubernetes.io/`` nor ``requests.``-prefixed), ``hugepages-*``, ``*kubernetes.io/*``
    or ``attachable-volumes-*``. So quota names (``requests.cpu``, ``limits.memory``,
    ``requests.nvidia.com/gpu``) do not."""
    if name in (CPU, MEMORY, PODS, EPHEMERAL_STORAGE):
        return True
    if name.startswith("count/"):
        return False
    native = "kubernetes.io/" in name
    extended = (
        "/" in name
        and not native
        and not name.startswith("requests.")
        and _qualified(f"requests.{name}")
    )
    return extended or native or name.startswith(("hugepages-", "attachable-volumes-"))


def min_resources(raw: object, where: str) -> Resource:
    """A PodGroup's ``spec.minResources`` as Volcano reads it: the names it counts
    (:func:`counted_resource`), the others left out unparsed."""
    if not isinstance(raw, Mapping):
        return Resource.parse(raw, obj=where, field="spec.minResources")  # type: ignore[arg-type]
    counted = {str(k): v for k, v in raw.items() if counted_resource(str(k))}
    return Resource.parse(counted, obj=where, field="spec.minResources")


def _topology(spec: Obj, annotations: Mapping[str, str], where: str) -> TopologyConstraint | None:
    nt = spec.get("networkTopology")
    if not isinstance(nt, Mapping):
        return None
    tier = nt.get("highestTierAllowed")
    name = nt.get("highestTierName")
    if tier is None and not name:
        return None
    if tier is not None and (not isinstance(tier, int) or isinstance(tier, bool) or tier < 1):
        raise InvalidInputError(
            where, "spec.networkTopology.highestTierAllowed", f"must be 1 or more, got {tier!r}"
        )
    mode = str(nt.get("mode") or "hard")
    if mode not in ("hard", "soft"):
        raise InvalidInputError(
            where, "spec.networkTopology.mode", f'must be "hard" or "soft", got {mode!r}'
        )
    return TopologyConstraint(
        str(annotations.get(L.TOPOLOGY_ANNOTATION) or ""),
        tier=int(tier or 0),
        tier_name=str(name or ""),
        soft=mode == "soft",
    )


def _sub_groups(policies: object, min_task_member: dict[str, int], where: str) -> tuple[str, ...]:
    """Fold the entries of ``subGroupPolicy`` that select one task into
    ``min_task_member``; return what is not honoured."""
    notes: list[str] = []
    if not isinstance(policies, Sequence):
        return ()
    for i, policy in enumerate(policies):
        if not isinstance(policy, Mapping):
            continue
        field = f"spec.subGroupPolicy[{i}]"
        selector = policy.get("labelSelector") or {}
        match = selector.get("matchLabels") or {} if isinstance(selector, Mapping) else {}
        role = match.get(VOLCANO_TASK_SPEC) if isinstance(match, Mapping) else None
        if role is None or len(match) != 1 or selector.get("matchExpressions"):
            notes.append(
                f"{where}: {field} is not honoured: only a labelSelector of matchLabels "
                f"{{{VOLCANO_TASK_SPEC}: TASK}} maps onto a role"
            )
            continue
        size = int(policy.get("subGroupSize") or 1)
        need = int(policy.get("minSubGroups") or 0) * size
        if need > min_task_member.get(str(role), 0):
            min_task_member[str(role)] = need
        if policy.get("matchLabelKeys") or policy.get("networkTopology"):
            notes.append(
                f"{where}: {field}: the partitions (matchLabelKeys) and their networkTopology "
                f"are not honoured; task {role!r} needs {need} pod(s) in all"
            )
    return tuple(notes)


def job_from_pod_group(pg: Obj, priority_classes: Mapping[str, int]) -> Converted[JobInfo]:
    """The gang of a Volcano PodGroup, and what of it is not honoured."""
    g = GroupObject.read(pg, VOLCANO)
    spec = g.spec
    pc = str(spec.get("priorityClassName") or "")
    min_task_member = {str(k): int(v) for k, v in (spec.get("minTaskMember") or {}).items()}
    notes = _sub_groups(spec.get("subGroupPolicy"), min_task_member, g.where)
    try:
        phase = PodGroupPhase(g.status.get("phase", "Pending"))
    except ValueError:
        phase = PodGroupPhase.PENDING
    job = g.job(
        queue=str(spec.get("queue") or L.DEFAULT_QUEUE),
        min_member=int(spec.get("minMember") or 0),
        min_task_member=min_task_member,
        min_resources=min_resources(spec.get("minResources"), g.where),
        priority=class_priority(pc, priority_classes, g.where),
        priority_class=pc,
        phase=phase,
        topology=_topology(spec, g.meta.get("annotations") or {}, g.where),
    )
    return Converted(job, notes)


_QUEUE_UNHONOURED: Final = ("affinity", "extendClusters", "type")
HIERARCHY_ANNOTATIONS: Final = ("volcano.sh/hierarchy", "volcano.sh/hierarchy-weights")
"""Volcano's hierarchical DRF tree (inner nodes are names, not Queues): not read."""


def queue_from_queue(q: Obj) -> Converted[QueueInfo | None]:
    """The queue of a Volcano Queue (None for Volcano's ``root``: Sluice's own root), and
    what of it is not honoured."""
    meta = q.get("metadata") or {}
    spec = q.get("spec") or {}
    name = str(meta["name"])
    where = f"Queue {name} ({VOLCANO.api_version})"
    if name == ROOT_QUEUE:
        return Converted(None)  # the root of the tree: its status holds every queue's

    def limits(field: str, raw: object) -> dict[str, int] | None:
        return None if raw is None else parse_limits(raw, obj=where, field=field)

    guarantee = spec.get("guarantee") or {}
    status = q.get("status") or {}
    parent = str(spec.get("parent") or "")
    notes = tuple(f"{where}: spec.{f} is not honoured" for f in _QUEUE_UNHONOURED if spec.get(f))
    annotations = meta.get("annotations") or {}
    notes += tuple(
        f"{where}: annotation {key} is not honoured: Sluice's queue hierarchy is the Queues' "
        "spec.parent and spec.weight (drf's hierarchy orders queues by them)"
        for key in HIERARCHY_ANNOTATIONS
        if annotations.get(key)
    )
    if spec.get("dequeueStrategy") == "fifo":
        notes += (
            f"{where}: spec.dequeueStrategy fifo is not honoured (jobs are ordered by "
            "priority, then creation)",
        )
    queue = QueueInfo(
        name=name,
        weight=int(spec.get("weight") or 1),
        capability=limits("spec.capability", spec.get("capability")),
        deserved=limits("spec.deserved", spec.get("deserved")),
        guarantee=Resource.parse(
            guarantee.get("resource") if isinstance(guarantee, Mapping) else None,
            obj=where,
            field="spec.guarantee.resource",
        ),
        reclaimable=bool(spec.get("reclaimable", True)),
        priority=int(spec.get("priority") or 0),
        parent="" if parent == ROOT_QUEUE else parent,
        state=str(status.get("state") or "Open"),
        uid=str(meta.get("uid") or ""),
    )
    return Converted(queue, notes)


# Status out --------------------------------------------------------------------------


def phase_of(job: JobInfo, unschedulable: bool) -> PodGroupPhase:
    """Volcano's phase of a PodGroup (``getPodGroupPhase`` of its scheduler's session):
    Unknown while it has running pods but is short of its minimum; Running once
    ``minMember`` pods are placed (Completed when every one placed has succeeded); else
    Inqueue if it was, Pending otherwise (a Running gang that lost pods must be admitted
    again, as in Volcano)."""
    statuses = [t.status for t in job.tasks.values()]
    if unschedulable and TaskStatus.RUNNING in statuses:
        return PodGroupPhase.UNKNOWN
    succeeded = statuses.count(TaskStatus.SUCCEEDED)
    scheduled = succeeded + sum(1 for s in statuses if s in USES_NODE)
    completed = succeeded + statuses.count(TaskStatus.FAILED)
    if statuses and scheduled >= job.min_member:
        return PodGroupPhase.COMPLETED if scheduled == completed else PodGroupPhase.RUNNING
    return PodGroupPhase.INQUEUE if job.phase is PodGroupPhase.INQUEUE else PodGroupPhase.PENDING


def pod_group_status(
    job: JobInfo,
    reason: str | None,
    now: str,
    previous: Mapping[str, Any],
    *,
    error: bool = False,
) -> tuple[dict[str, Any], PodGroupPhase]:
    """The ``status`` Volcano writes for ``job``'s PodGroup. ``reason``: why the gang is
    not placed this cycle (None: nothing to say). Conditions as Volcano's gang plugin
    writes them, replaced by type (the others kept): ``Unschedulable`` (reason
    ``NotEnoughResources``, message ``N/M tasks in gang unschedulable: ...``) while the
    gang has pods and is short of its minimum; ``Scheduled`` once it is not. A PodGroup
    not admitted, none of whose pods exist yet (Volcano's job controller makes them only
    once it is), gets the ``Unschedulable`` condition too, its message the reason alone:
    Volcano says so only in an event, and users look at the PodGroup. Returned with the
    phase written, which Sluice acts on from now."""
    placed = job.placed_count()
    short = placed < job.min_member
    waits = bool(job.tasks) or job.phase is PodGroupPhase.PENDING  # for its pods, or admission
    unschedulable = short and waits and reason is not None
    statuses = [t.status for t in job.tasks.values()]
    conditions: list[dict[str, Any]] = list(previous.get("conditions") or ())
    if unschedulable:
        message = (
            f"{job.min_member - placed}/{len(job.tasks)} tasks in gang unschedulable: {reason}"
            if job.tasks
            else str(reason)
        )
        conditions = set_condition(
            conditions,
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": L.REASON_SCHEDULER_ERROR if error else NOT_ENOUGH_RESOURCES,
                "message": message,
                "transitionID": now,
            },
            now,
            keep=("transitionID",),
        )
    elif job.tasks and not short:
        conditions = set_condition(
            conditions,
            {
                "type": "Scheduled",
                "status": "True",
                "reason": SCHEDULED_REASON,
                "message": "",
                "transitionID": now,
            },
            now,
            keep=("transitionID",),
        )
    phase = phase_of(job, unschedulable)
    out: dict[str, Any] = {
        "phase": phase.value,
        "running": statuses.count(TaskStatus.RUNNING),
        "succeeded": statuses.count(TaskStatus.SUCCEEDED),
        "failed": statuses.count(TaskStatus.FAILED),
    }
    if conditions:
        out["conditions"] = conditions
    return out, phase


def events_of(status: Mapping[str, Any], previous: Mapping[str, Any]) -> tuple[GroupEvent, ...]:
    """The events on the PodGroup when ``status`` replaces ``previous``, as Volcano's
    scheduler records them (``RecordJobStatusEvent``): ``Warning Unschedulable`` with the
    condition's message when the ``Unschedulable`` condition is new or says something new,
    ``Normal Scheduled`` "pod group is ready" when the ``Scheduled`` one is new."""
    old = {c.get("type"): c for c in previous.get("conditions") or () if isinstance(c, Mapping)}
    out: list[GroupEvent] = []
    for c in status.get("conditions") or ():
        before = old.get(c["type"])
        if before is not None and all(
            before.get(k) == c.get(k) for k in ("status", "reason", "message")
        ):
            continue
        if c["type"] == "Unschedulable":
            out.append(GroupEvent("Warning", "Unschedulable", str(c.get("message") or "")))
        elif c["type"] == "Scheduled":
            out.append(GroupEvent("Normal", "Scheduled", POD_GROUP_READY))
    return tuple(out)


def queue_status(report: QueueReport) -> dict[str, Any]:
    """The ``status`` of a Volcano Queue holding ``report.jobs`` (its leaves' for a parent):
    its state, its PodGroups counted by phase (as Volcano's queue controller counts
    them) and ``allocated`` (what its pods hold, as Volcano's scheduler writes it)."""
    counts = dict.fromkeys(PodGroupPhase, 0)
    total = ResourceSum()
    for job in report.jobs:
        for t in job.tasks.values():
            if t.status in HOLDS_ROOM:
                total.add(t.request)
        if job.has_pod_group:
            counts[report.phases.get(job.uid, job.phase)] += 1
    return {
        "state": report.state,
        "allocated": total.result().to_quantities(),
        "pending": counts[PodGroupPhase.PENDING],
        "inqueue": counts[PodGroupPhase.INQUEUE],
        "running": counts[PodGroupPhase.RUNNING],
        "unknown": counts[PodGroupPhase.UNKNOWN],
        "completed": counts[PodGroupPhase.COMPLETED],
    }


class VolcanoGroups(GroupApiBase):
    """Volcano's API (:data:`~scheduler.api.group_apis.VOLCANO`)."""

    api: GroupApi = VOLCANO

    def read_group(
        self, obj: Obj, priority_classes: Mapping[str, int], /
    ) -> Converted[JobInfo | None]:
        return job_from_pod_group(obj, priority_classes)

    def read_queue(self, obj: Obj, /) -> Converted[QueueInfo | None]:
        return queue_from_queue(obj)

    def queue_of(self, obj: Obj, /) -> str:
        return spec_queue(obj)

    def group_status(self, report: GroupReport, /) -> GroupStatus:
        status, phase = pod_group_status(
            report.job,
            report.message,
            report.now,
            report.observed,
            error=report.error,
        )
        return GroupStatus(status, phase, events_of(status, report.observed))

    def queue_status(self, report: QueueReport, /) -> dict[str, Any]:
        return queue_status(report)

    def shown_queue(self, obj: Obj, /) -> ShownQueue:
        spec = obj.get("spec") or {}
        name = str((obj.get("metadata") or {}).get("name") or "")
        parent = str(spec.get("parent") or "")
        guarantee = spec.get("guarantee")
        resource = guarantee.get("resource") if isinstance(guarantee, Mapping) else None
        return ShownQueue(
            "" if parent == ROOT_QUEUE else parent,
            name == ROOT_QUEUE,
            resource if isinstance(resource, Mapping) else None,
        )
