"""OutcomeResolver: learning what became of a write whose reply was lost (the API dispatcher).

A write that raised :class:`~scheduler.api.errors.AmbiguousError` (a 5xx, a timeout, the
connection lost before the reply) may or may not have taken effect. Undoing its
assumption at once is how a node gets over-allocated: the bind had happened, the room
was given to another pod, and both ran. So the caller keeps its assumption and asks this
module, which answers with an :class:`Outcome` within ``policy.deadline`` seconds of the
clock:

* a bind (:meth:`OutcomeResolver.bind`) took effect when the events show the pod on the
  node (``shown``) or a read of the pod does; it did not when the read shows it unbound,
  bound elsewhere (the node is told: the pod holds its room there), or gone;
* an eviction (:meth:`OutcomeResolver.eviction`) took effect when the events show the pod
  gone, or a read shows it gone or being deleted; it did not when the read shows it
  there and not being deleted;
* a volume write (:meth:`OutcomeResolver.volume`: a PV's claimRef, a claim's selected
  node) took effect when a read of the object shows what was written; it did not when
  the read shows something else or the object gone;
* an idempotent status patch (:meth:`OutcomeResolver.patch`) is written again until a
  write succeeds (it took effect) or is refused (it did not).

Reads (and rewrites) are spaced by a backoff (``policy.first`` doubling to
``policy.cap``); a read that fails is retried. When the deadline passes with nothing
learnt the outcome is ``UNKNOWN`` and the caller decides (the loop forgets the bind, so
that the pod is retried and a 409 naming its node then tells where it is; the executor
treats the eviction as failed, which keeps the victim's room counted: neither
over-allocates).

Every ambiguous write is counted in ``scheduler_api_ambiguous_total{call}`` and its
resolution in ``scheduler_api_ambiguous_resolved_total{call,outcome}``. Used by the calls
of the API dispatcher (:mod:`scheduler.dispatch.calls`), from their callers' tasks; each
call waits on the clock only, so it belongs to the caller's task group.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import AmbiguousError, ApiError
from scheduler.logging import get_logger
from scheduler.metrics import Metrics
from scheduler.ports import ClaimState, ClusterPorts, ObjectRef, PodState

log = get_logger("sluice.outcomes")

__all__ = ["Outcome", "OutcomeResolver", "RetryPolicy"]


class Outcome(enum.Enum):
    """What became of an ambiguous write (the metric's ``outcome`` label)."""

    TOOK_EFFECT = "took_effect"
    DID_NOT = "did_not"
    UNKNOWN = "unknown"
    """Nothing was learnt before the deadline."""
    SUPERSEDED = "superseded"
    """A newer write of the same object, carrying this one's content, took its place."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long and how often the outcome of one write is looked for (clock seconds)."""

    first: float = 0.25
    """Wait before the first read: a request still running on the server has its chance
    to land, so that a read showing "not done" is not overtaken by it."""
    cap: float = 4.0
    """Longest wait between two reads (the wait doubles from ``first``)."""
    deadline: float = 30.0
    """Give up (``UNKNOWN``) this long after the write failed."""

    def __post_init__(self) -> None:
        if not (0 < self.first <= self.cap and self.deadline >= 0):
            raise ValueError("a RetryPolicy needs 0 < first <= cap and deadline >= 0")


_UNREAD = object()


class OutcomeResolver:
    """One per scheduler, shared by the loop and the preemption executor."""

    def __init__(
        self, ports: ClusterPorts, metrics: Metrics, policy: RetryPolicy | None = None
    ) -> None:
        self.ports = ports
        self.metrics = metrics
        self.policy = policy or RetryPolicy()
        self._resolving = 0

    @property
    def in_flight(self) -> int:
        """Outcomes being looked for now."""
        return self._resolving

    async def bind(
        self, pod: ObjectRef, node: str, error: AmbiguousError, *, shown: Callable[[], bool]
    ) -> tuple[Outcome, str]:
        """Did the bind of ``pod`` to ``node`` that raised ``error`` take effect?
        ``shown()`` tells whether the events already show the pod bound there. With the
        outcome, the node a read showed the pod bound to ("" if none: not read, unbound
        or gone): when it is another, the pod is bound there already (another replica's
        bind), which the caller must not forget."""
        read: list[object] = []

        def took_effect(state: object) -> bool:
            read.append(state)
            return isinstance(state, PodState) and state.node_name == node

        outcome = await self._learn("bind", pod, error, shown, took_effect)
        where = next((s.node_name for s in read if isinstance(s, PodState)), "")
        return outcome, where

    async def claim(
        self,
        binding: ClaimBinding,
        error: AmbiguousError,
        *,
        read: Callable[[str, str], Awaitable[ClaimState | None]],
    ) -> Outcome:
        """Did the claim write ``binding`` that raised ``error`` take effect? It did when
        a read of the claim (``read(namespace, name)``) shows it allocated and reserved
        for the pod; it did not when the claim is gone or shows neither."""
        ref = ObjectRef("ResourceClaim", binding.namespace, binding.name, binding.uid)

        async def read_it() -> object:
            return await read(binding.namespace, binding.name)

        def took_effect(state: object) -> bool:
            return (
                isinstance(state, ClaimState)
                and state.uid == binding.uid
                and state.allocated
                and binding.pod_uid in state.reserved_for
            )

        return await self._learn("claim", ref, error, lambda: False, took_effect, read=read_it)

    async def volume(
        self,
        ref: ObjectRef,
        error: AmbiguousError,
        *,
        read: Callable[[], Awaitable[object]],
        took_effect: Callable[[Any], bool],
    ) -> tuple[Outcome, object]:
        """Did the volume write of ``ref`` (a PV or a claim) that raised ``error`` take
        effect? ``read()`` reads the object (None when gone); ``took_effect(state)`` says
        whether what it read shows the write. Returns the outcome and the state read
        (None when nothing was read)."""
        seen: list[object] = [None]

        async def read_it() -> object:
            seen[0] = await read()
            return seen[0]

        outcome = await self._learn("volume", ref, error, lambda: False, took_effect, read=read_it)
        return outcome, seen[0]

    async def eviction(
        self, pod: ObjectRef, error: AmbiguousError, *, shown: Callable[[], bool]
    ) -> Outcome:
        """Did the deletion (or eviction) of ``pod`` that raised ``error`` take effect?
        ``shown()`` tells whether the events already show the pod gone."""
        return await self._learn(
            "evict",
            pod,
            error,
            shown,
            lambda state: state is None or state.terminating,
        )

    async def patch(
        self,
        ref: ObjectRef,
        error: AmbiguousError,
        write: Callable[[], Awaitable[None]],
        *,
        superseded: Callable[[], bool] = lambda: False,
    ) -> bool:
        """An idempotent patch of ``ref`` raised ``error``: ``write()`` it again (with the
        backoff) until it succeeds, which returns True (took effect). A refusal is raised
        (did not); so is ``error`` when the deadline passes (unknown). Returns False,
        without writing again, once ``superseded()`` says a newer write of ``ref`` waits
        (it carries this one's content: an older write is never sent after it)."""
        self.metrics.api_ambiguous.labels("patch").inc()
        self._resolving += 1
        try:
            outcome, raised = await self._rewrite(write, error, superseded)
        finally:
            self._resolving -= 1
        self._resolved("patch", ref, outcome, error)
        if raised is not None:
            raise raised
        return outcome is Outcome.TOOK_EFFECT

    async def _rewrite(
        self,
        write: Callable[[], Awaitable[None]],
        error: AmbiguousError,
        superseded: Callable[[], bool],
    ) -> tuple[Outcome, ApiError | None]:
        clock = self.ports.clock
        deadline = clock.now() + self.policy.deadline
        delay = self.policy.first
        last: ApiError = error
        while clock.now() < deadline:
            await clock.sleep(min(delay, max(0.0, deadline - clock.now())))
            delay = min(delay * 2, self.policy.cap)
            if superseded():
                return Outcome.SUPERSEDED, None
            try:
                await write()
            except AmbiguousError as exc:
                last = exc
                continue
            except ApiError as exc:
                return Outcome.DID_NOT, exc
            return Outcome.TOOK_EFFECT, None
        return Outcome.UNKNOWN, last

    async def _learn(
        self,
        call: str,
        pod: ObjectRef,
        error: AmbiguousError,
        shown: Callable[[], bool],
        took_effect: Callable[[Any], bool],
        *,
        read: Callable[[], Awaitable[object]] | None = None,
    ) -> Outcome:
        self.metrics.api_ambiguous.labels(call).inc()
        self._resolving += 1
        try:
            outcome = await self._look(pod, shown, took_effect, read)
        finally:
            self._resolving -= 1
        self._resolved(call, pod, outcome, error)
        return outcome

    async def _look(
        self,
        pod: ObjectRef,
        shown: Callable[[], bool],
        took_effect: Callable[[Any], bool],
        read: Callable[[], Awaitable[object]] | None = None,
    ) -> Outcome:
        clock = self.ports.clock
        reader = self.ports.reader
        deadline = clock.now() + self.policy.deadline
        delay = self.policy.first
        while True:
            if shown():
                return Outcome.TOOK_EFFECT
            if clock.now() >= deadline:
                return Outcome.UNKNOWN
            await clock.sleep(min(delay, max(0.0, deadline - clock.now())))
            delay = min(delay * 2, self.policy.cap)
            if shown():
                return Outcome.TOOK_EFFECT
            if read is None and reader is None:
                continue
            state: object = _UNREAD
            try:
                state = await (read() if read is not None else reader.read_pod(pod))  # type: ignore[union-attr]
            except ApiError as exc:
                log.info("cannot read the object yet", object=pod.key, error=str(exc))
            if state is not _UNREAD:
                assert read is not None or state is None or isinstance(state, PodState)
                return Outcome.TOOK_EFFECT if took_effect(state) else Outcome.DID_NOT

    def _resolved(self, call: str, ref: ObjectRef, outcome: Outcome, error: ApiError) -> None:
        self.metrics.api_ambiguous_resolved.labels(call, outcome.value).inc()
        emit = log.warning if outcome is Outcome.UNKNOWN else log.info
        emit(
            "outcome of an ambiguous call",
            call=call,
            object=ref.key,
            outcome=outcome.value,
            error=str(error),
        )
