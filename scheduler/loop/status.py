"""What users see back after a cycle: pod conditions, events, PodGroup and Queue status.

Called by the loop at the end of each cycle with the closed session. Computes the status
each object should have, compares it with what was last written (or observed), and
submits only the changes to the API dispatcher (:mod:`scheduler.dispatch`): an unchanged
cluster costs no API call. Status never goes back in time: the dispatcher writes one
object's calls in order, a newer one taking the place of an older one still queued, and
a PodGroup's or Queue's status is written against the resourceVersion this cycle's view
had of it, so a write from an older view, or one arriving after a newer one, is refused
by the API server instead of landing (:class:`~scheduler.dispatch.ObjectStatusPatch`); a
refused write is forgotten, and the next cycle compares again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler.api import labels as L
from scheduler.api.group_apis import SLUICE
from scheduler.api.group_apis.protocol import GroupReport, LooseReport, QueueReport
from scheduler.api.group_apis.table import BY_QUEUE_KIND, of_job
from scheduler.api.holds import Reservation
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.dispatch import ApiDispatcher, ObjectStatusPatch, PodStatusPatch, Ticket
from scheduler.framework.effects import EffectLedger, SetPhase
from scheduler.framework.session import Session
from scheduler.loop.message_backoff import MessageBackoff
from scheduler.loop.quiet_wait import QuietWait
from scheduler.ports import Clock, Event, ObjectRef


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


WAITING = frozenset({TaskStatus.PENDING, TaskStatus.PIPELINED})
"""Pods not bound yet, whose reason users see: pending, or nominated to a node."""


def reserved_message(r: Reservation) -> str:
    """``reserved nodes n1, n2 for this job after waiting 12s``."""
    nodes = ", ".join(sorted(r.nodes))
    return (
        f"reserved nodes {nodes} for this job after waiting {r.reserved_at - r.waiting_since:.0f}s"
    )


def _state_of(queue: Mapping[str, Any]) -> str:
    """The state a Queue object's status says (Open when none)."""
    return str((queue.get("status") or {}).get("state") or "Open")


