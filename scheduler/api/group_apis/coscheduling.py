"""scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroup, in and out (layer 0).

The coscheduling plugin of kubernetes-sigs/scheduler-plugins gangs the pods labelled
``scheduling.x-k8s.io/pod-group: NAME``. In: :func:`job_from_pod_group` (``minMember``;
``minResources``, which the plugin checks against the cluster's free room before trying a
gang, as Sluice's enqueue does; the queue from the PodGroup's label
``scheduling.sluice.dev/queue``, the API having none). ``scheduleTimeoutSeconds`` bounds
how long the plugin lets the first members wait at Permit for the rest; Sluice places a
gang whole or not at all and holds nothing while it waits, so there is nothing to time
out: the field is accepted and has no effect.

Out: :func:`pod_group_status`, the status the project's PodGroup controller writes
(``pkg/controllers/podgroup_controller.go``): ``phase`` Pending while fewer pods than
``minMember`` exist, Scheduling once they do, Running once ``minMember`` of them run or
have succeeded, Finished once ``minMember`` have succeeded, Failed once one has failed and
the rest run or succeeded; the counts of running, succeeded and failed pods;
``scheduleStartTime`` when it first leaves Pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scheduler.api.group_apis import SCHEDULER_PLUGINS, GroupApi
from scheduler.api.group_apis.base import GroupApiBase
from scheduler.api.group_apis.objects import (
    Converted,
    GroupObject,
)
from scheduler.api.group_apis.protocol import (
    GroupReport,
    GroupStatus,
)
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus

Obj = Mapping[str, Any]

__all__ = ["SchedulerPluginsGroups", "domain_phase", "job_from_pod_group", "pod_group_status"]

PENDING: Final = "Pending"
SCHEDULING: Final = "Scheduling"
RUNNING: Final = "Running"
FINISHED: Final = "Finished"
FAILED: Final = "Failed"

_DOMAIN: Final[Mapping[str, PodGroupPhase]] = {
    SCHEDULING: PodGroupPhase.INQUEUE,
    RUNNING: PodGroupPhase.RUNNING,
    FINISHED: PodGroupPhase.COMPLETED,
    FAILED: PodGroupPhase.COMPLETED,
}


def domain_phase(phase: str, admitted: PodGroupPhase = PodGroupPhase.PENDING) -> PodGroupPhase:
    """The phase Sluice acts on for a PodGroup whose status says ``phase``: Pending (or
    none, or Unknown) is ``admitted`` (Pending until enqueue admits it), Scheduling is
    Inqueue, Running is Running, Finished and Failed are Completed."""
    return _DOMAIN.get(phase, admitted)


def job_from_pod_group(pg: Obj, priority_classes: Mapping[str, int]) -> Converted[JobInfo]:
    """The gang of a scheduler-plugins PodGroup (its priority is its pods' highest, as
    the plugin orders by pod priority)."""
    del priority_classes
    g = GroupObject.read(pg, SCHEDULER_PLUGINS)
    job = g.job(
        queue=g.labelled_queue,
        min_member=int(g.spec.get("minMember") or 0),
        min_resources=Resource.parse(
            g.spec.get("minResources"), obj=g.where, field="spec.minResources"
        ),
        phase=domain_phase(str(g.status.get("phase") or "")),
    )
    return Converted(job)


def pod_group_status(
    job: JobInfo, now: str, previous: Mapping[str, Any]
) -> tuple[dict[str, Any], PodGroupPhase]:
    """The ``status`` the scheduler-plugins controller writes for ``job``'s PodGroup, and
    the phase Sluice acts on from now (:func:`domain_phase`)."""
    statuses = [t.status for t in job.tasks.values()]
    running = statuses.count(TaskStatus.RUNNING)
    succeeded = statuses.count(TaskStatus.SUCCEEDED)
    failed = statuses.count(TaskStatus.FAILED)
    old = str(previous.get("phase") or "")
    if old in (FINISHED, FAILED):
        phase = old
    elif not statuses or len(statuses) < job.min_member:
        phase = PENDING
    elif failed and failed + running + succeeded >= job.min_member:
        phase = FAILED
    elif succeeded >= job.min_member:
        phase = FINISHED
    elif running + succeeded >= job.min_member:
        phase = RUNNING
    else:
        phase = SCHEDULING
    out: dict[str, Any] = {
        "phase": phase,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    start = previous.get("scheduleStartTime")
    if start or phase != PENDING:
        out["scheduleStartTime"] = start or now
    return out, domain_phase(phase, job.phase)


class SchedulerPluginsGroups(GroupApiBase):
    """scheduler-plugins' API (:data:`~scheduler.api.group_apis.SCHEDULER_PLUGINS`): no
    queues of its own, the queue is the PodGroup's label."""

    api: GroupApi = SCHEDULER_PLUGINS

    def read_group(
        self, obj: Obj, priority_classes: Mapping[str, int], /
    ) -> Converted[JobInfo | None]:
        return job_from_pod_group(obj, priority_classes)

    def group_status(self, report: GroupReport, /) -> GroupStatus:
        status, phase = pod_group_status(report.job, report.now, report.observed)
        return GroupStatus(status, phase)
