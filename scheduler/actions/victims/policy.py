"""Who may be a victim, and how candidates rank: what varies between evicting actions
(layer 2).

A :class:`VictimPolicy` parameterises the shared :class:`~.search.VictimSearch`.
:class:`LowerPriority` is the preempt action's: pods of strictly lower priority of other
jobs in the preemptor's queue (or of its own job), ranked in kube-scheduler's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from scheduler.actions.victims.candidates import Candidate, RankKey, kube_rank, kube_rank_bound
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.framework.session import Session


class VictimPolicy(Protocol):
    """What an evicting action tells the search. Every method is pure with respect to the
    session, which it may read; called by the search only."""

    @property
    def reason(self) -> str:
        """The reason of the Evict effects (``preempted``, ``reclaimed``)."""
        ...

    @property
    def nothing_helps(self) -> str:
        """The sentence added to a pod's reason when no node can be freed for it."""
        ...

    def possible(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        """The tasks on ``node`` that may be evicted for ``preemptor``, the plugins' victim
        filter applied."""
        ...

    def fits(self, session: Session, preemptor: TaskInfo, node: str) -> bool:
        """Would ``preemptor`` be placed on ``node`` now, counting the room being released
        as free, and its queue allow it?"""
        ...

    def rank(self, candidate: Candidate) -> RankKey:
        """Smaller is better."""
        ...

    def rank_bound(
        self,
        node: str,
        possible: Sequence[TaskInfo],
        room: Sequence[Sequence[int]],
        need: Sequence[int],
    ) -> RankKey | None:
        """A lower bound of :meth:`rank` of any candidate on ``node`` evicting among
        ``possible`` (what each frees: ``room``; what the node lacks: ``need``), or None
        when they cannot free ``need`` at all."""
        ...


class LowerPriority:
    """The preempt action's policy (KEP-4832, kube-scheduler's DefaultPreemption):
    victims have strictly lower priority than the preemptor and are in its queue (other
    jobs) or its own job; candidates rank as kube-scheduler ranks them."""

    reason = "preempted"
    nothing_helps = "preemption: no node has lower-priority pods whose eviction makes room."

    def possible(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        job = session.jobs.get(preemptor.job_id)
        queue = job.queue if job is not None else ""
        out = []
        for t in node.tasks.values():
            if t.status not in EVICTABLE or t.priority >= preemptor.priority or not t.sluice:
                continue
            owner = session.jobs.get(t.job_id)
            if owner is None or (owner.queue != queue and t.job_id != preemptor.job_id):
                continue
            out.append(t)
        return session.victims(preemptor, out)

    def fits(self, session: Session, preemptor: TaskInfo, node: str) -> bool:
        job = session.jobs[preemptor.job_id]
        return session.fits_on(preemptor, node, releasing=True) and session.queue_allocatable(
            session.queues[job.queue], preemptor
        )

    def rank(self, candidate: Candidate) -> RankKey:
        return kube_rank(candidate)

    def rank_bound(
        self,
        node: str,
        possible: Sequence[TaskInfo],
        room: Sequence[Sequence[int]],
        need: Sequence[int],
    ) -> RankKey | None:
        return kube_rank_bound(node, possible, room, need)
