"""Sluice's own ``scheduling.sluice.dev/v1alpha1`` PodGroup and Queue, in and out (layer 0).

In: :func:`job_from_pod_group` (``minMember``, ``minTaskMember``, ``minResources``,
``queue``, ``priorityClassName``, ``topologyConstraint``) and :func:`queue_from_object`.
Out: :func:`pod_group_status` (``phase``, the counts of running, succeeded and failed
pods, and the conditions ``Scheduled``, ``Unschedulable`` (reason Unschedulable,
SchedulingGated while the gang's pods are all held by scheduling gates, or SchedulerError)
and ``Reserved``) and :func:`queue_status` (``state``, ``allocated``, ``deserved``, its
jobs by phase, and a ``Closed`` condition while the scheduler keeps it closed). Sluice
records no events on its own PodGroups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from scheduler.api import labels as L
from scheduler.api.core_objects import class_priority, conditions_of, parse_time, ref
from scheduler.api.group_apis import SLUICE, GroupApi
from scheduler.api.group_apis.base import GroupApiBase, spec_queue
from scheduler.api.group_apis.objects import Converted
from scheduler.api.group_apis.protocol import (
    GroupReport,
    GroupStatus,
    QueueReport,
    ShownQueue,
)
from scheduler.api.job import JobInfo, PodGroupPhase, TopologyConstraint
from scheduler.api.queue import QueueInfo
from scheduler.api.resource import Resource, ResourceSum, parse_limits
from scheduler.api.task import TaskStatus
from scheduler.api.task_states import HOLDS_ROOM, UNFINISHED

Obj = Mapping[str, Any]

__all__ = [
    "CLOSED",
    "RESERVED",
    "SluiceGroups",
    "job_from_pod_group",
    "job_phase",
    "pod_group_status",
    "queue_from_object",
    "queue_status",
]

RESERVED: Final = "Reserved"
"""The condition of a PodGroup while starvation protection holds nodes for it."""
CLOSED: Final = "Closed"
"""The condition a queue gets while the scheduler keeps it closed (its hierarchy is wrong)."""


# In ----------------------------------------------------------------------------------


def job_from_pod_group(pg: Obj, priority_classes: Mapping[str, int]) -> JobInfo:
    """The gang of a Sluice PodGroup."""
    meta = pg.get("metadata") or {}
    spec = pg.get("spec") or {}
    status = pg.get("status") or {}
    where = ref({"kind": "PodGroup", "metadata": meta})
    ns = str(meta.get("namespace", "default"))
    pc = str(spec.get("priorityClassName") or "")
    priority = class_priority(pc, priority_classes, where)
    tc = spec.get("topologyConstraint")
    topology = None
    if tc:
        topology = TopologyConstraint(
            str(tc.get("topology", "")),
            str(tc.get("requiredLevel") or ""),
            str(tc.get("preferredLevel") or ""),
        )
    try:
        phase = PodGroupPhase(status.get("phase", "Pending"))
    except ValueError:
        phase = PodGroupPhase.PENDING
    return JobInfo(
        uid=SLUICE.job_id(ns, str(meta["name"])),
        namespace=ns,
        name=str(meta["name"]),
        queue=str(spec.get("queue") or L.DEFAULT_QUEUE),
        min_member=int(spec.get("minMember", 1)),
        min_task_member={str(k): int(v) for k, v in (spec.get("minTaskMember") or {}).items()},
        min_resources=Resource.parse(
            spec.get("minResources"), obj=where, field="spec.minResources"
        ),
        priority=priority,
        priority_class=pc,
        creation=parse_time(meta.get("creationTimestamp")),
        phase=phase,
        has_pod_group=True,
        topology=topology,
        pod_group_uid=str(meta.get("uid") or ""),
        conditions=conditions_of(status),
    )


def queue_from_object(q: Obj) -> QueueInfo:
    """The queue of a Sluice Queue."""
    meta = q.get("metadata") or {}
    spec = q.get("spec") or {}
    where = ref({"kind": "Queue", "metadata": meta})

    def limits(name: str) -> dict[str, int] | None:
        raw = spec.get(name)
        return None if raw is None else parse_limits(raw, obj=where, field=f"spec.{name}")

    status = q.get("status") or {}
    return QueueInfo(
        name=str(meta["name"]),
        weight=int(spec.get("weight", 1)),
        capability=limits("capability"),
        deserved=limits("deserved"),
        guarantee=Resource.parse(spec.get("guarantee"), obj=where, field="spec.guarantee"),
        reclaimable=bool(spec.get("reclaimable", True)),
        priority=int(spec.get("priority", 0)),
        parent=str(spec.get("parent") or ""),
        state=str(status.get("state") or "Open"),
        uid=str(meta.get("uid") or ""),
        conditions=conditions_of(status),
    )


# Out ---------------------------------------------------------------------------------


def job_phase(job: JobInfo) -> PodGroupPhase:
    """The phase a PodGroup should show, from its tasks."""
    statuses = [t.status for t in job.tasks.values()]
    succeeded = statuses.count(TaskStatus.SUCCEEDED)
    if statuses and succeeded >= job.min_member and not any(s in UNFINISHED for s in statuses):
        return PodGroupPhase.COMPLETED
    placed = succeeded + sum(1 for s in statuses if s in HOLDS_ROOM)
    if placed >= job.min_member and placed > 0:
        return PodGroupPhase.RUNNING
    if job.phase in (PodGroupPhase.RUNNING, PodGroupPhase.INQUEUE):
        return PodGroupPhase.INQUEUE
    return job.phase


def pod_group_status(
    job: JobInfo,
    reason: str | None,
    now: str,
    previous: Mapping[str, Any],
    *,
    error: bool = False,
    placed_in: str = "",
    reserved: str = "",
) -> dict[str, Any]:
    """The ``status`` of ``job``'s PodGroup; transition times kept when nothing changed.
    ``error``: ``reason`` is a scheduler error (the condition's reason says SchedulerError).
    ``placed_in``: the node set the gang was placed in this cycle (``rack rb``); the
    ``Scheduled`` condition says so, and keeps saying so in later cycles. ``reserved``:
    while nodes are reserved for the job, what its ``Reserved`` condition says."""
    phase = job_phase(job)
    statuses = [t.status for t in job.tasks.values()]
    conditions: list[dict[str, str]] = []
    if phase in (PodGroupPhase.RUNNING, PodGroupPhase.COMPLETED):
        message = f"{job.min_member} or more pods are placed"
        if placed_in:
            message += f" in {placed_in}"
        else:
            seen = next(
                (c for c in previous.get("conditions") or () if c.get("type") == "Scheduled"), None
            )
            if seen and str(seen.get("message", "")).startswith(message):
                message = str(seen["message"])  # where the gang went, said when it was placed
        conditions.append(
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": message,
            }
        )
    elif reason:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": _unschedulable_reason(job, error),
                "message": reason,
            }
        )
    if reserved:
        conditions.append(
            {"type": RESERVED, "status": "True", "reason": "Starving", "message": reserved}
        )
    old = {c.get("type"): c for c in previous.get("conditions") or ()}
    for c in conditions:
        prev = old.get(c["type"])
        same = prev and all(prev.get(k) == c[k] for k in ("status", "reason", "message"))
        c["lastTransitionTime"] = str(prev.get("lastTransitionTime", now)) if same and prev else now
    return {
        "phase": phase.value,
        "running": statuses.count(TaskStatus.RUNNING),
        "succeeded": statuses.count(TaskStatus.SUCCEEDED),
        "failed": statuses.count(TaskStatus.FAILED),
        "conditions": conditions,
    }


def _unschedulable_reason(job: JobInfo, error: bool) -> str:
    """The ``reason`` of a waiting gang's ``Unschedulable`` condition: SchedulerError,
    SchedulingGated while every pod of it still to be placed is held by scheduling gates
    (the API server's word for such a pod), else Unschedulable."""
    if error:
        return L.REASON_SCHEDULER_ERROR
    return L.REASON_SCHEDULING_GATED if job.held_by_gates() else L.REASON_UNSCHEDULABLE


def queue_status(report: QueueReport) -> dict[str, Any]:
    """The ``status`` of a Sluice Queue: its state, what it holds (``allocated``: placed
    and not leaving, over the jobs it holds), what it deserves this cycle, its jobs by
    phase, and, while its place in the hierarchy is wrong, state Closed with a ``Closed``
    condition saying why. A queue the scheduler closed opens again once the hierarchy is
    fixed; a state set by someone else is kept."""
    total = ResourceSum()
    counts: Counter[PodGroupPhase] = Counter()
    for job in report.jobs:
        for t in job.tasks.values():
            if t.status in HOLDS_ROOM:
                total.add(t.request)
        counts[report.phases.get(job.uid) or job_phase(job)] += 1
    conditions: list[dict[str, str]] = []
    state = report.state
    if report.closed is not None:
        state = "Closed"
        conditions.append(
            {
                "type": CLOSED,
                "status": "True",
                "reason": "InvalidHierarchy",
                "message": f"queue {report.name!r} is closed: {report.closed}",
            }
        )
    elif any(c.get("type") == CLOSED for c in report.observed.get("conditions") or ()):
        state = "Open"  # closed by the scheduler, and now valid again
    share = report.share
    return {
        "state": state,
        "allocated": total.result().to_quantities(),
        "deserved": share.deserved.to_quantities() if share is not None else {},
        "pending": counts[PodGroupPhase.PENDING],
        "inqueue": counts[PodGroupPhase.INQUEUE],
        "running": counts[PodGroupPhase.RUNNING],
        "conditions": conditions,
    }


class SluiceGroups(GroupApiBase):
    """Sluice's own API (:data:`~scheduler.api.group_apis.SLUICE`)."""

    api: GroupApi = SLUICE

    def read_group(
        self, obj: Obj, priority_classes: Mapping[str, int], /
    ) -> Converted[JobInfo | None]:
        return Converted(job_from_pod_group(obj, priority_classes))

    def read_queue(self, obj: Obj, /) -> Converted[QueueInfo | None]:
        return Converted(queue_from_object(obj))

    def queue_of(self, obj: Obj, /) -> str:
        return spec_queue(obj)

    def group_status(self, report: GroupReport, /) -> GroupStatus:
        status = pod_group_status(
            report.job,
            report.message,
            report.now,
            report.observed,
            error=report.error,
            placed_in=report.placed_in,
            reserved=report.reserved,
        )
        return GroupStatus(status, PodGroupPhase(status["phase"]))

    def queue_status(self, report: QueueReport, /) -> dict[str, Any]:
        return queue_status(report)

    def shown_queue(self, obj: Obj, /) -> ShownQueue:
        spec = obj.get("spec") or {}
        guarantee = spec.get("guarantee")
        return ShownQueue(
            str(spec.get("parent") or ""),
            False,
            guarantee if isinstance(guarantee, Mapping) else None,
        )
