"""PreemptionExecutor: the API calls of a preemption, and the gate that holds the preemptor
(layer 2).

It owns the gates and the backoffs, and shows them to each cycle as a read-only
:class:`~scheduler.api.snapshot.PreemptionState` (:meth:`PreemptionExecutor.view`, which
the loop hands to ``cache.snapshot``). It makes API calls and keeps gates, nothing else:
what the cache assumes of the effects is the loop's business, through the
:class:`~scheduler.framework.effects.EffectLedger` port, which the executor uses only to
undo the assumptions of a preemption that failed.

The loop hands it the Evict, Nominate and ClearNomination effects of each cycle, already
assumed (the victims releasing, the preemptor nominated, lower-priority nominations on
its node withdrawn: the ledger says which), with ``handle``. For each preemptor, at once:

1. the preemptor's job is gated: enqueue, allocate and preempt skip it.

Then, in a background task of this executor (at most ``concurrency`` at once), or awaited
inside the cycle when the feature gate ``SchedulerAsyncPreemption`` is off:

2. lower-priority pods nominated to the same node lose their nomination; each victim gets
   the condition ``DisruptionTarget=True`` (reason ``PreemptionByScheduler``), is deleted
   (NotFound counts as done) and gets a ``Preempted`` event; the preemptor gets
   ``status.nominatedNodeName`` and a ``Preempting`` event naming its victims and the
   gangs it broke;
3. the gate opens when the calls are done and every victim is gone (its deletion seen,
   :meth:`PreemptionExecutor.pod_deleted`) and no DRA claim holds devices for it any more
   (the claim controller released them, :meth:`PreemptionExecutor.devices_released`;
   the executor deallocates nothing itself); the loop is woken and places the preemptor
   on its nominated node. If deletions are not seen within ``gate_timeout`` seconds of
   the clock the gate opens anyway, so a missed event never holds a preemptor forever;
4. a call whose reply was lost (:class:`~scheduler.api.errors.AmbiguousError`) is not a
   failure until its outcome is known (:mod:`scheduler.preemption.outcomes`): a victim
   whose deletion took effect counts as evicted (never evicted again, never a reason to
   revert the nomination); a status patch is written again until it is known to hold;
5. if a call fails (refused, or ambiguous and then known not to have taken effect, or
   still unknown at the resolver's deadline) the gate opens at once, the nomination is
   reverted in the cache (the ledger forgets it) and cleared in the API, victims not yet
   deleted hold their room again, the job goes back to normal scheduling but may not
   preempt until its backoff ends (1 s, doubling to 60 s), and the failure is counted.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from scheduler.api import labels as L
from scheduler.api.errors import AmbiguousError, ApiError, NotFoundError
from scheduler.api.snapshot import Backoff, PreemptionState
from scheduler.api.task import TaskInfo
from scheduler.framework.effects import ClearNomination, Effect, EffectLedger, Evict, Nominate
from scheduler.logging import get_logger
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, Event, ObjectRef
from scheduler.preemption.outcomes import Outcome, OutcomeResolver

log = get_logger("sluice.preemption")

PREEMPTION_MESSAGE = "sluice: preempting to accommodate a higher priority pod"
RECLAIM_MESSAGE = "sluice: reclaiming resources for queue {queue!r}, which is below its share"


def _is_reclaim(p: Preemption) -> bool:
    return any(e.reason == "reclaimed" for e in p.evictions)


def disruption_message(p: Preemption) -> str:
    """The ``DisruptionTarget`` condition's message on ``p``'s victims."""
    if _is_reclaim(p):
        return RECLAIM_MESSAGE.format(queue=p.evictions[0].queue)
    return PREEMPTION_MESSAGE


def preempted_message(p: Preemption) -> str:
    """The ``Preempted`` event's message on ``p``'s victims."""
    if _is_reclaim(p):
        queue = p.evictions[0].queue
        return f"Reclaimed by queue {queue!r} for pod {p.preemptor.key} on node {p.node}"
    return f"Preempted by pod {p.preemptor.key} on node {p.node}"


def preemptor_message(p: Preemption) -> str:
    """The ``Preempting`` event's message on ``p``'s preemptor: how many victims on which
    node, and the gangs it broke (those whose members were taken as a Whole bundle)."""
    verb = "reclaiming" if _is_reclaim(p) else "preempting"
    names = ", ".join(v.key for v in p.victims[:5])
    more = f" and {len(p.victims) - 5} more" if len(p.victims) > 5 else ""
    msg = f"{verb} {len(p.victims)} pod(s) to run on node {p.node}: {names}{more}"
    broken = Counter(e.task.job_id for e in p.evictions if e.bundle == "whole")
    if broken:
        gangs = ", ".join(f"{job} ({n} pod(s))" for job, n in sorted(broken.items()))
        msg += f"; gangs broken: {gangs}"
    else:
        msg += "; no gang broken"
    return msg


@dataclass(slots=True)
class Preemption:
    """One preemptor, its node and its victims, as decided in one cycle."""

    preemptor: TaskInfo
    node: str
    victims: list[TaskInfo] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    nomination_effect: Nominate | None = None
    displaced: list[TaskInfo] = field(default_factory=list)
    """Lower-priority pods nominated to the node, whose nomination the ledger withdrew."""
    displaced_slots: list[WriteSlot] = field(default_factory=list)
    gate: Gate | None = None
    """The gate this preemption was counted in (a later one may replace it)."""
    nomination: WriteSlot | None = None
    """The preemptor's place in line for its ``nominatedNodeName`` write."""


