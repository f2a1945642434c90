"""Starvation protection's state between cycles (layer 3, loop).

The ``elect`` and ``reserve`` actions decide on the session's
:class:`~scheduler.api.holds.Reservation` (the starving job elected, the nodes held for
it); the session is gone after the cycle, so what it left is kept here for the next
snapshot, with how long each job has waited to start (``waiting_since``: a PodGroup since
it was first seen Inqueue with pods pending, a lone pod since it was first seen pending;
forgotten once the job has started or is gone) and which waiting jobs were *overtaken*:
passed by a job of no higher priority that came later and was placed while they waited.
Only those can be starving: a job first in line takes the next room that frees anyway.

It also makes the reservation visible: an event on the target when nodes are reserved
for it (``reserved nodes n1, n2 for this job after waiting 12s``) and when they are
released (and why), and ``scheduler_reserved_nodes``. The PodGroup's ``Reserved``
condition is written with its status (:mod:`~scheduler.loop.status`). Owned by the
scheduling queue (:mod:`scheduler.loop.queue`), which publishes the reservation, the
waiting times and the overtaken jobs in its view; the loop's task only, once per cycle
that ran to its end.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from scheduler.actions.starving_jobs import started
from scheduler.api.holds import Reservation
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskStatus
from scheduler.framework.effects import Bind
from scheduler.framework.session import Session
from scheduler.logging import get_logger
from scheduler.loop.status import reserved_message
from scheduler.metrics import Metrics
from scheduler.ports import Event, EventRecorder, ObjectRef

log = get_logger("sluice.reservations")


@dataclass(frozen=True, slots=True)
class ReservationChange:
    """What a cycle changed: ``kind`` is ``reserve`` (nodes picked or moved) or
    ``release``; ``job`` the target; ``nodes`` those reserved (or released); ``why`` the
    reason of a release."""

    kind: str
    job: str
    nodes: tuple[str, ...]
    why: str = ""


class ReservationKeeper:
    def __init__(self, events: EventRecorder, metrics: Metrics) -> None:
        self._events = events
        self._metrics = metrics
        self.reservation: Reservation | None = None
        self.waiting_since: dict[str, float] = {}
        self.overtaken: set[str] = set()
        """Waiting jobs a later job of no higher priority has passed."""
        self._target_ref: ObjectRef | None = None
        """Where the target's events go (kept: the job may be gone when it is released)."""

    def after_cycle(self, session: Session, now: float) -> list[ReservationChange]:
        """Take what ``session`` decided (it must have run to its end), note the waiting
        times, and say what changed."""
        self._note_waiting(session, now)
        before, after = self.reservation, session.reservation
        self.reservation = after
        changes: list[ReservationChange] = []
        if before is not None and (after is None or after.job != before.job):
            why = session.starvation.released or "another job was elected"
            if before.nodes:
                changes.append(
                    ReservationChange("release", before.job, tuple(sorted(before.nodes)), why)
                )
                self._record("ReservationReleased", f"reserved nodes released: {why}")
            self._target_ref = None
        if after is not None:
            job = session.jobs.get(after.job)
            if job is not None:
                self._target_ref = _ref(job)
            moved = before is None or before.job != after.job or before.nodes != after.nodes
            if after.nodes and moved:
                changes.append(ReservationChange("reserve", after.job, tuple(sorted(after.nodes))))
                self._record("Reserved", reserved_message(after))
                log.info("nodes reserved", job=after.job, nodes=sorted(after.nodes))
        self._metrics.reserved_nodes.set(len(after.nodes) if after is not None else 0)
        return changes

    def _record(self, reason: str, message: str) -> None:
        if self._target_ref is not None:
            self._events.record(Event(self._target_ref, "Normal", reason, message))

    def _note_waiting(self, session: Session, now: float) -> None:
        """Note since when each job waits, and which waiting jobs were passed this cycle
        by a job of no higher priority that came later (placed: bound this cycle); a job
        an action deferred to the next cycle was not tried, so not passed."""
        waiting: dict[str, float] = {}
        for job in session.jobs_to_place:
            if _waits(job):
                waiting[job.uid] = self.waiting_since.get(job.uid, now)
        placed: dict[str, tuple[int, float]] = {}
        for effect in session.effects:
            if isinstance(effect, Bind):
                uid = effect.task.job_id
                if uid not in placed:
                    since = self.waiting_since.get(uid, now)
                    placed[uid] = (effect.task.priority, since)
        overtaken = {uid for uid in self.overtaken if uid in waiting}
        if placed:
            # For each priority, the latest arrival placed at that priority or below.
            ordered = sorted(placed.values())
            priorities = [p for p, _ in ordered]
            latest: list[float] = []
            for _, since in ordered:
                latest.append(max(since, latest[-1]) if latest else since)
            for uid, since in waiting.items():
                if uid in overtaken or uid in session.deferred:
                    continue  # a job deferred to the next cycle was not passed: not tried
                job = session.jobs[uid]
                i = bisect.bisect_right(priorities, job.priority)
                if i and latest[i - 1] > since:
                    overtaken.add(uid)
        self.waiting_since = waiting
        self.overtaken = overtaken


def _waits(job: JobInfo) -> bool:
    """Is ``job`` waiting to start (Inqueue, or a lone pod, with pods of ours pending)?"""
    if job.has_pod_group and job.phase is not PodGroupPhase.INQUEUE:
        return False
    if started(job):
        return False
    return any(t.sluice and t.status is TaskStatus.PENDING for t in job.tasks.values())


def _ref(job: JobInfo) -> ObjectRef:
    if job.has_pod_group:
        return ObjectRef.of_pod_group(job)
    task = next(iter(job.tasks.values()))
    return ObjectRef.of_pod(task)
