"""What users see back after a cycle: pod conditions, events, PodGroup and Queue status.

Called by the loop at the end of each cycle with the closed session. Computes the status
each object should have, compares it with what was last written (or observed), and
submits only the changes to a background pool: an unchanged cluster costs no API call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler.api import labels as L
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import ResourceSum
from scheduler.api.task import OCCUPYING, TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.framework.session import Session
from scheduler.loop.event_backoff import EventBackoff
from scheduler.loop.workers import WorkerPool
from scheduler.ports import ClusterPorts, Event, ObjectRef

_HOLDING = OCCUPYING - {TaskStatus.RELEASING}
_COMPLETE_BLOCKERS = frozenset({TaskStatus.PENDING, TaskStatus.PIPELINED}) | OCCUPYING


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_phase(job: JobInfo) -> PodGroupPhase:
    """The phase a PodGroup should show, from its tasks."""
    statuses = [t.status for t in job.tasks.values()]
    succeeded = statuses.count(TaskStatus.SUCCEEDED)
    if (
        statuses
        and succeeded >= job.min_member
        and not any(s in _COMPLETE_BLOCKERS for s in statuses)
    ):
        return PodGroupPhase.COMPLETED
    placed = succeeded + sum(
        1 for s in statuses if s in OCCUPYING and s is not TaskStatus.RELEASING
    )
    if placed >= job.min_member and placed > 0:
        return PodGroupPhase.RUNNING
    if job.phase in (PodGroupPhase.RUNNING, PodGroupPhase.INQUEUE):
        return PodGroupPhase.INQUEUE
    return job.phase


def pod_group_status(
    job: JobInfo, reason: str | None, now: str, previous: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``status`` of ``job``'s PodGroup; transition times kept when nothing changed."""
    phase = job_phase(job)
    statuses = [t.status for t in job.tasks.values()]
    conditions: list[dict[str, str]] = []
    if phase in (PodGroupPhase.RUNNING, PodGroupPhase.COMPLETED):
        conditions.append(
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": f"{job.min_member} or more pods are placed",
            }
        )
    elif reason:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": L.REASON_UNSCHEDULABLE,
                "message": reason,
            }
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


def queue_status(
    name: str, jobs: list[JobInfo], state: str, phases: dict[str, PodGroupPhase]
) -> dict[str, Any]:
    """The ``status`` of queue ``name``; ``phases`` are the jobs' phases this cycle."""
    del name
    total = ResourceSum()
    counts = {PodGroupPhase.PENDING: 0, PodGroupPhase.INQUEUE: 0, PodGroupPhase.RUNNING: 0}
    for job in jobs:
        for t in job.tasks.values():
            if t.status in _HOLDING:
                total.add(t.request)
        phase = phases.get(job.uid) or job_phase(job)
        if phase in counts:
            counts[phase] += 1
    allocated = total.result()
    return {
        "state": state,
        "allocated": allocated.to_quantities(),
        "pending": counts[PodGroupPhase.PENDING],
        "inqueue": counts[PodGroupPhase.INQUEUE],
        "running": counts[PodGroupPhase.RUNNING],
    }


def _comparable(status: Mapping[str, Any]) -> object:
    conds = tuple(
        sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()
        )
    )
    rest = tuple(sorted((k, repr(v)) for k, v in status.items() if k != "conditions"))
    return (conds, rest)


