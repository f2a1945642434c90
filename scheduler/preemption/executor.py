"""PreemptionExecutor: the API calls of a preemption, and the gate that holds the preemptor.

The loop hands it the Evict and Nominate effects of each cycle (``handle``). For each
preemptor, at once and synchronously:

1. the cache marks the victims releasing and the preemptor nominated to its node, so the
   next cycle already accounts for both;
2. the preemptor's job is gated: enqueue, allocate and preempt skip it.

Then, in a background task of this executor (at most ``concurrency`` at once), or awaited
inside the cycle when the feature gate ``SchedulerAsyncPreemption`` is off:

3. lower-priority pods nominated to the same node lose their nomination; each victim gets
   the condition ``DisruptionTarget=True`` (reason ``PreemptionByScheduler``), is deleted
   (NotFound counts as done) and gets a ``Preempted`` event; the preemptor gets
   ``status.nominatedNodeName``;
4. the gate opens when the calls are done and every victim is gone (its deletion seen);
   the loop is woken and places the preemptor on its nominated node. If deletions are
   not seen within ``gate_timeout`` seconds of the clock the gate opens anyway, so a
   missed event never holds a preemptor forever;
5. if a call fails the gate opens at once, the nomination is reverted in the cache and
   cleared in the API, victims not yet deleted hold their room again, the job goes back
   to normal scheduling, and the failure is counted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from scheduler.api import labels as L
from scheduler.api.errors import ApiError, NotFoundError
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.framework.effects import ClearNomination, Effect, Evict, Nominate
from scheduler.framework.session import Session
from scheduler.logging import get_logger
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, Event, ObjectRef

log = get_logger("sluice.preemption")

PREEMPTION_MESSAGE = "sluice: preempting to accommodate a higher priority pod"


def _ref(task: TaskInfo) -> ObjectRef:
    return ObjectRef("Pod", task.namespace, task.name, task.uid)


@dataclass(slots=True)
class Preemption:
    """One preemptor, its node and its victims, as decided in one cycle."""

    preemptor: TaskInfo
    node: str
    victims: list[TaskInfo] = field(default_factory=list)
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
    calls: int = 0
    """Preemptions of this job whose API calls have not finished."""
    gone: anyio.Event = field(default_factory=anyio.Event)


class PreemptionExecutor:
    """Owned by the loop, which attaches it to its task group. One per scheduler."""

    def __init__(
        self,
        cache: SchedulerCache,
        ports: ClusterPorts,
        metrics: Metrics,
        *,
        async_enabled: bool,
        concurrency: int,
        wake: Callable[[], None],
        gate_timeout: float = 60.0,
    ) -> None:
        self.cache = cache
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
        self._backoffs: dict[str, float] = {}
        self._last_write: dict[str, anyio.Event] = {}
        """Per pod uid, the end of the last ``nominatedNodeName`` write in line."""
        cache.on_pod_deleted.append(self._pod_deleted)

    @property
    def in_flight(self) -> int:
        """Preemptions whose calls are running or whose gate is still closed."""
        return self._running + len(self.gates)

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    @staticmethod
    def group(effects: list[Effect]) -> list[Preemption]:
        """Evict and Nominate effects grouped by preemptor, in decision order."""
        by_uid: dict[str, Preemption] = {}
        orphans: list[Evict] = []
        for e in effects:
            if isinstance(e, Nominate):
                by_uid.setdefault(e.task.uid, Preemption(e.task, e.node)).node = e.node
        for e in effects:
            if isinstance(e, Evict):
                if e.preemptor is not None and e.preemptor.uid in by_uid:
                    by_uid[e.preemptor.uid].victims.append(e.task)
                else:
                    orphans.append(e)
        if orphans:
            raise ValueError(f"evictions without a nominated preemptor: {orphans}")
        return list(by_uid.values())

    async def handle(self, session: Session, effects: list[Effect]) -> None:
        """Act on one cycle's preemption effects. Called by the loop, in its task."""
        del session
        for e in effects:
            if isinstance(e, ClearNomination):
                self.cache.forget_nomination(e.task.uid)
                if self._tg is not None:
                    self._tg.start_soon(self._clear_nomination, e.task, self._line_up(e.task))
        for p in self.group(effects):
            self._assume(p)
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

    def _assume(self, p: Preemption) -> None:
        for v in p.victims:
            self.cache.assume_evict(v.uid)
        self.cache.assume_nomination(p.preemptor.uid, p.node)
        if p.victims:
            self.metrics.preemption_attempts.inc()
            self.metrics.preemption_victims.observe(len(p.victims))
        job = p.preemptor.job_id
        gate = self.gates.get(job)
        if gate is None:
            self.gates[job] = gate = Gate(job, set())
            self.cache.gated.add(job)
        gate.waiting_for.update(v.uid for v in p.victims if v.uid in self.cache.tasks)
        gate.calls += 1
        p.gate = gate
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
            await self.ports.status.patch_pod_status(_ref(task), {"nominatedNodeName": node})
        finally:
            self._release(slot)

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
        if gate.calls == 0 and not gate.waiting_for:
            self._open(gate)
            return True
        return False

    def _pod_deleted(self, uid: str) -> None:
        """Cache listener: a pod's deletion was seen. Runs inside the cache's event."""
        for gate in list(self.gates.values()):
            if uid in gate.waiting_for:
                gate.waiting_for.discard(uid)
                self._maybe_open(gate)

    def _open(self, gate: Gate) -> None:
        if self.gates.get(gate.job) is gate:
            del self.gates[gate.job]
            self.cache.gated.discard(gate.job)
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
        self._backoffs.pop(p.preemptor.job_id, None)
        self.metrics.preemption_executions.labels("success").inc()
        self.metrics.preemption_duration.labels("success").observe(time.perf_counter() - t0)
        return True

    async def _clear_lower_nominations(self, p: Preemption) -> None:
        node = self.cache.nodes.get(p.node)
        if node is None:
            return
        lower = [
            t
            for t in node.tasks.values()
            if t.status is TaskStatus.PIPELINED
            and t.uid != p.preemptor.uid
            and t.priority < p.preemptor.priority
        ]
        for t in lower:
            self.cache.forget_nomination(t.uid)
            with contextlib.suppress(NotFoundError):
                await self._write_nomination(t, None, self._line_up(t))

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
        ref = _ref(victim)
        condition = {
            "type": L.DISRUPTION_TARGET,
            "status": "True",
            "reason": L.REASON_PREEMPTION,
            "message": PREEMPTION_MESSAGE,
        }
        try:
            await self.ports.status.patch_pod_status(ref, {"conditions": [condition]})
        except NotFoundError:
            self._pod_deleted(victim.uid)
            return
        try:
            await self.ports.evictor.evict(ref)
        except NotFoundError:
            self._pod_deleted(victim.uid)
            return
        except ApiError:
            # The pod stays: it must not stay marked as about to be disrupted.
            await self._cancel_disruption(ref)
            raise
        self.ports.events.record(
            Event(
                ref,
                "Normal",
                "Preempted",
                f"Preempted by pod {p.preemptor.key} on node {p.node}",
                action="Preempting",
                related=_ref(p.preemptor),
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
        for v in p.victims:
            if v.uid not in done:
                self.cache.forget_evict(v.uid)
                gate = self.gates.get(p.preemptor.job_id)
                if gate is not None:
                    gate.waiting_for.discard(v.uid)
        self.cache.forget_nomination(p.preemptor.uid)
        if self._tg is not None:
            self._tg.start_soon(self._clear_nomination, p.preemptor, self._line_up(p.preemptor))
            self._back_off(p.preemptor.job_id, f"the last preemption failed: {exc}")

    def _back_off(self, job: str, why: str) -> None:
        """Keep ``job`` from preempting for a while after a failure (1 s, doubling to
        ``max_backoff``), so a call that keeps failing is not retried in a tight loop.
        It is still scheduled normally meanwhile."""
        delay = min(self.max_backoff, self._backoffs.get(job, self.initial_backoff / 2) * 2)
        self._backoffs[job] = delay
        self.cache.preempt_backoff[job] = f"{why}; preemption retried in {delay:g}s"
        assert self._tg is not None
        self._tg.start_soon(self._lift_backoff, job, delay, name=f"backoff {job}")

    async def _lift_backoff(self, job: str, delay: float) -> None:
        self._running += 1
        try:
            await self.ports.clock.sleep(delay)
        finally:
            self._running -= 1
        self.cache.preempt_backoff.pop(job, None)
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