def with_removals(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` as a JSON merge patch over ``old``: keys of maps that ``old`` has and
    ``new`` has not are set to null, so they go (a merge patch otherwise keeps them)."""
    out: dict[str, Any] = dict(new)
    for key, value in old.items():
        if key not in new:
            out[key] = None
        elif isinstance(value, Mapping) and isinstance(new[key], Mapping):
            out[key] = with_removals(new[key], value)
    return out


def _comparable(status: Mapping[str, Any]) -> object:
    conds = tuple(
        sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()
        )
    )
    rest = tuple(sorted((k, repr(v)) for k, v in status.items() if k != "conditions"))
    return (conds, rest)


def _without_messages(key: object) -> object:
    """A :func:`_comparable` key with its conditions' messages left out."""
    assert isinstance(key, tuple)
    conds: tuple[tuple[object, ...], ...] = key[0]
    return (tuple(c[:3] for c in conds), key[1])


def _scheduled_false(message: str, now: str, *, error: bool) -> dict[str, Any]:
    """The pod status patch of ``PodScheduled=False`` with ``message`` (reason
    SchedulerError with ``error``, else Unschedulable)."""
    return {
        "conditions": [
            {
                "type": L.POD_SCHEDULED,
                "status": "False",
                "reason": L.REASON_SCHEDULER_ERROR if error else L.REASON_UNSCHEDULABLE,
                "message": message,
                "lastTransitionTime": now,
            }
        ]
    }


class StatusReporter:
    """Owned by the loop; one per scheduler. Not thread-safe (the loop's task only)."""

    def __init__(
        self,
        clock: Clock,
        cache: SchedulerCache,
        dispatcher: ApiDispatcher,
        on_failed_call: Callable[[str, Exception], None],
        *,
        grouper_grace: float = 0.0,
    ) -> None:
        self._clock = clock
        self._cache = cache
        self._ledger: EffectLedger = cache
        """Phases written are assumed through the ledger, as every effect is."""
        self._dispatcher = dispatcher
        self._on_failed = on_failed_call
        self._conditions = MessageBackoff()
        """What each pending pod's ``PodScheduled`` condition says, and when a changed
        reason may be written (:mod:`scheduler.loop.message_backoff`)."""
        self._event_backoff = MessageBackoff()
        """When each unschedulable pod's FailedScheduling event is due again."""
        self._grouper_wait = QuietWait(grouper_grace)
        """Pods waiting for the pod grouper, told only once they have waited the grace."""
        self.owed = 0
        """Pods whose changed reason waits for their backoff (after the last report): a
        telling still to come, so the loop is not idle (``SchedulingLoop.in_flight``)."""
        self._group_status: dict[str, object] = {}
        self._group_messages = MessageBackoff()
        """When a PodGroup whose conditions' text alone changed is written again."""
        self._queue_status: dict[str, object] = {}
        self.pending_by_queue: dict[str, int] = {}
        """Pending pods per queue after the last report (for the metric)."""

    def report(self, session: Session) -> None:
        now = rfc3339(self._clock.wall())
        phases: dict[str, PodGroupPhase] = {}
        self.owed = 0
        self._report_pods(session, now)
        self._report_groups(session, now, phases)
        if self._cache.basic_groups:
            self._report_basic_groups(session, now)
        self._report_queues(session, phases)

    def _report_pods(self, session: Session, now: str) -> None:
        """A FailedScheduling event for each unschedulable pod, and its ``PodScheduled=
        False`` condition: the first reason at once, a changed one, and a repeated event,
        after the pod's backoff (:mod:`scheduler.loop.message_backoff`)."""
        clock_now = self._clock.now()
        unschedulable: set[str] = set()
        waiting: set[str] = set()
        owed = 0
        for job in session.jobs.values():
            for task in job.tasks.values():
                if task.status not in WAITING or not task.sluice:
                    continue
                waiting.add(task.uid)
                if job.uid in session.deferred:
                    unschedulable.add(task.uid)  # not tried this cycle: its backoff holds
                    continue
                told = session.task_reasons.get(task.uid) or session.job_reasons.get(job.uid)
                if told is None or not told.message:
                    continue
                if self._grouper_wait.quiet(task, told, clock_now):
                    owed += 1  # told once the grace is over: the loop is not idle
                    continue
                msg = told.message
                unschedulable.add(task.uid)
                if self._event_backoff.due(task.uid, msg, clock_now, repeat=True):
                    event = Event(ObjectRef.of_pod(task), "Warning", "FailedScheduling", msg)
                    self._dispatcher.record(event)
                elif self._event_backoff.last(task.uid) != msg:
                    owed += 1
                if self._conditions.due(task.uid, msg, clock_now, repeat=False):
                    error = job.uid in session.failing_jobs
                    self._unschedulable(task, msg, now, error=error)
                elif self._conditions.last(task.uid) != msg:
                    owed += 1
        self._event_backoff.retain(unschedulable)
        self._conditions.retain(waiting)
        self._grouper_wait.retain(waiting)
        self.owed += owed

    async def bind_failed(self, task: TaskInfo, message: str) -> None:
        """A bind of ``task`` failed (a write of its claims, or its binding) and the pod is
        known not to be bound: say so in its ``PodScheduled`` condition (False, reason
        SchedulerError), as kube-scheduler's failure handler does. Awaited by the bind's
        task before the bind is forgotten, so no later bind of the pod lands before it;
        once per message (a later cycle that says the same does not write it again). A
        failed write is counted and logged, never raised."""
        if self._conditions.last(task.uid) == message:
            return
        self._conditions.told(task.uid, message, self._clock.now())
        now = rfc3339(self._clock.wall())
        try:
            await self._dispatcher.call(
                PodStatusPatch(ObjectRef.of_pod(task), _scheduled_false(message, now, error=True))
            )
        except Exception as exc:  # an ApiError: the next failure or cycle writes it again
            self._conditions.forget(task.uid)
            self._on_failed("patch", exc)

    def _unschedulable(self, task: TaskInfo, msg: str, now: str, *, error: bool) -> None:
        uid = task.uid

        def done(ticket: Ticket) -> None:
            if ticket.error is not None and not ticket.merged:  # written again next cycle
                self._conditions.forget(uid)
                self._on_failed("patch", ticket.error)

        call = PodStatusPatch(ObjectRef.of_pod(task), _scheduled_false(msg, now, error=error))
        self._dispatcher.submit(call, done)

    def _report_groups(self, session: Session, now: str, phases: dict[str, PodGroupPhase]) -> None:
        """Each PodGroup's status when it changed; a change of a condition's text alone
        (the reason of a gang that still cannot go) after the gang's backoff, as a pod's."""
        r = session.reservation if session.reservation and session.reservation.nodes else None
        clock_now = self._clock.now()
        for job in session.jobs.values():
            if not job.has_pod_group or job.problem or job.uid in session.deferred:
                continue  # a job deferred to the next cycle keeps the status it has
            observed = self._cache.pod_group_objects.get(job.uid, {}).get("status") or {}
            told = session.job_reasons.get(job.uid)
            report = GroupReport(
                job,
                told,
                now,
                observed,
                error=job.uid in session.failing_jobs,
                placed_in=session.placed_in.get(job.uid, ""),
                reserved=reserved_message(r) if r is not None and r.job == job.uid else "",
            )
            written = of_job(job.uid).group_status(report)
            status, phase = written.status, written.phase
            phases[job.uid] = phase
            key = _comparable(status)
            last = self._group_status.get(job.uid, _comparable(observed))
            if last == key:
                continue
            if _without_messages(last) != _without_messages(key):
                self._group_messages.told(job.uid, repr(key), clock_now)
            elif not self._group_messages.due(job.uid, repr(key), clock_now, repeat=False):
                self.owed += 1  # only a condition's text moved: after the gang's backoff
                continue
            self._group_status[job.uid] = key
            self._ledger.assume(SetPhase(job, phase))
            ref = ObjectRef.of_pod_group(job)
            version = _version(self._cache.pod_group_objects.get(job.uid))
            self._write(ref, status, self._group_status, job.uid, version)
            for e in written.events:
                self._dispatcher.record(Event(ref, e.type, e.reason, e.message))
        self._group_messages.retain(set(session.jobs))

    def _report_basic_groups(self, session: Session, now: str) -> None:
        """The status of each group whose pods are scheduled alone (a ``basic``
        ``scheduling.k8s.io`` PodGroup), its pods each a job of their own."""
        for job_id in sorted(self._cache.basic_groups):
            obj = self._cache.pod_group_objects.get(job_id) or {}
            observed = obj.get("status") or {}
            tasks: list[TaskInfo] = []
            reasons: dict[str, str] = {}
            error = False
            for uid in self._cache.group_members(job_id):
                cached = self._cache.tasks.get(uid)
                job = session.jobs.get(cached.job_id) if cached is not None else None
                task = job.tasks.get(uid) if job is not None else None
                if job is None or task is None:
                    continue
                if job.uid in session.deferred:
                    break  # a member deferred to the next cycle: the status waits for it
                tasks.append(task)
                told = session.task_reasons.get(uid) or session.job_reasons.get(job.uid)
                if told is not None and told.message:
                    reasons[uid] = told.message
                    error = error or job.uid in session.failing_jobs
            else:
                report = LooseReport(tasks, reasons, now, observed, error=error)
                status = of_job(job_id).loose_status(report)
                self._write_basic_group(obj, job_id, status, observed)

    def _write_basic_group(
        self, obj: Mapping[str, Any], job_id: str, status: dict[str, Any], observed: Any
    ) -> None:
        """Write the status of the ``basic`` PodGroup ``obj`` when it changed."""
        key = _comparable(status)
        if not status or self._group_status.get(job_id, _comparable(observed)) == key:
            return
        self._group_status[job_id] = key
        meta = obj.get("metadata") or {}
        api = of_job(job_id).api
        ref = ObjectRef(
            api.pod_group_kind,
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
            api.api_version,
        )
        self._write(ref, status, self._group_status, job_id, _version(obj))

    def _report_queues(self, session: Session, phases: dict[str, PodGroupPhase]) -> None:
        pending: dict[str, int] = dict.fromkeys(session.queues, 0)
        by_queue: dict[str, list[JobInfo]] = {}
        for job in session.jobs.values():
            if job.queue in pending:
                by_queue.setdefault(job.queue, []).append(job)
                pending[job.queue] += sum(
                    1 for t in job.tasks.values() if t.status is TaskStatus.PENDING and t.sluice
                )
        self.pending_by_queue = pending
        tree = session.queue_tree
        sources = self._cache.queue_sources
        for name in session.queues:
            for kind, obj in (sources.get(name) or {"Queue": {}}).items():
                report = QueueReport.of(
                    name,
                    tree,
                    state=_state_of(obj),
                    jobs=by_queue,
                    phases=phases,
                    observed=obj.get("status") or {},
                    share=session.queue_shares.get(name),
                )
                self._report_queue(kind, name, obj, report)
        held = [j for jobs in by_queue.values() for j in jobs]
        for name, objects in sources.items():
            for kind, obj in objects.items():
                if name not in session.queues and BY_QUEUE_KIND[kind].api.root_queue == name:
                    observed = obj.get("status") or {}
                    report = QueueReport(name, _state_of(obj), held, phases, observed)
                    self._report_queue(kind, name, obj, report)  # the root: every queue's

    def _report_queue(
        self, kind: str, name: str, obj: Mapping[str, Any], report: QueueReport
    ) -> None:
        """Write the status of Queue object ``obj`` (of kind key ``kind``) when it changed:
        every API's Queue of a name gets one, each in its API's shape."""
        if not self._cache.shards.writes_queue(obj):
            return  # another shard writes it (scheduler.api.shards)
        group_api = BY_QUEUE_KIND[kind]
        status = group_api.queue_status(report)
        key = _comparable(status)
        memo = f"{kind}/{name}"
        if self._queue_status.get(memo, _comparable(report.observed)) == key:
            return
        self._queue_status[memo] = key
        api = group_api.api
        meta = obj.get("metadata") or {}
        ref = ObjectRef(
            api.queue_kind,
            "",
            name,
            str(meta.get("uid") or ""),
            "" if api is SLUICE else api.api_version,
        )
        patch = with_removals(status, report.observed)
        self._write(ref, patch, self._queue_status, memo, _version(obj))

    def _write(
        self,
        ref: ObjectRef,
        status: dict[str, Any],
        memo: dict[str, object],
        key: str,
        version: str,
    ) -> None:
        """Write ``status`` of ``ref`` against ``version`` (the resourceVersion this
        cycle's view had of it); a write refused or lost is forgotten from ``memo``, so
        the next cycle compares again (and writes it again if it is still wanted)."""
        written = memo.get(key)

        def done(ticket: Ticket) -> None:
            if ticket.error is not None and not ticket.merged:
                if memo.get(key) == written:  # not a newer write's memo
                    memo.pop(key, None)
                self._on_failed("patch", ticket.error)

        self._dispatcher.submit(ObjectStatusPatch(ref, status, version), done)


def _version(obj: Mapping[str, Any] | None) -> str:
    """The resourceVersion of ``obj`` as the events showed it ("" when unknown)."""
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