class StatusReporter:
    """Owned by the loop; one per scheduler. Not thread-safe (the loop's task only)."""

    def __init__(
        self,
        ports: ClusterPorts,
        cache: SchedulerCache,
        pool: WorkerPool,
        on_failed_call: Callable[[str, Exception], None],
    ) -> None:
        self._ports = ports
        self._cache = cache
        self._pool = pool
        self._on_failed = on_failed_call
        self._pod_messages: dict[str, str] = {}
        self._event_backoff = EventBackoff()
        """When each unschedulable pod's FailedScheduling event is due again."""
        self._group_status: dict[str, object] = {}
        self._queue_status: dict[str, object] = {}
        self.pending_by_queue: dict[str, int] = {}
        """Pending pods per queue after the last report (for the metric)."""

    def report(self, session: Session) -> None:
        now = rfc3339(self._ports.clock.wall())
        phases: dict[str, PodGroupPhase] = {}
        self._report_pods(session, now)
        self._report_groups(session, now, phases)
        self._report_queues(session, phases)

    def _report_pods(self, session: Session, now: str) -> None:
        """A FailedScheduling event for each unschedulable pod, again after its backoff
        (:class:`EventBackoff`); its ``PodScheduled=False`` condition when the message
        changes."""
        clock_now = self._ports.clock.now()
        unschedulable: set[str] = set()
        for job in session.jobs.values():
            for task in job.tasks.values():
                if task.status is not TaskStatus.PENDING or not task.sluice:
                    self._pod_messages.pop(task.uid, None)
                    continue
                msg = session.task_reasons.get(task.uid) or session.job_reasons.get(job.uid)
                if not msg:
                    continue
                unschedulable.add(task.uid)
                if self._event_backoff.due(task.uid, msg, clock_now):
                    ref = ObjectRef("Pod", task.namespace, task.name, task.uid)
                    self._ports.events.record(Event(ref, "Warning", "FailedScheduling", msg))
                if self._pod_messages.get(task.uid) == msg:
                    continue
                self._pod_messages[task.uid] = msg
                self._unschedulable(task, msg, now)
        self._event_backoff.retain(unschedulable)

    def _unschedulable(self, task: TaskInfo, msg: str, now: str) -> None:
        ref = ObjectRef("Pod", task.namespace, task.name, task.uid)
        patch = {
            "conditions": [
                {
                    "type": L.POD_SCHEDULED,
                    "status": "False",
                    "reason": L.REASON_UNSCHEDULABLE,
                    "message": msg,
                    "lastTransitionTime": now,
                }
            ]
        }

        async def call() -> None:
            try:
                await self._ports.status.patch_pod_status(ref, patch)
            except Exception as exc:  # an ApiError: the next change rewrites it
                self._pod_messages.pop(task.uid, None)
                self._on_failed("patch", exc)

        self._pool.submit(f"status {ref.key}", call)

    def _report_groups(self, session: Session, now: str, phases: dict[str, PodGroupPhase]) -> None:
        for job in session.jobs.values():
            if not job.has_pod_group or job.problem:
                continue
            observed = self._cache.pod_group_objects.get(job.uid, {}).get("status") or {}
            status = pod_group_status(job, session.job_reasons.get(job.uid), now, observed)
            phases[job.uid] = PodGroupPhase(status["phase"])
            key = _comparable(status)
            if self._group_status.get(job.uid, _comparable(observed)) == key:
                continue
            self._group_status[job.uid] = key
            self._cache.assume_phase(job.uid, PodGroupPhase(status["phase"]))
            self._write(
                ObjectRef("PodGroup", job.namespace, job.name, job.pod_group_uid),
                status,
                self._group_status,
                job.uid,
            )

    def _report_queues(self, session: Session, phases: dict[str, PodGroupPhase]) -> None:
        by_queue: dict[str, list[JobInfo]] = {name: [] for name in session.queues}
        pending: dict[str, int] = dict.fromkeys(session.queues, 0)
        for job in session.jobs.values():
            if job.queue in by_queue:
                by_queue[job.queue].append(job)
                pending[job.queue] += sum(
                    1 for t in job.tasks.values() if t.status is TaskStatus.PENDING and t.sluice
                )
        self.pending_by_queue = pending
        for name, jobs in by_queue.items():
            queue = session.queues[name]
            status = queue_status(name, jobs, queue.state, phases)
            key = _comparable(status)
            if self._queue_status.get(name) == key:
                continue
            self._queue_status[name] = key
            self._write(ObjectRef("Queue", "", name, queue.uid), status, self._queue_status, name)

    def _write(
        self, ref: ObjectRef, status: dict[str, Any], memo: dict[str, object], key: str
    ) -> None:
        async def call() -> None:
            try:
                await self._ports.status.patch_status(ref, status)
            except Exception as exc:  # an ApiError: forget, so the next cycle retries
                memo.pop(key, None)
                self._on_failed("patch", exc)

        self._pool.submit(f"status {ref.kind} {ref.key}", call)
