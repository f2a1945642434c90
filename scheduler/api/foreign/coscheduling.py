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

from scheduler.api import labels as L
from scheduler.api.convert import conditions_of, parse_time, ref
from scheduler.api.foreign import Converted
from scheduler.api.group_apis import SCHEDULER_PLUGINS
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus

Obj = Mapping[str, Any]

__all__ = ["domain_phase", "job_from_pod_group", "pod_group_status"]

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
    meta = pg.get("metadata") or {}
    spec = pg.get("spec") or {}
    status = pg.get("status") or {}
    where = ref({"kind": "PodGroup", "metadata": meta}) + f" ({SCHEDULER_PLUGINS.api_version})"
    ns = str(meta.get("namespace", "default"))
    name = str(meta["name"])
    job = JobInfo(
        uid=SCHEDULER_PLUGINS.job_id(ns, name),
        namespace=ns,
        name=name,
        queue=str((meta.get("labels") or {}).get(L.QUEUE_LABEL) or L.DEFAULT_QUEUE),
        min_member=int(spec.get("minMember") or 0),
        min_resources=Resource.parse(
            spec.get("minResources"), obj=where, field="spec.minResources"
        ),
        creation=parse_time(meta.get("creationTimestamp")),
        phase=domain_phase(str(status.get("phase") or "")),
        has_pod_group=True,
        pod_group_uid=str(meta.get("uid") or ""),
        conditions=conditions_of(status),
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
