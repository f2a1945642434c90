"""PreemptionExecutor: the API calls of a preemption (layer 2).

It makes API calls and reports their progress, nothing else. The gate that holds the
preemptor's job and the backoff after a failure are the loop's scheduling queue's
(:class:`~scheduler.loop.queue.JobQueue`), which the executor tells through the
:class:`EvictionGates` port; what the cache assumes of the effects is the loop's
business, through the :class:`~scheduler.framework.effects.EffectLedger` port, which the
executor uses only to undo the assumptions of a preemption that failed.

The loop hands it the Preemption, Dissolution and ClearNomination effects of each cycle,
already assumed (the victims releasing, the preemptors nominated, lower-priority
nominations on their nodes withdrawn: the ledger says which), with ``handle``. For each
preemptor of a Preemption, at once:

1. the preemptor's job is gated (:meth:`EvictionGates.close_gate`): enqueue, allocate
   and preempt skip it.

Then, in a background task of this executor (at most ``concurrency`` at once), or awaited
inside the cycle when the feature gate ``SchedulerAsyncPreemption`` is off:

2. lower-priority pods nominated to the same node lose their nomination; each victim gets
   the condition ``DisruptionTarget=True`` (reason ``PreemptionByScheduler``), is deleted
   (NotFound counts as done) and gets a ``Preempted`` event; the preemptor gets
   ``status.nominatedNodeName`` and a ``Preempting`` event naming its victims and the
   gangs it broke;
3. the gate opens when the calls are done (:meth:`EvictionGates.calls_done`), every
   victim is gone (its deletion seen by the cache, or a NotFound here:
   :meth:`EvictionGates.victim_gone`) and no DRA claim holds devices for a victim any
   more (the claim controller released them; the executor deallocates nothing itself);
   the loop is woken and places the preemptor on its nominated node. If deletions are
   not seen within 60 s of the calls the gate opens anyway, so a missed event never holds
   a preemptor forever;
4. a call whose reply was lost (:class:`~scheduler.api.errors.AmbiguousError`) is not a
   failure until its outcome is known (:mod:`scheduler.dispatch.outcomes`): a victim
   whose deletion took effect counts as evicted (never evicted again, never a reason to
   revert the nomination); a status patch is written again until it is known to hold;
5. if a call fails (refused, or ambiguous and then known not to have taken effect, or
   still unknown at the resolver's deadline) the gate opens at once, the nomination is
   reverted in the cache (the ledger forgets it) and cleared in the API, victims not yet
   deleted hold their room again, the job goes back to normal scheduling but may not
   preempt until its backoff ends (1 s, doubling to 60 s; the queue keeps it), and the
   failure is counted.

A Dissolution (the ``dissolve`` action's: what is left of a gang that ran below its
minimum) has no preemptor and no node to nominate: the gang's own job is gated the same
way until its members are gone, each member gets ``DisruptionTarget`` and is evicted,
with a ``Dissolved`` event; a failed call reverts the members not evicted (they hold
their room again) and the job backs off before it is dissolved again. Every write goes
through the API dispatcher (:mod:`scheduler.dispatch`), awaited in the executor's tasks.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup

from scheduler.api import labels as L
from scheduler.api.errors import ApiError, NotFoundError
from scheduler.api.holds import GateTicket
from scheduler.api.task import TaskInfo
from scheduler.dispatch import ApiDispatcher, EvictPod, PodStatusPatch
from scheduler.framework.effects import (
    ClearNomination,
    Dissolution,
    Effect,
    EffectLedger,
    Evict,
    EvictReason,
    Nominate,
    Preemption,
    VictimBundle,
)
from scheduler.logging import get_logger
from scheduler.metrics import Metrics
from scheduler.ports import Event, ObjectRef

log = get_logger("sluice.preemption")
T = TypeVar("T")

PREEMPTION_MESSAGE = "sluice: preempting to accommodate a higher priority pod"
RECLAIM_MESSAGE = "sluice: reclaiming resources for queue {queue!r}, which is below its share"


DISSOLVED_MESSAGE = (
    "sluice: gang {job} ran below its minimum for longer than the grace period; what is "
    "left of it is evicted so that it can start again whole"
)


def dissolved_notice(job: str) -> Notice:
    """What the members of dissolved gang ``job`` (``namespace/name``) are told."""
    message = DISSOLVED_MESSAGE.format(job=job)
    return Notice(message, "Dissolved", message)


def _is_reclaim(p: PreemptionRun) -> bool:
    return any(e.reason is EvictReason.RECLAIMED for e in p.evictions)


def disruption_message(p: PreemptionRun) -> str:
    """The ``DisruptionTarget`` condition's message on ``p``'s victims."""
    if _is_reclaim(p):
        return RECLAIM_MESSAGE.format(queue=p.evictions[0].queue)
    return PREEMPTION_MESSAGE


def preempted_message(p: PreemptionRun) -> str:
    """The ``Preempted`` event's message on ``p``'s victims."""
    if _is_reclaim(p):
        queue = p.evictions[0].queue
        return f"Reclaimed by queue {queue!r} for pod {p.preemptor.key} on node {p.node}"
    return f"Preempted by pod {p.preemptor.key} on node {p.node}"


def preemptor_message(p: PreemptionRun) -> str:
    """The ``Preempting`` event's message on ``p``'s preemptor: how many victims on which
    node, and the gangs it broke (those whose members were taken as a Whole bundle)."""
    verb = "reclaiming" if _is_reclaim(p) else "preempting"
    names = ", ".join(v.key for v in p.victims[:5])
    more = f" and {len(p.victims) - 5} more" if len(p.victims) > 5 else ""
    msg = f"{verb} {len(p.victims)} pod(s) to run on node {p.node}: {names}{more}"
    broken = Counter(e.task.job_id for e in p.evictions if e.bundle is VictimBundle.WHOLE)
    if broken:
        gangs = ", ".join(f"{job} ({n} pod(s))" for job, n in sorted(broken.items()))
        msg += f"; gangs broken: {gangs}"
    else:
        msg += "; no gang broken"
    return msg


class EvictionGates(Protocol):
    """Where the executor reports each preemption's progress: the owner of the gate that
    holds the preemptor's job (the loop's scheduling queue). Called from the loop's task
    (the executor's background tasks run on it)."""

    def close_gate(
        self, job: str, victims: Iterable[str], devices: Iterable[str] = (), /
    ) -> GateTicket:
        """Hold ``job`` until this preemption's calls are done, ``victims`` (uids) are gone
        and no DRA claim holds devices for ``devices`` (uids of victims) any more; returns
        the ticket to hand back to :meth:`calls_done`."""
        ...

    def calls_done(self, ticket: GateTicket, failure: str | None = None, /) -> None:
        """The preemption of ``ticket`` ended its calls: well (None), or not (``failure``
        says why: the gate opens and the job may not preempt for a while)."""
        ...

    def victim_gone(self, uid: str, /) -> None:
        """A victim was found gone (NotFound) while evicting it."""
        ...


@dataclass(slots=True)
class PreemptionRun:
    """The calls of one preemptor of a :class:`~scheduler.framework.effects.Preemption`:
    its node, its victims, and where they stand."""

    preemptor: TaskInfo
    node: str
    victims: list[TaskInfo] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    nomination_effect: Nominate | None = None
    displaced: list[TaskInfo] = field(default_factory=list)
    """Lower-priority pods nominated to the node, whose nomination the ledger withdrew."""
    displaced_slots: list[WriteSlot] = field(default_factory=list)
    ticket: GateTicket | None = None
    """What :meth:`EvictionGates.close_gate` gave for this preemption's gate (set when
    the executor takes it on)."""
    nomination: WriteSlot | None = None
    """The preemptor's place in line for its ``nominatedNodeName`` write."""


@dataclass(frozen=True, slots=True)
class Notice:
    """What a victim is told: the ``DisruptionTarget`` condition's message, and the event
    (reason, message, related object) recorded once it is evicted."""

    disruption: str
    reason: str
    message: str
    related: ObjectRef | None = None

    @staticmethod
    def of(p: PreemptionRun) -> Notice:
        return Notice(
            disruption_message(p),
            "Preempted",
            preempted_message(p),
            ObjectRef.of_pod(p.preemptor),
        )


@dataclass(slots=True)
class DissolutionRun:
    """The calls of one :class:`~scheduler.framework.effects.Dissolution`."""

    job: str
    evictions: tuple[Evict, ...]
    notice: Notice
    ticket: GateTicket | None = None


@dataclass(slots=True)
class WriteSlot:
    """A place in one pod's line of ``nominatedNodeName`` writes: the write waits for
    ``after`` (the one before it, if any) and sets ``done`` when it is over."""

    uid: str
    after: anyio.Event | None
    done: anyio.Event = field(default_factory=anyio.Event)


class PreemptionExecutor:
    """Owned by the loop, which attaches it to its task group. One per scheduler."""

    def __init__(
        self,
        ledger: EffectLedger,
        dispatcher: ApiDispatcher,
        metrics: Metrics,
        *,
        gates: EvictionGates,
        async_enabled: bool,
        concurrency: int,
    ) -> None:
        self.ledger = ledger
        self.dispatcher = dispatcher
        """Makes every write (the loop's, which learns the outcome of lost replies)."""
        self.metrics = metrics
        self.gates = gates
        self.async_enabled = async_enabled
        self._limit = anyio.Semaphore(concurrency)
        self._tg: TaskGroup | None = None
        self._running = 0
        self._calling = 0
        self._calls_done = anyio.Event()
        self._calls_done.set()
        self._last_write: dict[str, anyio.Event] = {}
        """Per pod uid, the end of the last ``nominatedNodeName`` write in line."""

    @property
    def in_flight(self) -> int:
        """Background tasks of preemptions running: their calls, and clears of
        nominations (gates and backoffs are the scheduling queue's)."""
        return self._running

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    @staticmethod
    def runs(
        preemption: Preemption, displaced: Mapping[str, Sequence[TaskInfo]] | None = None
    ) -> list[PreemptionRun]:
        """The calls of ``preemption``, one run per nominated pod in decision order, each
        with its victims and the nominations its own withdrew (by the pod's uid)."""
        runs = []
        for n in preemption.nominations:
            evictions = list(preemption.victims_of(n.task))
            runs.append(
                PreemptionRun(
                    n.task,
                    n.node,
                    [e.task for e in evictions],
                    evictions,
                    n,
                    list((displaced or {}).get(n.task.uid, ())),
                )
            )
        return runs

    async def handle(
        self, effects: Sequence[Effect], displaced: Mapping[str, Sequence[TaskInfo]]
    ) -> None:
        """Act on one cycle's Preemption, Dissolution and ClearNomination effects, which the
        ledger has already assumed; ``displaced`` names, per preemptor uid, the
        lower-priority nominations its nomination withdrew. Called by the loop, in its
        task, once per cycle. Withdrawn nominations are cleared first, then each
        preemption's calls start (in decision order), then each dissolution's."""
        for e in effects:
            if isinstance(e, ClearNomination) and self._tg is not None:
                self._tg.start_soon(self._clear_nomination, e.task, self._line_up(e.task))
        for e in effects:
            if isinstance(e, Preemption):
                for p in self.runs(e, displaced):
                    self._gate(p)
                    await self._start(p.ticket, self._make_calls, p, f"preempt {p.preemptor.key}")
        for e in effects:
            if isinstance(e, Dissolution):
                self.metrics.gangs_dissolved.inc()
                d = DissolutionRun(e.job, e.evictions, dissolved_notice(e.job))
                victims = [v.task for v in d.evictions]
                d.ticket = self.gates.close_gate(
                    d.job,
                    [v.uid for v in victims if self.ledger.holds(v.uid)],
                    [v.uid for v in victims if self.ledger.holds_devices(v.uid)],
                )
                await self._start(d.ticket, self._dissolve, d, f"dissolve {d.job}")

    async def _start(
        self,
        ticket: GateTicket | None,
        calls: Callable[[T], Awaitable[str | None]],
        subject: T,
        name: str,
    ) -> None:
        """Run ``calls(subject)`` in the background (or now, with asynchronous preemption
        off), then report its outcome for ``ticket``'s gate."""
        if ticket is None:
            raise RuntimeError(f"{name} ran without a gate")
        if self.async_enabled:
            if self._tg is None:
                raise RuntimeError("preemption executor is not attached to a task group")
            self._running += 1
            self._tg.start_soon(self._run_async, ticket, calls, subject, name=name)
        else:
            self._running += 1
            try:
                failure = await self._calls(calls, subject)
            finally:
                self._running -= 1
            self.gates.calls_done(ticket, failure)

    def _gate(self, p: PreemptionRun) -> None:
        """Close (or join) the gate of ``p``'s job and line up its nomination writes."""
        if p.victims:
            if _is_reclaim(p):
                self.metrics.reclaim_attempts.inc()
            else:
                self.metrics.preemption_attempts.inc()
            for kind, count in Counter(e.bundle.value for e in p.evictions).items():
                self.metrics.preemption_victims.labels(kind).observe(count)
        victims = [v.uid for v in p.victims if self.ledger.holds(v.uid)]
        devices = [v.uid for v in p.victims if self.ledger.holds_devices(v.uid)]
        p.ticket = self.gates.close_gate(p.preemptor.job_id, victims, devices)
        p.displaced_slots = [self._line_up(t) for t in p.displaced]
        p.nomination = self._line_up(p.preemptor)

    def _line_up(self, task: TaskInfo) -> WriteSlot:
        """Reserve, now, ``task``'s next place in its line of ``nominatedNodeName``
        writes. Writes reach the API in the order of their reservations, which is the
        order of the decisions (a clear decided before a new nomination never lands
        after it), whatever each call's latency."""
        slot = WriteSlot(task.uid, self._last_write.get(task.uid))
        self._last_write[task.uid] = slot.done
        return slot

    async def _write_nomination(self, task: TaskInfo, node: str | None, slot: WriteSlot) -> None:
        """Write ``task``'s ``nominatedNodeName`` (None clears it) in its place in line.
        Raises what the call raises; the slot is released either way."""
        try:
            if slot.after is not None:
                await slot.after.wait()
            await self._patch_pod_status(ObjectRef.of_pod(task), {"nominatedNodeName": node})
        finally:
            self._release(slot)

    async def _patch_pod_status(self, ref: ObjectRef, patch: Mapping[str, object]) -> None:
        """Patch ``ref``'s status through the dispatcher; a lost reply is written again
        until known (:class:`~scheduler.dispatch.PodStatusPatch`). Raises what a refusal
        raises, or the AmbiguousError if the outcome is still unknown at the deadline."""
        await self.dispatcher.call(PodStatusPatch(ref, patch))

    def _release(self, slot: WriteSlot) -> None:
        """Let the write after ``slot`` go (idempotent)."""
        slot.done.set()
        if self._last_write.get(slot.uid) is slot.done:
            del self._last_write[slot.uid]

    async def _run_async(
        self, ticket: GateTicket, calls: Callable[[T], Awaitable[str | None]], subject: T
    ) -> None:
        try:
            async with self._limit:
                failure = await self._calls(calls, subject)
        finally:
            self._running -= 1
        self.gates.calls_done(ticket, failure)

    @property
    def calls_in_flight(self) -> int:
        """Preemptions whose API calls are running now (what a clean shutdown waits for)."""
        return self._calling

    async def calls_drained(self) -> None:
        """Return once no preemption's API calls are running (at once if none are)."""
        while self._calling:
            await self._calls_done.wait()

    async def _calls(self, calls: Callable[[T], Awaitable[str | None]], subject: T) -> str | None:
        """The API calls of one preemption or dissolution: None when all succeeded, else
        why not (counted while they run, for :meth:`calls_drained`)."""
        self._calling += 1
        if self._calls_done.is_set():
            self._calls_done = anyio.Event()
        try:
            return await calls(subject)
        finally:
            self._calling -= 1
            if self._calling == 0:
                self._calls_done.set()

    async def _make_calls(self, p: PreemptionRun) -> str | None:
        t0 = time.perf_counter()
        done: set[str] = set()
        slot = p.nomination or self._line_up(p.preemptor)
        try:
            await self._clear_lower_nominations(p)
            await self._evict_all(p.victims, Notice.of(p), done)
            await self._set_nomination(p.preemptor, p.node, slot)
        except Exception as exc:
            # An ApiError is expected; anything else is a bug, logged with its traceback,
            # and handled the same way so that no gate stays closed for it.
            if not isinstance(exc, ApiError):
                log.error("preemption calls crashed", pod=p.preemptor.key, exc_info=exc)
            self._revert(p, done, exc)
            self.metrics.preemption_executions.labels("error").inc()
            self.metrics.preemption_duration.labels("error").observe(time.perf_counter() - t0)
            return f"the last preemption failed: {exc}"
        finally:  # whatever happened, the pod's later writes must not wait for this one
            self._release(slot)
        if p.victims:
            self.dispatcher.record(
                Event(
                    ObjectRef.of_pod(p.preemptor),
                    "Normal",
                    "Preempting",
                    preemptor_message(p),
                    action="Preempting",
                )
            )
        self.metrics.preemption_executions.labels("success").inc()
        self.metrics.preemption_duration.labels("success").observe(time.perf_counter() - t0)
        return None

    async def _clear_lower_nominations(self, p: PreemptionRun) -> None:
        """Clear, in the API, the nominations the ledger withdrew for ``p`` (each in its
        place in that pod's line of writes)."""
        for t, slot in zip(p.displaced, p.displaced_slots, strict=True):
            with contextlib.suppress(NotFoundError):
                await self._write_nomination(t, None, slot)

    async def _dissolve(self, d: DissolutionRun) -> str | None:
        """The API calls of dissolution ``d``: None when every member is evicted, else
        why not (the members not evicted hold their room again)."""
        done: set[str] = set()
        try:
            await self._evict_all([e.task for e in d.evictions], d.notice, done)
        except Exception as exc:
            if not isinstance(exc, ApiError):
                log.error("dissolution calls crashed", job=d.job, exc_info=exc)
            self.metrics.api_errors.labels("preemption").inc()
            log.warning("dissolution failed", job=d.job, error=str(exc))
            for e in d.evictions:
                if e.task.uid not in done:
                    self.ledger.forget(e)
            return f"the last dissolution failed: {exc}"
        log.info("gang dissolved", job=d.job, pods=len(d.evictions))
        return None

    async def _evict_all(self, victims: Sequence[TaskInfo], notice: Notice, done: set[str]) -> None:
        """Evict ``victims`` at once (as kube-scheduler does), adding each one evicted (or
        found gone) to ``done``. Every call runs to its end, so ``done`` is exact; then
        the first failure, if any, is raised."""
        failures: list[ApiError] = []

        async def evict(victim: TaskInfo) -> None:
            try:
                await self._evict(victim, notice)
            except ApiError as exc:
                failures.append(exc)
            else:
                done.add(victim.uid)

        if len(victims) == 1:
            await evict(victims[0])
        else:
            async with anyio.create_task_group() as tg:
                for v in victims:
                    tg.start_soon(evict, v, name=f"evict {v.key}")
        if failures:
            raise failures[0]

    async def _evict(self, victim: TaskInfo, notice: Notice) -> None:
        ref = ObjectRef.of_pod(victim)
        condition = {
            "type": L.DISRUPTION_TARGET,
            "status": "True",
            "reason": L.REASON_PREEMPTION,
            "message": notice.disruption,
        }
        try:
            await self._patch_pod_status(ref, {"conditions": [condition]})
        except NotFoundError:
            self.gates.victim_gone(victim.uid)
            return
        try:
            await self.dispatcher.call(
                EvictPod(ref, shown=lambda: not self.ledger.holds(victim.uid))
            )
        except NotFoundError:
            self.gates.victim_gone(victim.uid)
            return
        except ApiError:
            # The pod stays: it must not stay marked as about to be disrupted.
            await self._cancel_disruption(ref)
            raise
        self.dispatcher.record(
            Event(
                ref,
                "Normal",
                notice.reason,
                notice.message,
                action="Preempting",
                related=notice.related,
            )
        )

    async def _cancel_disruption(self, ref: ObjectRef) -> None:
        """Set DisruptionTarget back to False on a victim whose eviction failed (best effort)."""
        condition = {
            "type": L.DISRUPTION_TARGET,
            "status": "False",
            "reason": "PreemptionCancelled",
            "message": "sluice: the eviction failed; the pod is not being preempted",
        }
        try:
            await self.dispatcher.call(PodStatusPatch(ref, {"conditions": [condition]}))
        except ApiError as exc:
            log.warning("could not reset DisruptionTarget", pod=ref.key, error=str(exc))

    async def _set_nomination(self, task: TaskInfo, node: str, slot: WriteSlot) -> None:
        # NotFound: the preemptor was deleted meanwhile; its victims are gone all the same.
        with contextlib.suppress(NotFoundError):
            await self._write_nomination(task, node, slot)

    def _revert(self, p: PreemptionRun, done: set[str], exc: Exception) -> None:
        self.metrics.api_errors.labels("preemption").inc()
        log.warning(
            "preemption failed; nomination reverted",
            pod=p.preemptor.key,
            node=p.node,
            error=str(exc),
        )
        for e in p.evictions:
            if e.task.uid not in done:
                self.ledger.forget(e)
        if p.nomination_effect is not None:
            self.ledger.forget(p.nomination_effect)
        if self._tg is not None:
            self._tg.start_soon(self._clear_nomination, p.preemptor, self._line_up(p.preemptor))

    async def _clear_nomination(self, task: TaskInfo, slot: WriteSlot) -> None:
        """Clear ``status.nominatedNodeName`` in the API (best effort, logged on failure)."""
        self._running += 1
        try:
            await self._write_nomination(task, None, slot)
        except NotFoundError:
            pass
        except ApiError as exc:
            log.warning("could not clear a nomination", pod=task.key, error=str(exc))
        finally:
            self._running -= 1
