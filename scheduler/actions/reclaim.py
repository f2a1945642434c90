"""The ``reclaim`` action (layer 2): queues below their share take back room from queues
above theirs.

For each starving job (its gang not pipelined, tasks waiting) of a queue below its
deserved share, queues in the order of their share (the most starved first; of queues
equally starved, the one lacking more first: the queue order) and jobs in job order, the
shared victim search (:class:`~scheduler.actions.victims.VictimSearch`
with the :class:`~scheduler.actions.victims.QueueReclaim` policy) nominates each pending
task to a node, evicting there pods of other queues that hold more than their share, as
far as the plugins' reclaim budgets allow. Across queues priority does not decide; among
the victims, lower priority goes first. A job's evictions are committed only if the whole
gang is then pipelined. The executor runs the calls as for a preemption (gate,
nominations, ``DisruptionTarget``, events, metrics, the feature gate).

A victim's queue stays at or above its share, or, when its pods are too coarse for
that, at a share (allocated / deserved) still above the reclaiming queue's share before
the eviction, both in the resources the eviction frees that the reclaiming pod asks for
(max-min fairness, the plugins' reclaim budgets: ``proportion``), so a queue at zero gets
in. No ping-pong: victims come only from queues above their share, and the
reclaiming queue never goes above its own, so it is never a victim of the queue it took
from; and the lowest share strictly rises with each reclaim.

That holds while demand stands still. Deserved shares follow demand (pending pods count),
so two queues near their shares trade places as pods arrive and leave, and a job can be
taken back by the job it gave to seconds later. ``minRuntimeSeconds`` (KAI's reclaim
min-runtime) is the hysteresis: a job that started less than that ago is no victim, and
a job held back only by that is tried again when the first victim comes of age.
"""

from __future__ import annotations

from scheduler.actions.common import eligible, waiting_tasks
from scheduler.actions.evictions import make_room_for_job
from scheduler.actions.victims import QueueReclaim, ReclaimArguments, VictimSearch
from scheduler.actions.victims.gang_search import GangSearch
from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueShare
from scheduler.api.task import TaskStatus
from scheduler.framework.session import Session
from scheduler.logging import get_logger, v

log = get_logger("sluice.reclaim")

NOTHING_TO_RECLAIM = QueueReclaim.nothing_helps


class ReclaimAction:
    name = "reclaim"

    def __init__(self, arguments: ReclaimArguments) -> None:
        self.args = arguments
        policy = QueueReclaim(arguments.minRuntimeSeconds)
        self.search = VictimSearch(arguments, policy)
        self.gang_search = GangSearch(policy, arguments.roiThreshold)

    def execute(self, session: Session) -> None:
        """Reclaim for the starving jobs in order. Out of time, the action keeps its place
        (``for_each_job(keep_place=True)``): the next slice of the cycle goes on with
        the jobs left, after the evictions decided so far are handed on."""
        left = session.resume(self.name)
        if isinstance(left, list):
            session.for_each_job(left, self._reclaim_for, keep_place=True)
            return
        if not self._any_queue_above_share(session):
            return  # nothing to take back from anyone: no search, no reason added
        jobs = session.select_jobs(session.jobs_to_place, lambda job: self._wants(session, job))
        by_queue: dict[str, list[JobInfo]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append(job)
        queues = sorted(by_queue, key=lambda q: session.queue_key(session.queues[q]))
        ordered = [job for q in queues for job in session.order_jobs(by_queue[q])]
        session.for_each_job(ordered, self._reclaim_for, keep_place=True)

    @classmethod
    def _wants(cls, session: Session, job: JobInfo) -> bool:
        """Does ``job`` need room its queue may reclaim (asked inside its boundary)?"""
        tasks = waiting_tasks(job)
        return (
            any(t.status is TaskStatus.PENDING for t in tasks)
            and not all(t.spec.best_effort for t in tasks)
            and session.job_starving(job)
            and cls._below_share(session, job)
            and eligible(session, job)
        )

    @staticmethod
    def _any_queue_above_share(session: Session) -> bool:
        return any(share.share > 1.0 for share in session.each_queue_share().values())

    @staticmethod
    def _below_share(session: Session, job: JobInfo) -> bool:
        """May ``job``'s queue reclaim for one of its pending pods: is it below its share
        in a contended resource that pod asks for (``QUEUE_RECLAIMS``)? The pod may be
        larger than what is left of the share (a 4-GPU pod of a queue that deserves 2.67
        GPUs). A queue above its share in CPU may still be below it in GPUs, for a pod
        that asks GPUs."""
        queue = session.queues.get(job.queue)
        if queue is None or session.queue_share(queue) is None:
            return False
        return any(
            session.queue_reclaims(queue, t)
            for t in job.pending_tasks()
            if t.preemption_policy != "Never"
        )

    def _reclaim_for(self, session: Session, job: JobInfo) -> None:
        if not self._below_share(session, job):
            return  # reclaims for jobs before it brought the queue to its share
        before = session.each_queue_share() if v(2) else None
        make_room_for_job(
            session, job, self.search, self.gang_search, max_domains=self.args.maxDomains
        )
        if before is not None:
            _log_reclaim(session, job, before, session.each_queue_share())


def _log_reclaim(
    session: Session, job: JobInfo, before: dict[str, QueueShare], after: dict[str, QueueShare]
) -> None:
    """At ``-v 2``, a reclaim that took room for ``job``: the shares (allocated / deserved)
    before and after of each queue whose allocation it changed, the reclaiming queue
    first, so that an operator (or the soak) can see why each queue gave or took."""
    mine = {job.queue}
    up = session.queues.get(job.queue)
    while up is not None and up.parent and up.parent not in mine:
        mine.add(up.parent)
        up = session.queues.get(up.parent)
    moved = {
        q: (round(b.share, 3), round(after[q].share, 3))
        for q, b in before.items()
        if q in after and b.allocated != after[q].allocated
    }
    gave = sorted(q for q in moved if q not in mine)
    if not gave:
        return  # no other queue gave anything: an allocation in free room, or nothing
    log.info(
        "reclaim decided",
        v=2,
        job=job.uid,
        queue=job.queue,
        shares={q: moved[q] for q in [job.queue, *gave] if q in moved},
        deserved={q: after[q].deserved.to_dict() for q in [job.queue, *gave] if q in after},
    )
