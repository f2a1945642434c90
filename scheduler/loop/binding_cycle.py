"""BindingCycle: the binds a cycle decided, with the volume and DRA claim writes made
before them (layer 3).

Job: take each :class:`~scheduler.framework.effects.Bind` through kube-scheduler's
binding cycle in the background (PreBind: the pod's volumes written, then waited for
until the PV controller has bound their claims, then its DRA claims written; then the
binding), and leave the cache true to what happened: a refusal forgets the assumed pod
(a later cycle tries it again) after its ``PodScheduled`` condition says why; a lost
reply keeps it until its outcome is learnt (the dispatcher's calls read it back); a pod
the API server says is bound to another node holds its room there; a claim written for
a bind that failed is withdrawn. Also clears the claims nobody holds any more
(kube-scheduler's PostFilter for DRA).

Owned by the :class:`~scheduler.loop.scheduler_loop.SchedulingLoop`: called from its task
only. Each bind's steps run in tasks of the loop's ``binds`` pool (the wait for the PV
controller in its pool of ``waits``) and make their writes through the API dispatcher
(:mod:`scheduler.dispatch`), as do the claim withdrawals and deallocations (submitted
to it). Failures are counted and logged through ``on_failed`` (the loop's), never raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import structlog

from scheduler.api.dra.codec import extended_status
from scheduler.api.dra.model import ClaimBinding, ClaimInfo
from scheduler.api.errors import (
    AmbiguousError,
    ApiError,
    ConflictError,
    InvariantError,
    NamespaceTerminatingError,
    NotFoundError,
)
from scheduler.api.task import TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.dispatch import (
    ApiDispatcher,
    BindPod,
    CreateClaim,
    DeallocateClaim,
    DeleteClaim,
    PodStatusPatch,
    ReserveClaim,
    Ticket,
    UnreserveClaim,
)
from scheduler.framework.effects import Bind, EffectLedger
from scheduler.framework.session import Session
from scheduler.logging import get_logger
from scheduler.loop.queue import JobQueue
from scheduler.loop.stale_claims import stale_claims, stale_extended_claims
from scheduler.loop.status import StatusReporter
from scheduler.loop.volume_waits import VolumeWaits
from scheduler.loop.volume_writes import VolumeWriteFailed, VolumeWrites
from scheduler.loop.workers import WorkerPool
from scheduler.metrics import PROFILE, Metrics
from scheduler.ports import Event, ObjectRef

log = get_logger("sluice.loop")


class BindingCycle:
    """See the module docstring."""

    def __init__(
        self,
        dispatcher: ApiDispatcher,
        cache: SchedulerCache,
        metrics: Metrics,
        *,
        binds: WorkerPool,
        waits: WorkerPool,
        status: StatusReporter,
        queue: JobQueue,
        on_failed: Callable[[str, Exception], None],
    ) -> None:
        self._dispatcher = dispatcher
        self._cache = cache
        self._ledger: EffectLedger = cache
        """Where binds were assumed, and are forgotten when their call fails."""
        self._metrics = metrics
        self._binds = binds
        self._waits = waits
        """Where binds wait for the PV controller to bind their claims."""
        self._volume_waits = VolumeWaits(cache)
        self._volume_writes = VolumeWrites(dispatcher)
        self._status = status
        self._queue = queue
        """Told of refused binds (the job backs off) and of binds that landed."""
        self._on_failed = on_failed
        self._deallocating: set[str] = set()
        """DRA claims whose deallocation or deletion is in flight."""
        self.binds_landed = 0
        """Binds that landed so far; the first is logged (``first bind``: a start's last
        phase)."""

    def bind(self, effect: Bind) -> None:
        """Submit the bind of ``effect`` (assumed already). A refusal forgets it (the pod is
        retried); a lost reply keeps it until the outcome is learnt (:class:`~scheduler.
        dispatch.BindPod`): took effect, it stays bound; did not (or unknown at the
        deadline), it is forgotten. A 409 saying the pod is already on the node chosen is
        success (an earlier attempt's reply was lost); one naming another node, or a read
        showing it there, is knowledge: the pod holds its room there
        (:meth:`_bound_elsewhere`). A binding never sent (an eviction of the pod took its
        place in the dispatcher's line) is forgotten.

        A bind with volumes to bind goes in three steps, as kube-scheduler's PreBind:
        their writes (in the binds pool), the wait until the PV controller has bound the
        claims (in the pool of waits, holding no bind worker), then the claims and the
        binding (in the binds pool again)."""
        task = effect.task
        ref = ObjectRef.of_pod(task)
        label = f"bind {ref.key}"
        t0 = time.perf_counter()

        async def bind() -> None:
            with structlog.contextvars.bound_contextvars(pod=ref.key, job=task.job_id):
                await self._bind_pod(effect, ref, t0)

        volumes = effect.volumes
        if volumes is None:
            self._binds.submit(label, bind)
            return

        async def write() -> None:
            with structlog.contextvars.bound_contextvars(pod=ref.key, job=task.job_id):
                try:
                    written = await self._volume_writes.write(volumes)
                except VolumeWriteFailed as failed:
                    await self._volumes_failed(effect, ref, str(failed), failed.error)
                    return
            self._waits.submit(label, lambda: wait(written))

        async def wait(written: dict[str, str]) -> None:
            status = await self._volume_waits.wait(volumes, task.uid, written)
            if status.failed:
                with structlog.contextvars.bound_contextvars(pod=ref.key, job=task.job_id):
                    await self._volumes_failed(effect, ref, f"binding volumes: {status.failed}")
                return
            self._binds.submit(label, bind)

        self._binds.submit(label, write)

    async def _bind_pod(self, effect: Bind, ref: ObjectRef, t0: float) -> None:
        """The DRA claims of ``effect``, then its binding (see :meth:`bind`)."""
        task = effect.task
        written = await self._write_claims(effect, ref) if effect.claims else ()
        if written is None:
            return
        call = BindPod(
            ref,
            effect.node,
            effect.annotations,
            shown=lambda: self._shown_bound(task.uid, effect.node),
        )
        try:
            node = await self._dispatcher.call(call)
        except NotFoundError:
            self._ledger.forget(effect)  # the pod is gone; its DELETED event follows
            self._metrics.binds.labels("gone").inc()
            self._unreserve(written)
            return
        except AmbiguousError as exc:
            # not known to be there, maybe on another node: nothing said on it
            await self._bind_failed(effect, ref, exc, say=False)
            self._unreserve(written)
            return
        except ApiError as exc:
            # refused, or a conflict (the pod changed: nothing said on it)
            await self._bind_failed(effect, ref, exc, say=not isinstance(exc, ConflictError))
            self._unreserve(written)
            return
        if node is None:
            # not sent: an eviction of the pod took its place in the pod's line
            self._ledger.forget(effect)
            self._metrics.binds.labels("superseded").inc()
            self._unreserve(written)
            return
        if node != effect.node:
            self._bound_elsewhere(effect, node)
            self._unreserve(written)
            return
        self._bound(effect, ref, t0)

    async def _volumes_failed(
        self, effect: Bind, ref: ObjectRef, what: str, exc: Exception | None = None
    ) -> None:
        """Binding ``effect``'s volumes failed (a write refused, the wait timed out, the PV
        controller undid something): the pod says why, its bind is forgotten (the volume
        writes' assumptions with it; what was written stays, as kube-scheduler leaves it:
        the next attempt finds the PV pre-bound to the claim, or the claim's node
        selected) and it is tried again, after its job's backoff unless a write met a
        conflict (the object changed: tried again at once). A pod gone meanwhile is
        forgotten without a word."""
        if effect.task.uid not in self._cache.tasks:
            self._ledger.forget(effect)  # the pod is gone: nothing to say, nobody to retry
            self._metrics.binds.labels("gone").inc()
            return
        message = f"Binding rejected: {what}"
        if exc is None or _refused(exc):
            self._queue.bind_refused(effect.task.job_id, message)
        await self._status.bind_failed(effect.task, message)
        self._ledger.forget(effect)
        self._metrics.binds.labels("error").inc()
        self._on_failed("volume", exc if exc is not None else TimeoutError(what))
        self._metrics.schedule_attempts.labels("error", PROFILE).inc()
        self._dispatcher.record(Event(ref, "Warning", "FailedScheduling", message))

    async def _write_claims(self, effect: Bind, ref: ObjectRef) -> Sequence[ClaimBinding] | None:
        """Write the claims of ``effect`` before its binding, one after the other, as
        kube-scheduler's PreBind does (allocation, reservation; for the claim of a pod's
        extended resources: create it, write it, then name it in the pod's
        ``status.extendedResourceClaimStatus``). Returns the bindings written; None when
        one failed, after the bind is forgotten (retried later) and what was written is
        withdrawn (reservations removed, a claim created deleted). A write whose reply was
        lost is read back: the claim reserved for the pod means it took effect. A create
        whose reply was lost fails: a claim it made is found and deleted by a later cycle
        (:func:`~scheduler.loop.stale_claims.stale_extended_claims`)."""
        written: list[ClaimBinding] = []
        for binding in effect.claims:
            target = binding
            try:
                if binding.extended is not None:
                    target = await self._dispatcher.call(CreateClaim(binding))
                    written.append(target)  # deleted again if anything after fails
                await self._dispatcher.call(ReserveClaim(target))
            except (ApiError, InvariantError) as exc:
                await self._claim_failed(effect, ref, target, exc, written)
                return None
            self._ledger.claim_written(target)
            if target.extended is None:
                written.append(target)
                continue
            try:
                await self._dispatcher.call(PodStatusPatch(ref, extended_status(target)))
            except ApiError as exc:
                what = f"naming ResourceClaim {target.key} in the pod's status"
                await self._claim_failed(effect, ref, target, exc, written, what=what)
                return None
        return written

    async def _claim_failed(
        self,
        effect: Bind,
        ref: ObjectRef,
        binding: ClaimBinding,
        exc: Exception,
        written: Sequence[ClaimBinding],
        *,
        what: str = "",
    ) -> None:
        """A claim write of ``effect`` failed (the binding was not tried): the pod says
        why, then its bind is forgotten (see :meth:`_bind_failed`)."""
        if not what:
            claim = binding.key if binding.name else "for its extended resources"
            what = f"writing ResourceClaim {claim}"
        message = f"Binding rejected: {what}: {exc}"
        if _refused(exc):
            self._queue.bind_refused(effect.task.job_id, message)
        await self._status.bind_failed(effect.task, message)
        self._ledger.forget(effect)
        self._metrics.binds.labels("error").inc()
        self._on_failed("claim", exc)
        self._metrics.schedule_attempts.labels("error", PROFILE).inc()
        self._dispatcher.record(Event(ref, "Warning", "FailedScheduling", message))
        self._unreserve(written)

    def _unreserve(self, written: Sequence[ClaimBinding]) -> None:
        """Withdraw the reservations of a pod whose bind failed after its claims were
        written (kube-scheduler's Unreserve); the allocations stay (the pod's next
        attempt uses them, or the claim controller releases them), but a claim made for
        the pod's extended resources is deleted. Best effort, in the background: a
        failure is logged (a claim left is deleted by a later cycle)."""
        for binding in written:
            if binding.extended is not None:
                self._delete_claim(binding.namespace, binding.name, binding.uid)
                continue
            self._dispatcher.submit(UnreserveClaim(binding), self._claim_written_back)

    def _claim_written_back(self, ticket: Ticket) -> None:
        if ticket.error is not None and not isinstance(ticket.error, NotFoundError):
            self._on_failed("claim", ticket.error)

    def _delete_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete, in the background, a claim made for a pod's extended resources
        (:meth:`~scheduler.ports.ClaimWriter.delete_claim`); once at a time per claim,
        NotFound counting as done."""
        key = f"{namespace}/{name}"
        if key in self._deallocating:
            return
        self._deallocating.add(key)

        def done(ticket: Ticket) -> None:
            self._deallocating.discard(key)
            if ticket.error is None and not ticket.superseded:
                log.info("deleted a claim made for extended resources", claim=key)
            self._claim_written_back(ticket)

        self._dispatcher.submit(DeleteClaim(namespace, name, uid), done)

    def release_stale_claims(self, session: Session) -> None:
        """Clear the allocation of the claims :func:`~scheduler.loop.stale_claims.
        stale_claims` picks (kube-scheduler's PostFilter), in the background; a failure
        (a conflict: the claim changed) is logged, and the next cycle looks again."""
        if session.snapshot.dra is None or not self._dispatcher.writes_claims:
            return
        unschedulable = {
            t.uid
            for job in session.jobs.values()
            for t in job.tasks.values()
            if t.uid in session.task_reasons or job.uid in session.job_reasons
        }
        view = session.snapshot.dra
        for claim in stale_extended_claims(view, session.jobs, unschedulable.__contains__):
            self._delete_claim(claim.namespace, claim.name, claim.uid)
        stale = stale_claims(
            view, session.jobs, unschedulable.__contains__, self._cache.dra.assumed
        )
        for claim in stale:
            if claim.key in self._deallocating:
                continue
            self._deallocating.add(claim.key)

            def done(ticket: Ticket, c: ClaimInfo = claim) -> None:
                self._deallocating.discard(c.key)
                if ticket.error is None and not ticket.superseded:
                    log.info("deallocated a claim nobody holds", claim=c.key)
                elif ticket.error is not None:
                    self._on_failed("claim", ticket.error)

            call = DeallocateClaim(claim.namespace, claim.name, claim.uid, claim.resource_version)
            self._dispatcher.submit(call, done)

    def _shown_bound(self, uid: str, node: str) -> bool:
        """Do the events show pod ``uid`` bound to ``node`` (no longer only assumed)?"""
        task = self._cache.tasks.get(uid)
        return task is not None and task.node_name == node and task.status is not TaskStatus.BINDING

    async def _bind_failed(self, effect: Bind, ref: ObjectRef, exc: ApiError, *, say: bool) -> None:
        """The bind of ``effect`` failed: with ``say`` (refused: the pod is known not to be
        bound; not after a lost reply, whose read may show it on another node), its
        ``PodScheduled`` condition says why first (reason SchedulerError, as
        kube-scheduler's failure handler writes), so a pod whose binds keep failing is
        not pending without a reason; then the bind is forgotten, and the pod is tried
        again by a later cycle, whose bind cannot land before that write: after the job's
        backoff when the bind was refused (the API server answered no), at once after a
        conflict or a lost reply. A pod whose namespace is being deleted
        (NamespaceTerminatingError) gets neither that condition nor a ``FailedScheduling``
        Event: its deletion follows."""
        message = f"Binding rejected: {exc}"
        going = isinstance(exc, NamespaceTerminatingError)  # the pod's deletion follows
        refused = _refused(exc)
        if refused:
            self._queue.bind_refused(effect.task.job_id, message)
        if say and not going:
            await self._status.bind_failed(effect.task, message)
        self._ledger.forget(effect)
        self._metrics.binds.labels("error").inc()
        self._on_failed("bind", exc)
        self._metrics.schedule_attempts.labels("error", PROFILE).inc()
        if refused and not going:
            self._dispatcher.record(Event(ref, "Warning", "FailedScheduling", message))

    def _bound_elsewhere(self, effect: Bind, node: str) -> None:
        """The API server says the pod of ``effect`` is bound to ``node``, not the node
        chosen: another replica bound it (a leader that outlived its Lease) and the events
        have not shown it. Its room there is held (:meth:`EffectLedger.bound_elsewhere`)
        and it is not tried again; nothing is said on it: it is scheduled. Forgetting it
        instead would give that room to another pod."""
        self._ledger.bound_elsewhere(effect, node)
        self._queue.bind_landed(effect.task.job_id)  # bound: a run of refusals is over
        self._metrics.binds.labels("elsewhere").inc()
        log.info("the pod is bound to another node already", node=node, chosen=effect.node)

    def _bound(self, effect: Bind, ref: ObjectRef, t0: float) -> None:
        if not self.binds_landed:
            log.info("first bind", pod=ref.key, node=effect.node)
        self.binds_landed += 1
        self._queue.bind_landed(effect.task.job_id)
        self._metrics.binds.labels("ok").inc()
        self._metrics.schedule_attempts.labels("scheduled", PROFILE).inc()
        self._metrics.attempt_duration.labels("scheduled", PROFILE).observe(
            time.perf_counter() - t0
        )
        self._dispatcher.record(
            Event(ref, "Normal", "Scheduled", f"Successfully assigned {ref.key} to {effect.node}")
        )


def _refused(exc: Exception) -> bool:
    """Whether a failed bind or claim write was refused: the API server answered no, so
    the same call would meet the same answer (the job backs off). Not a conflict (the
    object changed: try again at once) nor a lost reply (it may have taken effect)."""
    return not isinstance(exc, ConflictError | AmbiguousError)
