"""The ``preempt`` action (layer 2): room for starving gangs from lower-priority pods.

For each starving job (its gang not pipelined, tasks waiting), most important first, and
each pending task of it (unless ``preemptionPolicy: Never``), the shared victim search
(:class:`~scheduler.actions.victims.VictimSearch`, with the
:class:`~scheduler.actions.victims.LowerPriority` policy) nominates the task to a node,
evicting lower-priority pods of its queue there if it must. A job's evictions and
nominations are committed only if the whole gang is then pipelined; otherwise everything
tried is rolled back, so evictions happen only where a preemption succeeds.

Before that, nominations that went stale are withdrawn (:meth:`_withdraw_stale`), and a
job whose last preemption failed waits for its backoff to end (it is still scheduled
normally meanwhile).
"""

from __future__ import annotations

from scheduler.actions.common import eligible, waiting_tasks
from scheduler.actions.evictions import make_room_for_job
from scheduler.actions.victims import LowerPriority, SearchArguments, VictimSearch
from scheduler.actions.victims.gang_search import GangSearch
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.session import Session

NO_VICTIMS = LowerPriority.nothing_helps
"""Appended to the reason of a pod (and of its PodGroup) that preemption cannot help."""

PreemptArguments = SearchArguments
"""Arguments of the ``preempt`` action (``actionArguments.preempt``): the candidate window
and ``maxDomains``. ``roiThreshold`` is reclaim's and refused here: preemption takes the
victims of lowest priority first, ROI only breaks ties."""


__all__ = ["NO_VICTIMS", "PreemptAction", "PreemptArguments"]


class PreemptAction:
    name = "preempt"

    def __init__(self, arguments: SearchArguments) -> None:
        self.args = arguments
        policy = LowerPriority()
        self.search = VictimSearch(arguments, policy)
        self.gang_search = GangSearch(policy)

    def execute(self, session: Session) -> None:
        """Preempt for the starving jobs in order. Out of time, the action keeps its
        place (``for_each_job(keep_place=True)``): the next slice of the cycle goes on
        with the jobs left, after the evictions decided so far are handed on."""
        left = session.resume(self.name)
        if isinstance(left, list):
            session.for_each_job(left, self._preempt_for, keep_place=True)
            return
        self._withdraw_stale(session)
        jobs = session.select_jobs(session.jobs_to_place, lambda job: self._wants(session, job))
        session.for_each_job(session.order_jobs(jobs), self._preempt_for, keep_place=True)

    @classmethod
    def _wants(cls, session: Session, job: JobInfo) -> bool:
        """Does ``job`` need room it may preempt for (asked inside its boundary)?"""
        tasks = waiting_tasks(job)
        return (
            any(t.status is TaskStatus.PENDING for t in tasks)
            and not cls._backfills(session, tasks)
            and session.job_starving(job)
            and eligible(session, job)
        )

    @staticmethod
    def _backfills(session: Session, tasks: list[TaskInfo]) -> bool:
        """Are ``tasks`` all best-effort (they ask for nothing but a pod slot) with a node
        that takes the first pending one now? Then they are backfill's; a best-effort pod
        no node has a slot for may preempt one (Volcano issue 3335)."""
        if not all(t.spec.best_effort for t in tasks):
            return False
        first = next(t for t in tasks if t.status is TaskStatus.PENDING)
        return session.fit(first).any

    def _preempt_for(self, session: Session, job: JobInfo) -> None:
        make_room_for_job(
            session, job, self.search, self.gang_search, max_domains=self.args.maxDomains
        )

    def _withdraw_stale(self, session: Session) -> None:
        """A nominated task whose node can no longer take it, even once the victims are
        gone (a higher-priority pod took the room), is pending again and may preempt; and
        a gang that is not pipelined (for that reason, or because a higher preemption
        cleared a member's nomination) gives up the nominations of all its members, so
        they hold no room for a gang that cannot start."""
        jobs = [
            job
            for job in session.jobs_to_place
            if not session.is_gated(job)
            and any(t.status is TaskStatus.PIPELINED for t in job.tasks.values())
        ]
        session.for_each_job(jobs, self._withdraw_stale_of)

    @staticmethod
    def _withdraw_stale_of(session: Session, job: JobInfo) -> None:
        with session.statement() as stmt:
            nominated = [t for t in job.tasks.values() if t.status is TaskStatus.PIPELINED]
            for t in nominated:
                if not session.fits_on(t, t.node_name, releasing=True):
                    stmt.unpipeline(t)
            if not session.job_pipelined(job) and not session.job_ready(job):
                for t in nominated:
                    if t.status is TaskStatus.PIPELINED:
                        stmt.unpipeline(t)
            if stmt.operations:
                stmt.commit()
