"""JobQueue: whether each job may be tried this cycle, and what holds it back (layer 3).

kube-scheduler keeps pods that wait in one scheduling queue (active, backoff,
unschedulable with the events that can wake each one), apart from its cache. Sluice
decides on every pending job in each cycle, so its queue is not a line of jobs to pop but
the one owner of every hold on a job between cycles:

========================  ==================================================================
hold (``HoldKind``)       enters                               leaves
========================  ==================================================================
EVICTIONS                 a preemption of the job is committed  its calls done and victims
                          (the executor: :meth:`close_gate`)    gone, a call failed, or 60 s
                                                                after the calls
ERROR                     an attempt of the job raised          its backoff ends (1 s,
                          (:meth:`after_cycle`), or a bind of   doubling to 60 s)
                          one of its pods was refused (the
                          binder: :meth:`bind_refused`)
PARKED                    tried and left unschedulable          an event that could help, a
                          (:meth:`after_cycle`)                 new pod of its own, 5 min
NO_PREEMPTION             a preemption's calls failed           its backoff ends
                          (:meth:`calls_done`)
========================  ==================================================================

the state of starvation protection (since when each job waits, which were overtaken,
the job elected and its nodes), and the ``dissolve`` action's count (since when each
gang runs below its minimum: :mod:`~scheduler.loop.queue.below_minimum`): every per-job
clock is here. At each cycle the loop takes :meth:`view` of its snapshot's jobs and
attaches it to the snapshot; the actions read it and never change it. After the cycle
:meth:`after_cycle` takes what the session decided. The preemption executor reports to it
(:meth:`close_gate`, :meth:`calls_done`, :meth:`victim_gone`: the
:class:`~scheduler.preemption.executor.EvictionGates` port) instead of keeping gates of
its own; so does the cache (:meth:`victim_gone` on every deletion seen). Moving a job
between holds is this class's alone (``make contracts`` checks that nothing outside
``scheduler.loop.queue`` reaches its parts).

Times are the loop clock's. Not thread-safe: the loop's task only (the cache's listener
and the executor's tasks run on it too). When a hold ends by itself (a backoff, a gate's
timeout) the loop is woken at that time (:meth:`next_deadline`); when a gate opens at an
event, at once (``wake``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scheduler.api.holds import GateTicket, Hold, HoldKind, QueueView
from scheduler.api.job import JobInfo
from scheduler.framework.awaited_pods import PlacedPod
from scheduler.framework.job_boundaries import error_message
from scheduler.framework.session import Session
from scheduler.loop.queue.below_minimum import BelowMinimum
from scheduler.loop.queue.job_backoff import BackoffPolicy, Backoffs
from scheduler.loop.queue.parking import RETRY_EVERY, Parking
from scheduler.loop.queue.preemption_gates import GATE_TIMEOUT, Gates
from scheduler.loop.queue.starvation_hold import ReservationChange, ReservationKeeper
from scheduler.metrics import Metrics
from scheduler.ports import Clock, EventRecorder

_STRENGTH = {kind: i for i, kind in enumerate(HoldKind)}


class JobQueue:
    """Owned by the loop (one per scheduler); see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        events: EventRecorder,
        metrics: Metrics,
        *,
        wake: Callable[[], None] = lambda: None,
        policy: BackoffPolicy | None = None,
        gate_timeout: float = GATE_TIMEOUT,
        retry_parked_every: float = RETRY_EVERY,
    ) -> None:
        self._clock = clock
        self._wake = wake
        policy = policy or BackoffPolicy()
        self._gates = Gates(gate_timeout)
        self._errors = Backoffs(HoldKind.ERROR, policy)
        self._no_preemption = Backoffs(HoldKind.NO_PREEMPTION, policy)
        self._refused_binds = Backoffs(HoldKind.ERROR, policy)
        """Jobs backing off after a refused bind; a run of refusals ends at a bind that
        lands (:meth:`bind_landed`), not when a later attempt allocates again."""
        self._parking = Parking(retry_parked_every)
        self._starvation = ReservationKeeper(events, metrics)
        self._below_minimum = BelowMinimum()
        self._view = QueueView()
        """The view of the cycle under way (what :meth:`after_cycle` compares with)."""

    # What the loop asks ------------------------------------------------------------------

    def view(
        self,
        now: float,
        generation: int,
        fresh: set[str],
        jobs: Mapping[str, JobInfo],
        placed: tuple[PlacedPod, ...] | None = (),
    ) -> QueueView:
        """The holds as the cycle about to start at ``now`` sees them. ``generation``: the
        cache's as its snapshot is taken; ``fresh``: jobs that got a pod to place since
        the last cycle; ``placed``: pods placed since then (None: too many to tell) (all
        three end parkings); ``jobs``: the snapshot's, as the cache built them (the counts
        of gangs below their minimum go on from them). Once per snapshot, in order. Gates
        past their timeout open here."""
        self._gates.expire(now)
        for job in self._no_preemption.ended(now):
            self._no_preemption.lift(job)  # a next failed preemption waits longer still
        for job in self._refused_binds.ended(now):
            self._refused_binds.lift(job)  # so does a next refused bind
        holds: dict[str, Hold] = {}
        for layer in (
            self._no_preemption.active(now),
            self._parking.holds(generation, fresh, now, placed),
            self._errors.active(now),
            self._refused_binds.active(now),
            self._gates.holds(),
        ):
            for job, hold in layer.items():
                mine = holds.get(job)
                if mine is None or _STRENGTH[hold.kind] < _STRENGTH[mine.kind]:
                    holds[job] = hold
        starvation = self._starvation
        self._view = QueueView(
            holds,
            starvation.reservation,
            dict(starvation.waiting_since),
            frozenset(starvation.overtaken),
            self._below_minimum.see(jobs, now),
        )
        return self._view

    def view_whole(self) -> None:
        """The cache's view became whole (every object read; the loop calls this once,
        before the first cycle on it): the jobs parked by cycles on the partial view,
        whose evictions were not tried then, are tried again. No cache change marks
        the moment, so parking alone would keep them until their 5-minute retry."""
        self._parking.let_go_all()

    def after_cycle(self, session: Session, generation: int, now: float) -> list[ReservationChange]:
        """Take what ``session`` (a cycle that ran to its end) decided: jobs that raised
        back off, jobs tried and left unschedulable are parked, starvation protection's
        state moves on. Returns the reservation's changes (for the cycle's report)."""
        for uid, exc in session.job_errors.items():
            self._errors.fail(uid, error_message(exc), now)
        for uid in self._errors.ended(now):
            if uid not in session.job_errors:
                self._errors.reset(uid)
        self._errors.retain(session.jobs)
        self._no_preemption.retain(session.jobs)
        self._refused_binds.retain(session.jobs)
        changes = self._starvation.after_cycle(session, now)
        others = {j: h for j, h in self._view.holds.items() if h.kind is not HoldKind.PARKED}
        self._parking.after_cycle(session, others, generation, now)
        return changes

    def next_deadline(self, now: float) -> float:
        """When, after ``now``, a hold next ends by itself (a backoff, a gate's timeout, a
        parked job's time to be tried again that the session gave); ``inf``: none will.
        A parked job's 5-minute retry is not counted: it is a safety net, not news. Holds
        already over are let go by the next :meth:`view`."""
        deadlines = (
            self._gates.next_deadline(now),
            self._errors.next_deadline(now),
            self._refused_binds.next_deadline(now),
            self._no_preemption.next_deadline(now),
            self._parking.next_revisit(now),
        )
        return min(deadlines)

    @property
    def in_flight(self) -> int:
        """Holds that will end by themselves or at an event already under way: gates and
        backoffs (something changes when they do), and parked jobs to be tried again at
        a time the session gave."""
        backoffs = len(self._errors) + len(self._refused_binds) + len(self._no_preemption)
        return len(self._gates) + backoffs + self._parking.timed

    @property
    def parked(self) -> int:
        return len(self._parking)

    # What the binder reports -----------------------------------------------------------------

    def bind_refused(self, job: str, reason: str) -> None:
        """A bind of one of ``job``'s pods was refused: the API server answered, and the
        pod is not bound (a webhook's or RBAC's denial, a namespace being deleted, a
        claim write refused). The job is not tried again until its backoff ends, 1 s
        doubling with each refusal in a row, as kube-scheduler backs off a pod whose bind
        failed; without it the next cycle, milliseconds later, would try the same bind
        again. The loop is woken when the backoff ends (:meth:`next_deadline`)."""
        self._refused_binds.fail(job, reason, self._clock.now())

    def bind_landed(self, job: str) -> None:
        """A bind of one of ``job``'s pods took effect: its run of refusals is over (a
        wait already running goes on)."""
        self._refused_binds.end_run(job)

    # What the preemption executor reports (the EvictionGates port) -------------------------

    def close_gate(
        self, job: str, victims: Iterable[str], devices: Iterable[str] = ()
    ) -> GateTicket:
        """A preemption of ``job`` was committed: hold the job until its calls are done,
        ``victims`` (uids) are gone and the DRA devices of ``devices`` released."""
        return self._gates.close(job, victims, devices)

    def calls_done(self, ticket: GateTicket, failure: str | None = None) -> None:
        """A preemption's calls ended: well (``failure`` None), or not, and then the job
        may not preempt again until its backoff ends (``failure`` says why)."""
        now = self._clock.now()
        if failure is None:
            self._no_preemption.end_run(ticket.job)
        else:
            self._no_preemption.fail(ticket.job, failure, now)
        if self._gates.calls_done(ticket, ok=failure is None, now=now) or failure is not None:
            self._wake()

    def victim_gone(self, uid: str) -> None:
        """A pod's deletion was seen (the cache calls this for every one, inside its event
        handling; the executor, for a victim found gone)."""
        if self._gates.victim_gone(uid):
            self._wake()

    def devices_released(self, uid: str) -> None:
        """No DRA claim holds devices for pod ``uid`` any more (the cache calls this,
        inside its event handling)."""
        if self._gates.devices_released(uid):
            self._wake()

    def gates(self) -> dict[str, Hold]:
        """The jobs behind a gate now, with their holds (read-only: for checks; a gate
        past its timeout is still shown until the next :meth:`view` opens it)."""
        return self._gates.holds()

    def backing_off(self, kind: HoldKind) -> frozenset[str]:
        """The jobs backing off now after a failure of ``kind`` (ERROR, NO_PREEMPTION)."""
        now = self._clock.now()
        if kind is HoldKind.ERROR:
            return frozenset(self._errors.active(now)) | frozenset(self._refused_binds.active(now))
        return frozenset(self._no_preemption.active(now))
