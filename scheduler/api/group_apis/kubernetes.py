"""The ``scheduling.k8s.io/v1alpha2`` PodGroup of Kubernetes v1.36, in and out (layer 0).

The alpha Workload API (feature gates ``GenericWorkload`` and ``GangScheduling``): a
controller (v1.36's Job controller with ``WorkloadWithJob``, JobSet, LeaderWorkerSet...)
makes a Workload with PodGroup templates, a PodGroup per replica copying its template's
policy, and pods naming it in ``spec.schedulingGroup.podGroupName``. kube-scheduler reads
only the PodGroup (its ``schedulingPolicy`` is a copy), and so does Sluice.

In: :func:`job_from_pod_group`. A ``gang`` policy is a gang of ``minCount``; a ``basic``
one is not a gang at all: its pods are scheduled alone (None), as kube-scheduler does.
``priority`` (or ``priorityClassName``) and ``schedulingConstraints.topology[].key`` (all
pods in one domain of that node label) are honoured when the API server keeps them (their
feature gates, ``WorkloadAwarePreemption`` and ``TopologyAwareWorkloadScheduling``, are
off in v1.36 by default, and the server then drops them). The queue is the PodGroup's label
``scheduling.sluice.dev/queue``, else ``default``.

Out: the ``PodGroupScheduled`` condition as kube-scheduler v1.36 writes it (read from a
real one): ``True``, reason ``Scheduled``, message "" once the group's pods are placed
(at least ``minCount`` of a gang; one pod of a basic group), after which it is never
changed (it records the first decision); ``False``, reason ``Unschedulable`` (or
``SchedulerError``; ``SchedulingGated`` while its pods still to be placed are all held by
scheduling gates) while a gang that has its members, or a basic group none of whose pods
could be placed, waits, with Sluice's reason as the message (kube-scheduler writes
``pod group is unschedulable``); nothing while a gang still lacks members (kube-scheduler
does not try it then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from scheduler.api import labels as L
from scheduler.api.core_objects import class_priority
from scheduler.api.group_apis import KUBERNETES, GroupApi
from scheduler.api.group_apis.base import GroupApiBase
from scheduler.api.group_apis.conditions import set_condition
from scheduler.api.group_apis.objects import (
    Converted,
    GroupObject,
    condition_message,
)
from scheduler.api.group_apis.protocol import (
    GroupReport,
    GroupStatus,
    LooseReport,
    Shown,
)
from scheduler.api.job import JobInfo, PodGroupPhase, TopologyConstraint
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTS_FOR_GANG

Obj = Mapping[str, Any]

__all__ = ["KubernetesGroups", "basic_status", "gang_status", "job_from_pod_group"]

SCHEDULED: Final = "PodGroupScheduled"
"""The condition kube-scheduler sets on a PodGroup."""


def job_from_pod_group(pg: Obj, priority_classes: Mapping[str, int]) -> Converted[JobInfo | None]:
    """The gang of a PodGroup of policy ``gang``; None for ``basic`` (its pods are
    scheduled alone). What is not honoured comes back as notes."""
    g = GroupObject.read(pg, KUBERNETES)
    spec, where = g.spec, g.where
    policy = spec.get("schedulingPolicy") or {}
    notes: list[str] = []
    if spec.get("disruptionMode") == "PodGroup":
        notes.append(
            f"{where}: spec.disruptionMode PodGroup is not honoured: Sluice evicts a gang's "
            "members above minCount alone, and every member once the gang goes below it"
        )
    if spec.get("resourceClaims"):
        notes.append(f"{where}: spec.resourceClaims are not honoured")
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        return Converted(None, tuple(notes))
    pc = str(spec.get("priorityClassName") or "")
    priority = spec.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        priority = class_priority(pc, priority_classes, where)
    keys = [
        str(t.get("key"))
        for t in (spec.get("schedulingConstraints") or {}).get("topology") or ()
        if isinstance(t, Mapping) and t.get("key")
    ]
    if len(keys) > 1:
        notes.append(f"{where}: only the first of spec.schedulingConstraints.topology is honoured")
    job = g.job(
        queue=g.labelled_queue,
        min_member=int(gang.get("minCount") or 0),
        priority=priority,
        priority_class=pc,
        phase=PodGroupPhase.INQUEUE,  # no admission step in this API
        topology=TopologyConstraint("", required_level=keys[0]) if keys else None,
    )
    return Converted(job, tuple(notes))


def _scheduled(previous: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == SCHEDULED and c.get("status") == "True"
        for c in previous.get("conditions") or ()
    )


def _with(
    previous: Mapping[str, Any],
    now: str,
    placed: bool,
    reason: str | None,
    error: bool,
    *,
    unplaced_reason: str = L.REASON_UNSCHEDULABLE,
) -> dict[str, Any]:
    """``previous`` with its PodGroupScheduled condition set by kube-scheduler's rule."""
    conditions = list(previous.get("conditions") or ())
    if _scheduled(previous):
        pass  # the first decision stands
    elif placed:
        conditions = set_condition(
            conditions,
            {"type": SCHEDULED, "status": "True", "reason": "Scheduled", "message": ""},
            now,
        )
    elif reason:
        conditions = set_condition(
            conditions,
            {
                "type": SCHEDULED,
                "status": "False",
                "reason": L.REASON_SCHEDULER_ERROR if error else unplaced_reason,
                "message": reason,
            },
            now,
        )
    return {"conditions": conditions} if conditions else {}