@dataclass(slots=True)
class WriteSlot:
    """A place in one pod's line of ``nominatedNodeName`` writes: the write waits for
    ``after`` (the one before it, if any) and sets ``done`` when it is over."""

    uid: str
    after: anyio.Event | None
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass(slots=True)
class Gate:
    """Holds one job while its preemptions run. Opens when ``calls`` is 0 and
    ``waiting_for`` is empty, or on a failure, or on the timeout."""

    job: str
    waiting_for: set[str]
    """Victims (uids) whose deletion has not been seen yet."""
    waiting_devices: set[str] = field(default_factory=set)
    """Victims (uids) whose DRA claims still hold devices for them (the claim controller
    releases them after the deletion)."""
    calls: int = 0
    """Preemptions of this job whose API calls have not finished."""
    gone: anyio.Event = field(default_factory=anyio.Event)


class PreemptionExecutor:
    """Owned by the loop, which attaches it to its task group. One per scheduler."""

    def __init__(
        self,
        ledger: EffectLedger,
        ports: ClusterPorts,
        metrics: Metrics,
        *,
        async_enabled: bool,
        concurrency: int,
        wake: Callable[[], None],
        gate_timeout: float = 60.0,
        outcomes: OutcomeResolver | None = None,
    ) -> None:
        self.ledger = ledger
        self.outcomes = outcomes or OutcomeResolver(ports, metrics)
        """Learns the outcome of evictions and patches whose reply was lost (the loop's
        own resolver when the composition root hands it over)."""
        self.ports = ports
        self.metrics = metrics
        self.async_enabled = async_enabled
        self.wake = wake
        self.gate_timeout = gate_timeout
        self._limit = anyio.Semaphore(concurrency)
        self._tg: TaskGroup | None = None
        self.gates: dict[str, Gate] = {}
        self._running = 0
        self._calling = 0
        self._calls_done = anyio.Event()
        self._calls_done.set()
        self.initial_backoff = 1.0
        self.max_backoff = 60.0
        self._delays: dict[str, float] = {}
        """The last backoff delay of each job whose preemptions failed in a row."""
        self.backoffs: dict[str, Backoff] = {}
        """Jobs that may not preempt until ``until`` (a preemption of theirs failed)."""
        self._last_write: dict[str, anyio.Event] = {}
        """Per pod uid, the end of the last ``nominatedNodeName`` write in line."""

    def view(self) -> PreemptionState:
        """The gates and backoffs as the next cycle sees them (a copy, read-only)."""
        return PreemptionState(
            frozenset(self.gates),
            dict(self.backoffs),
            victims_left={job: len(g.waiting_for) for job, g in self.gates.items()},
            calls_left={job: g.calls for job, g in self.gates.items()},
        )

    @property
    def in_flight(self) -> int:
        """Preemptions whose calls are running or whose gate is still closed."""
        return self._running + len(self.gates)

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    @staticmethod
    def group(
        effects: Sequence[Effect], displaced: Mapping[str, Sequence[TaskInfo]] | None = None
    ) -> list[Preemption]:
        """Evict and Nominate effects grouped by preemptor, in decision order, with the
        nominations each Nominate displaced (by the preemptor's uid)."""
        by_uid: dict[str, Preemption] = {}
        orphans: list[Evict] = []
        for e in effects:
            if isinstance(e, Nominate):
                p = by_uid.setdefault(e.task.uid, Preemption(e.task, e.node))
                p.node, p.nomination_effect = e.node, e
                p.displaced = list((displaced or {}).get(e.task.uid, ()))
        for e in effects:
            if isinstance(e, Evict):
                if e.preemptor is not None and e.preemptor.uid in by_uid:
                    by_uid[e.preemptor.uid].victims.append(e.task)
                    by_uid[e.preemptor.uid].evictions.append(e)
                else:
                    orphans.append(e)
        if orphans:
            raise ValueError(f"evictions without a nominated preemptor: {orphans}")
        return list(by_uid.values())

    async def handle(
        self, effects: Sequence[Effect], displaced: Mapping[str, Sequence[TaskInfo]]
    ) -> None:
        """Act on one cycle's preemption effects, which the ledger has already assumed;
        ``displaced`` names, per preemptor uid, the lower-priority nominations its
        Nominate withdrew. Called by the loop, in its task, once per cycle."""
        for e in effects:
            if isinstance(e, ClearNomination) and self._tg is not None:
                self._tg.start_soon(self._clear_nomination, e.task, self._line_up(e.task))
        for p in self.group(effects, displaced):
            self._gate(p)
            if self.async_enabled:
                if self._tg is None:
                    raise RuntimeError("preemption executor is not attached to a task group")
                self._running += 1
                self._tg.start_soon(self._run_async, p, name=f"preempt {p.preemptor.key}")
            else:
                self._running += 1
                try:
                    ok = await self._calls(p)
                finally:
                    self._running -= 1
                self._after_calls(p, ok)

    def _gate(self, p: Preemption) -> None:
        """Close (or join) the gate of ``p``'s job and line up its nomination writes."""
        if p.victims:
            if _is_reclaim(p):
                self.metrics.reclaim_attempts.inc()
            else:
                self.metrics.preemption_attempts.inc()
            for kind, count in Counter(e.bundle or "pod" for e in p.evictions).items():
                self.metrics.preemption_victims.labels(kind).observe(count)
        job = p.preemptor.job_id
        gate = self.gates.get(job)
        if gate is None:
            self.gates[job] = gate = Gate(job, set())
        gate.waiting_for.update(v.uid for v in p.victims if self.ledger.holds(v.uid))
        gate.waiting_devices.update(v.uid for v in p.victims if self.ledger.holds_devices(v.uid))
        gate.calls += 1
        p.gate = gate
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
        """Patch ``ref``'s status; a lost reply is written again until known (the patch
        is idempotent). Raises what a refusal raises, or the AmbiguousError if the
        outcome is still unknown at the resolver's deadline."""

        async def write() -> None:
            await self.ports.status.patch_pod_status(ref, patch)

        try:
            await write()
        except AmbiguousError as exc:
            await self.outcomes.patch(ref, exc, write)

    def _release(self, slot: WriteSlot) -> None:
        """Let the write after ``slot`` go (idempotent)."""
        slot.done.set()
        if self._last_write.get(slot.uid) is slot.done:
            del self._last_write[slot.uid]

    async def _run_async(self, p: Preemption) -> None:
        try:
            async with self._limit:
                ok = await self._calls(p)
        finally:
            self._running -= 1
        self._after_calls(p, ok)

    def _after_calls(self, p: Preemption, ok: bool) -> None:
        gate = p.gate
        if gate is None or self.gates.get(gate.job) is not gate:
            return  # that gate was opened already (an earlier failure); a new one is not ours
        gate.calls -= 1
        if not ok:
            self._open(gate)
        elif not self._maybe_open(gate) and gate.calls == 0 and self._tg is not None:
            self._tg.start_soon(self._await_deletions, gate, name=f"gate {gate.job}")

    async def _await_deletions(self, gate: Gate) -> None:
        """Open the gate after ``gate_timeout`` if the deletions are never seen."""
        self._running += 1
        try:
            with anyio.move_on_after(self.gate_timeout):
                await gate.gone.wait()
        finally:
            self._running -= 1
        if self.gates.get(gate.job) is gate:
            log.warning(
                "victims not seen deleted in time; opening the gate",
                job=gate.job,
                waiting_for=sorted(gate.waiting_for),
            )
            self._open(gate)

    def _maybe_open(self, gate: Gate) -> bool:
        if gate.calls == 0 and not gate.waiting_for and not gate.waiting_devices:
            self._open(gate)
            return True
        return False

    def pod_deleted(self, uid: str) -> None:
        """A pod's deletion was seen (the composition root makes this a cache listener;
        it runs inside the cache's event handling, synchronously)."""
        for gate in list(self.gates.values()):
            if uid in gate.waiting_for:
                gate.waiting_for.discard(uid)
                self._maybe_open(gate)

    def devices_released(self, uid: str) -> None:
        """No DRA claim holds devices for pod ``uid`` any more (a cache listener, like
        :meth:`pod_deleted`)."""
        for gate in list(self.gates.values()):
            if uid in gate.waiting_devices:
                gate.waiting_devices.discard(uid)
                self._maybe_open(gate)

    def _open(self, gate: Gate) -> None:
        if self.gates.get(gate.job) is gate:
            del self.gates[gate.job]
            gate.gone.set()
            self.wake()

    @property
    def calls_in_flight(self) -> int:
        """Preemptions whose API calls are running now (what a clean shutdown waits for)."""
        return self._calling

    async def calls_drained(self) -> None:
        """Return once no preemption's API calls are running (at once if none are)."""
        while self._calling:
            await self._calls_done.wait()

    async def _calls(self, p: Preemption) -> bool:
        """The API calls of one preemption. True when all succeeded."""
        self._calling += 1
        if self._calls_done.is_set():
            self._calls_done = anyio.Event()
        try:
            return await self._make_calls(p)
        finally:
            self._calling -= 1
            if self._calling == 0:
                self._calls_done.set()

    async def _make_calls(self, p: Preemption) -> bool:
        t0 = time.perf_counter()
        done: set[str] = set()
        slot = p.nomination or self._line_up(p.preemptor)
        try:
            await self._clear_lower_nominations(p)
            await self._evict_all(p, done)
            await self._set_nomination(p.preemptor, p.node, slot)
        except Exception as exc:
            # An ApiError is expected; anything else is a bug, logged with its traceback,
            # and handled the same way so that no gate stays closed for it.
            if not isinstance(exc, ApiError):
                log.error("preemption calls crashed", pod=p.preemptor.key, exc_info=exc)
            self._revert(p, done, exc)
            self.metrics.preemption_executions.labels("error").inc()
            self.metrics.preemption_duration.labels("error").observe(time.perf_counter() - t0)
            return False
        finally:  # whatever happened, the pod's later writes must not wait for this one
            self._release(slot)
        self._delays.pop(p.preemptor.job_id, None)
        if p.victims:
            self.ports.events.record(
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
        return True

    async def _clear_lower_nominations(self, p: Preemption) -> None:
        """Clear, in the API, the nominations the ledger withdrew for ``p`` (each in its
        place in that pod's line of writes)."""
        for t, slot in zip(p.displaced, p.displaced_slots, strict=True):
            with contextlib.suppress(NotFoundError):
                await self._write_nomination(t, None, slot)

    async def _evict_all(self, p: Preemption, done: set[str]) -> None:
        """Evict the victims of ``p`` at once (as kube-scheduler does), adding each one
        evicted (or found gone) to ``done``. Every call runs to its end, so ``done`` is
        exact; then the first failure, if any, is raised."""
        failures: list[ApiError] = []

        async def evict(victim: TaskInfo) -> None:
            try:
                await self._evict(p, victim)
            except ApiError as exc:
                failures.append(exc)
            else:
                done.add(victim.uid)

        if len(p.victims) == 1:
            await evict(p.victims[0])
        else:
            async with anyio.create_task_group() as tg:
                for v in p.victims:
                    tg.start_soon(evict, v, name=f"evict {v.key}")
        if failures:
            raise failures[0]

    async def _evict(self, p: Preemption, victim: TaskInfo) -> None:
        ref = ObjectRef.of_pod(victim)
        condition = {
            "type": L.DISRUPTION_TARGET,
            "status": "True",
            "reason": L.REASON_PREEMPTION,
            "message": disruption_message(p),
        }
        try:
            await self._patch_pod_status(ref, {"conditions": [condition]})
        except NotFoundError:
            self.pod_deleted(victim.uid)
            return
        try:
            await self.ports.evictor.evict(ref)
        except NotFoundError:
            self.pod_deleted(victim.uid)
            return
        except AmbiguousError as exc:
            outcome = await self.outcomes.eviction(
                ref, exc, shown=lambda: not self.ledger.holds(victim.uid)
            )
            if outcome is not Outcome.TOOK_EFFECT:
                await self._cancel_disruption(ref)
                raise
        except ApiError:
            # The pod stays: it must not stay marked as about to be disrupted.
            await self._cancel_disruption(ref)
            raise
        self.ports.events.record(
            Event(
                ref,
                "Normal",
                "Preempted",
                preempted_message(p),
                action="Preempting",
                related=ObjectRef.of_pod(p.preemptor),
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
            await self.ports.status.patch_pod_status(ref, {"conditions": [condition]})
        except ApiError as exc:
            log.warning("could not reset DisruptionTarget", pod=ref.key, error=str(exc))

    async def _set_nomination(self, task: TaskInfo, node: str, slot: WriteSlot) -> None:
        # NotFound: the preemptor was deleted meanwhile; its victims are gone all the same.
        with contextlib.suppress(NotFoundError):
            await self._write_nomination(task, node, slot)

    def _revert(self, p: Preemption, done: set[str], exc: Exception) -> None:
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
                gate = self.gates.get(p.preemptor.job_id)
                if gate is not None:
                    gate.waiting_for.discard(e.task.uid)
        if p.nomination_effect is not None:
            self.ledger.forget(p.nomination_effect)
        if self._tg is not None:
            self._tg.start_soon(self._clear_nomination, p.preemptor, self._line_up(p.preemptor))
            self._back_off(p.preemptor.job_id, f"the last preemption failed: {exc}")

    def _back_off(self, job: str, why: str) -> None:
        """Keep ``job`` from preempting for a while after a failure (1 s, doubling to
        ``max_backoff``), so a call that keeps failing is not retried in a tight loop.
        It is still scheduled normally meanwhile."""
        delay = min(self.max_backoff, self._delays.get(job, self.initial_backoff / 2) * 2)
        self._delays[job] = delay
        backoff = Backoff(why, delay, self.ports.clock.now() + delay)
        self.backoffs[job] = backoff
        assert self._tg is not None
        self._tg.start_soon(self._lift_backoff, job, backoff, name=f"backoff {job}")

    async def _lift_backoff(self, job: str, backoff: Backoff) -> None:
        self._running += 1
        try:
            await self.ports.clock.sleep(backoff.delay)
        finally:
            self._running -= 1
        if self.backoffs.get(job) is backoff:
            del self.backoffs[job]
        self.wake()

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
