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
gate (a gang may now be whole), when a pod was placed that its required pod affinity or
hard spread constraints wait for (:mod:`scheduler.framework.awaited_pods`), at the time
the session said trying it again may help though nothing else changes
(:attr:`~scheduler.framework.session.Session.revisits`: a reclaim's victims come of age),
or ``retry_every`` seconds after it was parked (kube-scheduler's 5 minutes). The others
are held (``HoldKind.PARKED``): the actions do not try them, and say again what they were
told, so pods, PodGroups, ``sluice simulate`` and the metrics keep the true reasons.

**Rounds.** An action that spends its time budget defers the jobs it has not reached to the
next cycle (``actionTimeBudget``): the cycles from the first that deferred to the first
that defers nothing are one *round*, and together they do what one long cycle would. A job
tried in a round and left unschedulable stays parked until the round ends, even if the
generation moves meanwhile (in one long cycle it would not have been tried twice either);
otherwise a cluster that changes every second would have each cut cycle try the same first
jobs again, and the jobs after them would never be reached.

Owned by the scheduling queue (:mod:`scheduler.loop.queue`); its task only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scheduler.api.holds import Hold, HoldKind
from scheduler.api.task import TaskStatus
from scheduler.framework.awaited_pods import AwaitedPods, PlacedPod, awaited_pods
from scheduler.framework.effects import Bind, ClearNomination, Evict, Nominate, parts
from scheduler.framework.session import Session

RETRY_EVERY = 300.0
"""Seconds after which a parked job is tried again anyway."""


@dataclass(frozen=True, slots=True)
class _Entry:
    generation: int
    since: float
    hold: Hold
    round: int
    """The round it was parked in (see the module docstring)."""
    timed: bool = False
    """Let go at a time the session gave (:attr:`Session.revisits`), not only at an
    event or the safety net's ``retry_every``."""
    awaits: AwaitedPods | None = None
    """The placed pods that could let its pods fit (None: only freed room can)."""
    news: bool = False
    """Such a pod was placed during its round: let go when the round ends."""


class Parking:
    def __init__(self, retry_every: float = RETRY_EVERY) -> None:
        self.retry_every = retry_every
        self._entries: dict[str, _Entry] = {}
        self._round = 0
        self._round_open = False
        """The last cycle deferred jobs: its round goes on in the next."""

    def __len__(self) -> int:
        return len(self._entries)

    def let_go_all(self) -> None:
        """Let every parked job go: the next cycle tries them all (see
        :meth:`JobQueue.view_whole`)."""
        self._entries.clear()

    def next_revisit(self, now: float) -> float:
        """When, after ``now``, a job parked until a time the session gave is let go
        (``inf``: none is); the ``retry_every`` safety net is not counted."""
        return min(
            (e.hold.until for e in self._entries.values() if e.timed and e.hold.until > now),
            default=math.inf,
        )

    @property
    def timed(self) -> int:
        """Jobs parked until a time the session gave: each is tried again then."""
        return sum(1 for e in self._entries.values() if e.timed)

    def holds(
        self,
        generation: int,
        fresh: set[str],
        now: float,
        placed: tuple[PlacedPod, ...] | None = (),
    ) -> dict[str, Hold]:
        """Let go the jobs whose parking ended (see the module docstring); the holds of the
        others, for the snapshot about to be taken at ``generation``. ``placed``: the pods
        placed since the last snapshot (None: too many to tell, any may have been)."""
        in_round = self._round if self._round_open else -1
        kept: dict[str, _Entry] = {}
        for uid, entry in self._entries.items():
            if uid in fresh or now >= entry.hold.until:
                continue
            e = entry
            if (
                e.awaits is not None
                and not e.news
                and (placed is None or e.awaits.any_among(placed))
            ):
                e = replace(e, news=True)
            if e.round == in_round or (e.generation == generation and not e.news):
                kept[uid] = e
        self._entries = kept
        return {uid: e.hold for uid, e in kept.items()}

    def after_cycle(
        self, session: Session, held: Mapping[str, Hold], generation: int, now: float
    ) -> None:
        """Park the jobs ``session`` tried and could not place (``held``: the other holds
        of the cycle, whose jobs were not tried; ``generation``: the cache's when the
        cycle's snapshot was taken); forget jobs that are gone. A cycle that deferred
        jobs keeps its round open; one that deferred none ends it."""
        acted = {
            e.task.job_id
            for e in parts(session.effects)
            if isinstance(e, Bind | Evict | Nominate | ClearNomination)
        }
        target = session.reservation.job if session.reservation is not None else ""
        entries = {uid: e for uid, e in self._entries.items() if uid in session.jobs}
        for job in session.jobs_to_place:  # only a job with a pod pending is parked
            uid = job.uid
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
                revisit = session.revisits.get(uid, math.inf)
                hold = Hold(
                    HoldKind.PARKED,
                    told=told,
                    until=now + min(self.retry_every, revisit),
                    task_reasons=reasons,
                )
                waiting = (
                    t for t in job.tasks.values() if t.sluice and t.status is TaskStatus.PENDING
                )
                awaits = awaited_pods(waiting, session.snapshot.namespaces)
                entries[uid] = _Entry(
                    generation, now, hold, self._round, revisit < math.inf, awaits
                )
        self._entries = entries
        if session.deferred:
            self._round_open = True
        else:
            self._round_open = False
            self._round += 1