def gang_status(
    job: JobInfo, reason: str | None, now: str, previous: Mapping[str, Any], *, error: bool = False
) -> tuple[dict[str, Any], PodGroupPhase]:
    """The status of a gang's PodGroup, and the phase Sluice acts on (Running once it is
    placed, else Inqueue)."""
    placed = bool(job.tasks) and job.placed_count() >= job.min_member
    waiting = job.valid_count() < job.min_member  # kube-scheduler does not try it yet
    why = L.REASON_SCHEDULING_GATED if job.held_by_gates() else L.REASON_UNSCHEDULABLE
    status = _with(previous, now, placed, None if waiting else reason, error, unplaced_reason=why)
    return status, PodGroupPhase.RUNNING if placed else PodGroupPhase.INQUEUE


def basic_status(
    tasks: Iterable[TaskInfo],
    reasons: Mapping[str, str],
    now: str,
    previous: Mapping[str, Any],
    *,
    error: bool = False,
) -> dict[str, Any]:
    """The status of a basic PodGroup whose pods are ``tasks`` (each scheduled alone),
    ``reasons`` saying why those not placed wait (by task uid)."""
    members = list(tasks)
    placed = any(t.status in COUNTS_FOR_GANG for t in members)
    reason = next((reasons[t.uid] for t in members if t.uid in reasons), None)
    return _with(previous, now, placed, reason, error)


class KubernetesGroups(GroupApiBase):
    """The Workload API's PodGroup (:data:`~scheduler.api.group_apis.KUBERNETES`): no
    queues of its own, the queue is the PodGroup's label; a ``basic`` group's pods are
    scheduled alone."""

    api: GroupApi = KUBERNETES

    def read_group(
        self, obj: Obj, priority_classes: Mapping[str, int], /
    ) -> Converted[JobInfo | None]:
        return job_from_pod_group(obj, priority_classes)

    def group_status(self, report: GroupReport, /) -> GroupStatus:
        status, phase = gang_status(
            report.job,
            report.message,
            report.now,
            report.observed,
            error=report.error,
        )
        return GroupStatus(status, phase)

    def loose_status(self, report: LooseReport, /) -> dict[str, Any]:
        return basic_status(
            report.tasks, report.reasons, report.now, report.observed, error=report.error
        )

    def shown(self, obj: Obj, /) -> Shown:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        policy = spec.get("schedulingPolicy") or {}
        gang = policy.get("gang") if isinstance(policy, Mapping) else None
        minimum = int(gang.get("minCount") or 1) if isinstance(gang, Mapping) else 1
        phase = "Pending"  # no phase: its PodGroupScheduled condition
        for c in status.get("conditions") or ():
            if isinstance(c, Mapping) and c.get("type") == SCHEDULED:
                phase = "Scheduled" if c.get("status") == "True" else str(c.get("reason") or phase)
        return Shown(
            self.queue_of(obj), minimum, phase, condition_message(status, SCHEDULED, "False")
        )
