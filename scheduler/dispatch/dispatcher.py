"""ApiDispatcher: the one room through which Sluice writes to the API server (layer 2).

In the manner of kube-scheduler's API dispatcher: every write is a typed call
(:mod:`scheduler.dispatch.calls`), placed in its object's line (:mod:`scheduler.dispatch.
line`: one call of an object at a time, in order; a newer call merges with or replaces
an older queued one, or is skipped, by its type's rule), and made under one policy for
lost replies (:class:`~scheduler.dispatch.outcomes.OutcomeResolver`). Events are handed
to the backend's recorder, which spaces and rate-limits them (``scheduler.kube.events``).

Two ways in, both from the owner's event loop:

* :meth:`ApiDispatcher.call`, awaited by a caller that needs the outcome (the binding
  cycle, the preemption executor): the call runs in the caller's task as soon as its
  object's line is free, so a caller's own concurrency bounds it;
* :meth:`ApiDispatcher.submit`, for writes nobody waits for (status, claim withdrawals):
  run in tasks of the dispatcher's task group, at most ``concurrency`` at once; their
  outcome goes to the submitter's ``on_done`` (never raised).

Owned by the scheduling loop (one per scheduler), attached to its task group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from scheduler.api.errors import AmbiguousError, ApiError, InvariantError
from scheduler.dispatch.calls import ApiCall, CallContext
from scheduler.dispatch.line import CallLines, Ticket
from scheduler.dispatch.outcomes import OutcomeResolver, RetryPolicy
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, Event

__all__ = ["ApiDispatcher", "Ticket"]


class ApiDispatcher:
    """See the module docstring. Not thread-safe: one event loop."""

    def __init__(
        self,
        ports: ClusterPorts,
        metrics: Metrics,
        *,
        concurrency: int,
        on_error: Callable[[str, BaseException], None],
        policy: RetryPolicy | None = None,
    ) -> None:
        self.ports = ports
        self.metrics = metrics
        self.outcomes = OutcomeResolver(ports, metrics, policy)
        """Learns the outcome of writes whose reply was lost (every call's)."""
        self._lines = CallLines()
        self._context = CallContext(ports, self.outcomes, lambda: False)
        self._limit = anyio.Semaphore(concurrency)
        self._on_error = on_error
        self._tg: TaskGroup | None = None
        self._pending = 0
        self._idle = anyio.Event()
        self._idle.set()

    def attach(self, tg: TaskGroup) -> None:
        """Run submitted calls in ``tg`` (the owner's task group). Once, before submit."""
        self._tg = tg

    @property
    def in_flight(self) -> int:
        """Submitted calls not finished yet (queued in a line, or running)."""
        return self._pending

    async def drained(self) -> None:
        """Return once no submitted call is left (at once if none is)."""
        await self._idle.wait()

    @property
    def writes_claims(self) -> bool:
        """Whether the backend can write DRA claims (it has a ClaimWriter)."""
        return self.ports.claims is not None

    def record(self, event: Event) -> None:
        """Hand ``event`` to the backend's recorder (never blocks, never raises: events
        are best effort, spaced in series and rate-limited by the recorder)."""
        self.ports.events.record(event)

    async def call(self, call: ApiCall) -> Any:
        """Make ``call`` once its object's line lets it, in this task, and return what it
        returns; raise what it raises. Returns None, unsent, when a newer call of the
        object took its place and carried its content (merged), or made it needless."""
        ticket = Ticket(call, background=False)
        if not self._lines.add(ticket):
            try:
                await ticket.turn.wait()
            except BaseException:
                self._hand_on(self._lines.withdraw(ticket))  # cancelled while waiting
                raise
        if ticket.done.is_set():  # dropped, or merged into a newer call that ended
            if ticket.error is not None:
                raise ticket.error
            return None if ticket.superseded else ticket.result
        return await self._execute(ticket)

    def submit(self, call: ApiCall, on_done: Callable[[Ticket], None] | None = None) -> None:
        """Queue ``call`` in the background; never blocks. ``on_done(ticket)`` is called
        once it ended: sent (``ticket.error`` None or the ApiError), merged into a newer
        call (its outcome), or dropped (``ticket.superseded``)."""
        if self._tg is None:
            raise RuntimeError("the API dispatcher is not attached to a task group")
        self._pending += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

        def ended(ticket: Ticket) -> None:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()
            if on_done is not None:
                on_done(ticket)

        ticket = Ticket(call, background=True, on_done=ended)
        if self._lines.add(ticket):
            self._start(ticket)

    def _start(self, ticket: Ticket) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._run, ticket, name=f"api {ticket.call.key}")

    async def _run(self, ticket: Ticket) -> None:
        async with self._limit:
            if ticket.done.is_set():
                return  # a newer call took its place before it began
            try:
                await self._execute(ticket)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                if not ticket.done.is_set():
                    ticket.finish(error=exc)
                if not isinstance(exc, ApiError | InvariantError):  # else on_done's to handle
                    self._on_error(ticket.call.key, exc)

    async def _execute(self, ticket: Ticket) -> Any:
        """Run ``ticket`` (its turn has come), end it, and hand its line on."""
        ticket.started = True
        context = CallContext(
            self.ports,
            self.outcomes,
            lambda: self._lines.newer_waits(ticket),
            self._context.versions,
        )
        try:
            result = await ticket.call.execute(context)
        except Exception as exc:
            ticket.finish(error=exc)
            raise
        except BaseException:  # cancelled: whoever rode on it learns nothing more
            ticket.finish(error=AmbiguousError("the call was cancelled"))
            raise
        else:
            ticket.finish(result)
        finally:
            self._hand_on(self._lines.finished(ticket))
        return result

    def _hand_on(self, following: Ticket | None) -> None:
        """``following``'s turn came: a submitted call is started (an awaited one runs in
        its caller's task, woken by its turn)."""
        if following is not None and following.background:
            self._start(following)
