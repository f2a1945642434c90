"""SchedulingLoop: the cycle, and the hand-off of its effects (layer 3).

Each cycle: snapshot the cache, attach the scheduling queue's view of what it holds back
(:mod:`scheduler.loop.queue`), open a session, run the configured actions, close the session,
then act on the effects: the cache assumes every one of them at once, through the
:class:`~scheduler.framework.effects.EffectLedger` port, and the API calls run in
background pools. A cycle runs every ``schedule_period`` seconds of the clock, and at
once when the cache reports a change worth it (a new pod, freed room, a new node).

Errors are confined: a job whose attempt raised is rolled back by the actions and backs
off (the queue holds it; :mod:`scheduler.loop.cycle_failures` logs it); a cycle that raised
outside any job is thrown away whole (nothing of it is handed on, the next snapshot
copies everything afresh), counted, and the loop goes on. Nothing a plugin raises ends
the process.

The loop owns one task group; every background call belongs to it, and failures are
handled where they are expected (the binds and their claims: :mod:`scheduler.loop.
binding_cycle`; the status writes: :mod:`scheduler.loop.status`) and logged and counted
otherwise. Every write goes through one API dispatcher (:mod:`scheduler.dispatch`), the
loop's, which the preemption executor shares.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from scheduler.api.errors import (
    AmbiguousError,
    InvariantError,
    NamespaceTerminatingError,
)
from scheduler.api.task import TaskInfo
from scheduler.cache import SchedulerCache
from scheduler.dispatch import ApiDispatcher
from scheduler.framework.effects import (
    Bind,
    ClearNomination,
    Dissolution,
    Effect,
    EffectLedger,
    Preemption,
)
from scheduler.framework.registry import ResolvedConfiguration
from scheduler.framework.session import Session, open_session
from scheduler.logging import get_logger, v
from scheduler.loop.binding_cycle import BindingCycle
from scheduler.loop.cycle_failures import JobErrorLog, cycle_failed
from scheduler.loop.cycle_report import CycleObserver, CycleReport, record_decisions
from scheduler.loop.idle import IdleCycles, settled
from scheduler.loop.queue import JobQueue
from scheduler.loop.queue_gauges import QueueGauges
from scheduler.loop.status import StatusReporter
from scheduler.loop.system_clock import SystemClock
from scheduler.loop.workers import WorkerPool
from scheduler.metrics import PROFILE, Metrics
from scheduler.ports import ClusterPorts

log = get_logger("sluice.loop")

BACKGROUND_SHARE = 1.0
"""After a cycle, while background calls (binds, status writes, preemptions) are queued
or running, the event loop is left to them for up to this many times the cycle's
duration (capped at the period), or until they are done, before the next cycle starts."""

STOP_GRACE = 10.0
"""Seconds a stopping loop waits for running preemption calls."""
EVICTING_ACTIONS: Final = frozenset({"preempt", "reclaim", "dissolve"})
"""The actions that evict, held while the cache's view is partial
(:attr:`SchedulingLoop.whole_view`)."""


FIRST_SLICE_SECONDS = 0.05
"""The first slice of a cycle that goes on in slices ends after this long (or the
action's budget, if shorter), the later ones after the budget: the first binds of a long
cycle (at start, the whole backlog's) go out at once, not after a whole budget. An
action that does not keep its place is given the whole budget (a job it does not reach
waits for the next cycle)."""

VOLUME_WAITS = 100_000
"""Binds that may wait at once for the PV controller to bind their claims: a wait is an
event awaited, no API call, so the bound is only against a runaway."""

SLOW_CYCLE_SECONDS = 2.0
"""A cycle whose decisions take longer is logged (``slow cycle``) with the time of each
part: the event loop (lease renewals included) waited that long."""


class PreemptionHandler(Protocol):
    """Receives a cycle's Preemption, Dissolution and ClearNomination effects, assumed already
    (the preemption executor, which reports the gates it closes to the loop's
    :class:`~scheduler.loop.queue.JobQueue`)."""

    @property
    def in_flight(self) -> int: ...

    @property
    def calls_in_flight(self) -> int: ...

    @property
    def async_enabled(self) -> bool:
        """Run the calls in the background (else :meth:`handle` awaits them)."""
        ...

    async def calls_drained(self) -> None: ...

    def attach(self, tg: TaskGroup, /) -> None: ...

    async def handle(
        self, effects: Sequence[Effect], displaced: Mapping[str, Sequence[TaskInfo]], /
    ) -> None: ...


def _always() -> bool:
    return True


class SchedulingLoop:
    def __init__(
        self,
        cache: SchedulerCache,
        resolved: ResolvedConfiguration,
        ports: ClusterPorts,
        metrics: Metrics | None = None,
    ) -> None:
        self.cache = cache
        self.resolved = resolved
        self.config = resolved.config
        self.ports = ports
        self.metrics = metrics or Metrics()
        self.cycles = 0
        self.observers: list[CycleObserver] = []
        self.preemption: PreemptionHandler | None = None
        self.binds = WorkerPool("bind", self.config.bind_concurrency, self._background_error)
        self.volume_waits = WorkerPool("volumes", VOLUME_WAITS, self._background_error)
        """Binds waiting for the PV controller to bind their claims (no API call each)."""
        self.dispatcher = ApiDispatcher(
            ports,
            self.metrics,
            concurrency=self.config.bind_concurrency,
            on_error=self._background_error,
        )
        """Every write to the API server; the preemption executor is given the same one
        (``app.build_loop`` does so)."""
        self.status = StatusReporter(
            ports.clock,
            cache,
            self.dispatcher,
            self._failed_call,
            grouper_grace=self.config.pod_grouper_grace,
        )
        self.ledger: EffectLedger = cache
        """Where every effect is assumed, and forgotten when its call fails."""
        self.queue = JobQueue(ports.clock, self.dispatcher, self.metrics, wake=self.wake)
        """Every hold on a job between cycles; its view goes with each snapshot."""
        self.error_log = JobErrorLog(self.metrics)
        self.binding = BindingCycle(
            self.dispatcher,
            cache,
            self.metrics,
            binds=self.binds,
            waits=self.volume_waits,
            status=self.status,
            queue=self.queue,
            on_failed=self._failed_call,
        )
        """Hands on the binds (their claims first) and clears the claims nobody holds."""
        self._generation = 0
        """The cache's generation when the cycle under way took its snapshot."""
        self.gauges = QueueGauges(self.metrics)
        self._real_time = isinstance(ports.clock, SystemClock)
        self.action_budget = self.config.action_time_budget if self._real_time else 0.0
        """Seconds of wall time each action may spend on one cycle's jobs (0: no limit;
        see ``actionTimeBudget``). On the virtual clock of a simulation a cycle takes no
        time, so no budget applies there and its decisions do not depend on the
        machine's speed."""
        self.longest_hold = 0.0
        """The longest :attr:`CycleReport.longest_hold` of any cycle so far (the metric
        ``sluice_cycle_longest_hold_seconds``)."""
        self.freeze_heap = False
        """After the first cycle that deferred nothing (the first round: every pending
        job tried once), collect and :func:`gc.freeze` what is alive (see
        :meth:`_freeze_heap`). ``sluice run`` and the benchmarks set it; tests do not,
        as they run many loops in one process."""
        self._frozen = False
        self.idle = IdleCycles()
        self._wake_at = math.inf
        """When the last cycle's actions would decide something new by the time alone
        (:attr:`Session.wake_at`): the loop runs a cycle then, and counts it in flight
        until then (no idle skip, no simulation ends before)."""
        self.skip_idle = False
        """Skip a cycle while nothing changed since one that had nothing to do
        (:mod:`scheduler.loop.idle`). ``sluice run`` sets it; simulations do not (they
        stop on a cycle that finds nothing to do), tests may."""
        self._wake = anyio.Event()
        self._stopping = False
        self.whole_view: Callable[[], bool] = _always
        self._was_whole = True
        """What :attr:`whole_view` said at the last cycle (a change to whole lets the
        parked jobs go: :meth:`JobQueue.view_whole`)."""
        """Whether the cache holds every object of the cluster yet. ``sluice run`` starts
        cycling once the bound pods are known, before every pending pod is: until then the
        evicting actions (:data:`EVICTING_ACTIONS`) wait, since a queue's fair share and a
        preemption's need depend on pods not read yet, while placing pods on free room
        does not; and the loop is not idle (:attr:`in_flight`)."""
        cache.on_change = self.wake

    @property
    def in_flight(self) -> int:
        """Background calls not finished yet, holds still to end (gates, backoffs:
        something will change when they do), and pods still to be told their changed
        reason (after their backoff)."""
        busy = self.binds.in_flight + self.dispatcher.in_flight + self.queue.in_flight
        busy += self.volume_waits.in_flight
        busy += self.status.owed + (self._wake_at < math.inf) + (not self.whole_view())
        return busy + (self.preemption.in_flight if self.preemption is not None else 0)

    @property
    def calls_in_flight(self) -> int:
        """API calls queued or running in the background: binds, status writes, and the
        preemptions' calls (not the gates waiting for deletions)."""
        calls = self.binds.in_flight + self.dispatcher.in_flight
        return calls + (self.preemption.calls_in_flight if self.preemption is not None else 0)

    async def _calls_drained(self) -> None:
        await self.binds.drain()
        await self.dispatcher.drained()
        if self.preemption is not None:
            await self.preemption.calls_drained()

    def stop(self) -> None:
        """Finish the current cycle, hand on its effects, drain the pools and return."""
        self._stopping = True
        self._wake.set()

    @property
    def woken(self) -> bool:
        """A wake-up is pending: the next cycle will start without waiting."""
        return self._wake.is_set()

    def wake(self) -> None:
        """Run the next cycle as soon as the current one ends. Safe from sync callbacks."""
        self._wake.set()

    async def run(
        self,
        *,
        should_stop: Callable[[CycleReport], bool] | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run cycles until cancelled, or until ``should_stop(report)`` says so.

        Background calls still running when it stops are awaited (drained) first.
        """
        async with anyio.create_task_group() as tg:
            self.binds.attach(tg)
            self.volume_waits.attach(tg)
            self.dispatcher.attach(tg)
            if self.preemption is not None:
                self.preemption.attach(tg)
            task_status.started()
            while not self._stopping:
                self._wake = anyio.Event()
                started = self.ports.clock.now()
                if self.skip_idle and self.idle.may_skip(self.cache.revision, self.in_flight):
                    self.metrics.cycles_idle.inc()  # nothing changed since a settled cycle
                    with anyio.move_on_after(self.config.schedule_period):
                        await self._wake.wait()
                    continue
                report = await self.run_cycle()
                spent = self.ports.clock.now() - started
                if self.freeze_heap and not self._frozen and not report.deferred:
                    self._freeze_heap()
                    self._frozen = True
                if report.deferred:
                    self.wake()  # jobs were left for the next cycle: run it at once
                if should_stop is not None:
                    await anyio.sleep(0)  # let the calls this cycle submitted start
                    if should_stop(report):
                        break
                period = self.config.schedule_period
                share = min(BACKGROUND_SHARE * spent, period)
                rest = 0.0
                if share > 0 and self.calls_in_flight:
                    # A cycle holds the event loop; before the next one, leave it to the
                    # background calls for up to BACKGROUND_SHARE times as long, or until
                    # they are done, so wake-ups (which come as soon as the cycle yields)
                    # cannot starve them. On the virtual clock a cycle takes no time, so
                    # simulations are unchanged.
                    with anyio.move_on_after(share):
                        await self._calls_drained()
                    rest = self.ports.clock.now() - started - spent
                # A hold that ends by itself (a backoff, a gate's timeout) wakes the loop.
                deadline = min(self.queue.next_deadline(self.ports.clock.now()), self._wake_at)
                wait = min(period - rest, deadline - self.ports.clock.now())
                with anyio.move_on_after(max(0.0, wait)):
                    await self._wake.wait()
            await self.binds.drain()
            await self.dispatcher.drained()
            if self._stopping:
                # Let running preemption calls finish; gates still waiting for deletions
                # are not API calls and end with the process.
                with anyio.move_on_after(STOP_GRACE):
                    if self.preemption is not None:
                        await self.preemption.calls_drained()
                tg.cancel_scope.cancel()

    async def run_cycle(self) -> CycleReport:
        """One cycle. Decisions are synchronous; effects are handed to background pools
        (or awaited, for preemption with the async gate off). A cycle that fails as a
        whole hands nothing on and reports where it failed (``report.failed``)."""
        self.cycles += 1
        structlog.contextvars.bind_contextvars(cycle=self.cycles)
        now = self.ports.clock.now()
        report = CycleReport(self.cycles, now)
        self._report_notices()
        if self.cycles == 1:  # a start's phases: the first cycle begins
            log.info("first cycle", pods=len(self.cache.tasks), nodes=len(self.cache.nodes))
        t0 = report.slice_started = time.perf_counter()
        session = await self._decide(report)
        report.seconds = time.perf_counter() - t0
        if session is not None:
            self._wake_at = session.wake_at
        if session is None:
            self.idle.after_cycle(report.revision, settled=False)
            self.cache.drop_copies()
            for observer in self.observers:
                observer(report)
            return report
        self.metrics.cycle_duration.labels("all").observe(report.seconds)
        record_decisions(report, session)
        self.error_log.after_cycle(session)
        report.reservation_changes = self.queue.after_cycle(session, self._generation, now)
        if self.skip_idle:  # the scan of every task is for the idle check only
            report.settled = settled(
                session.jobs.values(),
                decided=report.decided or bool(report.job_errors),
                deferred=report.deferred,
                failed=bool(report.failed),
            )
            self.idle.after_cycle(report.revision, settled=report.settled)
        await self._apply(report.effects[report.handed_on :], report)
        if self._real_time and report.effects:
            # Let the binds just submitted send their requests before the cycle's own
            # bookkeeping (status, metrics) holds the thread again: the server works on
            # them meanwhile. (On the virtual clock nothing is gained, and the embedded
            # cluster would answer them inside the cycle.)
            report.longest_hold = max(
                report.longest_hold, time.perf_counter() - report.slice_started
            )
            await anyio.sleep(0)
            report.slice_started = time.perf_counter()
        self.binding.release_stale_claims(session)
        self.status.report(session)
        self.gauges.pending(self.status.pending_by_queue)
        self.gauges.shares(session.queue_shares)
        unschedulable = len(report.task_reasons)
        if unschedulable:
            self.metrics.schedule_attempts.labels("unschedulable", PROFILE).inc(unschedulable)
        if report.seconds > SLOW_CYCLE_SECONDS:
            log.warning(
                "slow cycle",
                seconds=round(report.seconds, 3),
                parts={k: round(x, 3) for k, x in report.parts.items()},
                jobs=len(session.jobs),
                effects=len(report.effects),
            )
        if v(2) and (report.effects or v(4)):
            log.info(
                "cycle",
                v=2,
                seconds=round(report.seconds, 4),
                effects=len(report.effects),
                unschedulable=unschedulable,
            )
        report.longest_hold = max(report.longest_hold, time.perf_counter() - report.slice_started)
        if report.longest_hold > self.longest_hold:
            self.longest_hold = report.longest_hold
            self.metrics.cycle_longest_hold.set(report.longest_hold)
        for observer in self.observers:
            observer(report)
        return report

    def _report_notices(self) -> None:
        """Log, once each, the objects the cache set aside or adjusted since the last
        cycle (a pod it cannot read, a node whose allocatable was capped)."""
        for notice in self.cache.take_notices():
            message = "object set aside" if notice.what == "rejected" else "object adjusted"
            log.warning(message, object=notice.object, reason=notice.reason)

    async def _decide(self, report: CycleReport) -> Session | None:
        """Snapshot, session, actions: the cycle's decisions, or None (logged, counted,
        ``report.failed`` set) when something raised outside any one job.

        An action that runs out of its time budget and carries its place in the session
        (:meth:`Session.carry`: allocate does) makes the cycle go on in slices: what the
        session decided so far is handed on (:meth:`_apply`: assumed, binds submitted),
        the event loop is left to the background calls for up to as long as the slice
        took (as between cycles), then the action goes on, on the same session. So the
        first binds of a long cycle go out while it still decides, and no slice holds
        the loop much longer than the budget. What earlier slices handed on stands if a
        later one fails."""
        self._generation = self.cache.generation
        report.revision = self.cache.revision
        t0 = time.perf_counter()
        fresh = self.cache.take_fresh_jobs()
        placed = self.cache.take_placed_pods()
        whole = self.whole_view()  # before the snapshot: a whole view is in it
        snapshot = self.cache.snapshot(now=report.started, wall=self.ports.clock.wall())
        if whole and not self._was_whole:
            self.queue.view_whole()
        self._was_whole = whole
        view = self.queue.view(report.started, self._generation, fresh, snapshot.jobs, placed)
        snapshot.queue = report.queue_view = view
        t1 = time.perf_counter()
        report.parts["snapshot"] = t1 - t0
        if self._real_time:
            # A snapshot is a copy: the watch events and background calls that queued
            # while it was taken (a full one at 15,000 nodes: 0.35 s) run before the
            # session opens, so the two do not hold the loop as one stretch.
            report.longest_hold = max(report.longest_hold, t1 - report.slice_started)
            await anyio.sleep(0)
            t1 = report.slice_started = time.perf_counter()
        where = "open"
        try:
            session = open_session(snapshot, self.resolved)
            report.parts["open"] = time.perf_counter() - t1
        except Exception as exc:
            report.failed = where
            cycle_failed(self.metrics, report.number, where, exc)
            return None
        try:
            for action in self.resolved.actions:
                if not whole and action.name in EVICTING_ACTIONS:
                    continue  # not on a partial view (whole_view)
                where = action.name
                while True:
                    ta = time.perf_counter()
                    session.run_action(action, self._out_of_time(ta), self._slice_over(ta, report))
                    spent = time.perf_counter() - ta
                    # an action that goes on in slices: its parts summed over them
                    report.parts[action.name] = report.parts.get(action.name, 0.0) + spent
                    self.metrics.cycle_duration.labels(action.name).observe(spent)
                    if not session.unfinished:
                        break
                    await self._hand_on(session, report)
            where = "queue shares"
            session.record_queue_shares()
            where = "close"
            session.close()
        except Exception as exc:
            report.failed = where
            cycle_failed(self.metrics, report.number, where, exc)
            if where != "close":
                with contextlib.suppress(Exception):  # its failure is not the news
                    session.close()
            return None
        return session

    async def _hand_on(self, session: Session, report: CycleReport) -> None:
        """Between two slices of a cycle: hand on the effects decided since the last
        slice, then leave the event loop to the background calls (see :meth:`_decide`)."""
        fresh = session.effects[report.handed_on :]
        report.handed_on = len(session.effects)
        await self._apply(fresh, report)
        held = time.perf_counter() - report.slice_started
        report.longest_hold = max(report.longest_hold, held)
        report.slices += 1
        share = min(BACKGROUND_SHARE * held, self.config.schedule_period)
        with anyio.move_on_after(share):
            await anyio.sleep(0)  # the binds just submitted send their requests
            await self._calls_drained()
        report.slice_started = time.perf_counter()

    def _out_of_time(self, started: float, seconds: float = 0.0) -> Callable[[], bool] | None:
        """Whether an action begun at ``started`` (``perf_counter``) has spent its time
        budget (or ``seconds``, when shorter); None without a budget."""
        if self.action_budget <= 0:
            return None
        deadline = started + min(seconds or self.action_budget, self.action_budget)
        return lambda: time.perf_counter() > deadline

    def _slice_over(self, started: float, report: CycleReport) -> Callable[[], bool] | None:
        """Whether the slice of an action begun at ``started`` is over: the first slice
        of ``report``'s cycle after :data:`FIRST_SLICE_SECONDS`, any other when the
        action's budget is spent; None without a budget."""
        first = report.slices == 1  # no slice handed on yet in this cycle
        return self._out_of_time(started, FIRST_SLICE_SECONDS if first else 0.0)

    @staticmethod
    def _freeze_heap() -> None:
        """Collect, then leave every object alive now out of the cyclic collector's
        scans (:func:`gc.freeze`). After the first round that is mostly the caches as the
        first sync filled them: long-lived, and without reference cycles (they are freed
        by reference counting when they go), yet a full collection would scan them all,
        every few cycles (about 0.3 s at 30,000 pods). Objects created later are scanned
        as usual."""
        t0 = time.perf_counter()
        gc.collect()
        gc.freeze()
        log.info(
            "heap frozen after the first round",
            objects=gc.get_freeze_count(),
            seconds=round(time.perf_counter() - t0, 3),
        )

    async def _apply(self, effects: Sequence[Effect], report: CycleReport) -> None:
        """Assume ``effects`` (of ``report``'s cycle, or of a slice of it), in decision
        order, and hand the calls on. Awaiting the preemption calls (asynchronous
        preemption off) lets the event loop run: that wait ends the stretch the cycle
        holds the loop (``report.longest_hold``), and a new one starts after it."""
        preemption: list[Effect] = []
        displaced: dict[str, Sequence[TaskInfo]] = {}
        if self.preemption is None and any(
            isinstance(e, (Preemption, Dissolution, ClearNomination)) for e in effects
        ):
            raise InvariantError("evictions were decided but no preemption executor runs")
        for effect in effects:
            withdrawn = self.ledger.assume(effect)
            if isinstance(effect, Bind):
                self.binding.bind(effect)
            elif isinstance(effect, (Preemption, Dissolution, ClearNomination)):
                preemption.append(effect)
                displaced.update(withdrawn)
        if preemption and self.preemption is not None:
            waits = not self.preemption.async_enabled
            if waits:
                report.longest_hold = max(
                    report.longest_hold, time.perf_counter() - report.slice_started
                )
            await self.preemption.handle(preemption, displaced)
            if waits:
                report.slice_started = time.perf_counter()

    def _failed_call(self, call: str, exc: Exception) -> None:
        self.metrics.api_errors.labels(call).inc()
        self.idle.disturbed()  # a call failed: the next cycle runs to retry what it was
        if call == "patch" and isinstance(exc, AmbiguousError):
            # The status reporter's writes: the next cycle compares what it wants with what
            # the events show, so a patch that took effect is not written again.
            self.metrics.api_ambiguous.labels("status").inc()
        if isinstance(exc, NamespaceTerminatingError):  # not a fault: the objects go with it
            log.info("api call refused: the namespace is being deleted", call=call, error=str(exc))
            return
        log.warning("api call failed", call=call, error=str(exc))

    def _background_error(self, label: str, exc: BaseException) -> None:
        self.metrics.api_errors.labels("internal").inc()
        log.error("background call crashed", call=label, error=repr(exc), exc_info=exc)
