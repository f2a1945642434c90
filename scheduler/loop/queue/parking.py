"""Parking: unschedulable jobs are not searched again until something that could help them
happens (layer 3, loop).

kube-scheduler moves a pod that failed to its unschedulable queue and tries it again only
when a cluster event could make it schedulable, or after 5 minutes. Sluice looks at every
pending job in every cycle, so without this a cluster with a hundred gangs that cannot
fit, and nothing changing, would search for room (and for victims) for all of them every
second, taking CPU from the API server it shares a machine with.

After a cycle, each job that was tried and stayed unschedulable (pods pending with a
reason, no decision for it, no other hold, not the starvation target) is *parked* with
the cache's :attr:`~scheduler.cache.SchedulerCache.generation` at the cycle's snapshot and
what it was told. Before each snapshot a parked job is let go when the generation moved (a
pod deleted or completed, a node, queue, PodGroup, budget or topology changed: room may
have freed), when it got a new pod of its own, or one of its pods lost its last scheduling
gate (a gang may now be whole), or ``retry_every`` seconds after it was parked
(kube-scheduler's 5 minutes). The others are held (``HoldKind.PARKED``): the actions do
not try them, and say again what they were told, so pods, PodGroups, ``sluice simulate``
and the metrics keep the true reasons.

Owned by the scheduling queue (:mod:`scheduler.loop.queue`); its task only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.holds import Hold, HoldKind
from scheduler.api.task import TaskStatus
from scheduler.framework.effects import Bind, ClearNomination, Evict, Nominate
from scheduler.framework.session import Session

RETRY_EVERY = 300.0
"""Seconds after which a parked job is tried again anyway."""


@dataclass(frozen=True, slots=True)
class _Entry:
    generation: int
    since: float
    hold: Hold


class Parking:
    def __init__(self, retry_every: float = RETRY_EVERY) -> None:
        self.retry_every = retry_every
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def holds(self, generation: int, fresh: set[str], now: float) -> dict[str, Hold]:
        """Let go the jobs whose parking ended (see the module docstring); the holds of the
        others, for the snapshot about to be taken at ``generation``."""
        self._entries = {
            uid: e
            for uid, e in self._entries.items()
            if e.generation == generation and uid not in fresh and now - e.since < self.retry_every
        }
        return {uid: e.hold for uid, e in self._entries.items()}

    def after_cycle(
        self, session: Session, held: Mapping[str, Hold], generation: int, now: float
    ) -> None:
        """Park the jobs ``session`` tried and could not place (``held``: the other holds
        of the cycle, whose jobs were not tried; ``generation``: the cache's when the
        cycle's snapshot was taken); forget jobs that are gone."""
        acted = {
            e.task.job_id
            for e in session.effects
            if isinstance(e, Bind | Evict | Nominate | ClearNomination)
        }
        target = session.reservation.job if session.reservation is not None else ""
        entries = {uid: e for uid, e in self._entries.items() if uid in session.jobs}
        for uid, job in session.jobs.items():
            if (
                uid in entries
                or uid in acted
                or uid == target
                or uid in held
                or uid in session.failing_jobs
            ):
                continue
            reasons = {
                t.uid: session.task_reasons[t.uid]
                for t in job.tasks.values()
                if t.sluice and t.status is TaskStatus.PENDING and t.uid in session.task_reasons
            }
            told = session.job_reasons.get(uid)
            pending = any(t.sluice and t.status is TaskStatus.PENDING for t in job.tasks.values())
            if pending and (reasons or told is not None):
                hold = Hold(
                    HoldKind.PARKED,
                    told=told,
                    until=now + self.retry_every,
                    task_reasons=reasons,
                )
                entries[uid] = _Entry(generation, now, hold)
        self._entries = entries
