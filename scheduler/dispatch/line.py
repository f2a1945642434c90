"""Lines of API calls, one per object: the API dispatcher's queue (layer 2).

As kube-scheduler's call queue (``pkg/scheduler/backend/api_dispatcher``), for one
object at most one call runs at a time, and a call added while another is queued or
running is combined with it by the calls' own rule (:meth:`ApiCall.combine`): merged
(the newer carries the older's content; the older's caller learns the merged call's
outcome), the older replaced or the newer skipped (by their types' relevance; the
dropped one's caller learns it was superseded), or queued behind it (writes that must
not replace one another, such as two pods' reservations of one claim). Calls of one
object run in the order they were added; a merged or replaced call is never sent after
the call that took its place.

Used from one event loop only (no locks): :class:`~scheduler.dispatch.dispatcher.
ApiDispatcher` adds tickets and runs them; this module decides nothing about I/O.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from scheduler.dispatch.calls import ApiCall


class Combine(enum.Enum):
    """What becomes of a call added behind another of the same object."""

    MERGE = "merge"
    """The newer took in the older's content; the older is not sent on its own."""
    REPLACE = "replace"
    """The newer makes the older needless (more relevant); the older is dropped."""
    SKIP = "skip"
    """The older makes the newer needless (more relevant); the newer is dropped."""
    QUEUE = "queue"
    """Both are sent, the newer after the older."""


@dataclass(eq=False, slots=True)
class Ticket:
    """One call in its object's line, and what its caller learns of it."""

    call: ApiCall
    background: bool
    """Run by the dispatcher in a task of its own (else by the caller, who awaits it)."""
    turn: anyio.Event = field(default_factory=anyio.Event)
    """Set when the call may run (it is at the head of its line)."""
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: Exception | None = None
    superseded: bool = False
    """Dropped for another call (replaced or skipped): never sent."""
    started: bool = False
    """Being sent (its ``execute`` began): no newer call can take its place any more."""
    merged: bool = False
    """Merged into a newer call, which carries its content: an awaited one ends as that
    one ends, with its outcome; a submitted one ends at once (the newer call's submitter
    handles the outcome)."""
    riders: list[Ticket] = field(default_factory=list)
    """Older tickets merged into this one: they end as it ends."""
    on_done: Callable[[Ticket], None] | None = None
    """Called once, synchronously, when the ticket ends (sent, merged or dropped)."""

    def finish(self, result: Any = None, error: Exception | None = None) -> None:
        """End this ticket and those that rode on it (idempotent). Its turn is set too,
        so that a caller waiting for its turn wakes and finds it done."""
        if self.done.is_set():
            return
        self.result, self.error = result, error
        self.done.set()
        self.turn.set()
        if self.on_done is not None:
            self.on_done(self)
        for rider in self.riders:
            rider.superseded = rider.superseded or self.superseded
            rider.finish(result, error)

    def drop(self) -> None:
        """End this ticket unsent (superseded), with its riders."""
        self.superseded = True
        self.finish()


@dataclass(slots=True)
class Line:
    """The calls of one object: the one running, then those waiting, oldest first."""

    running: Ticket | None = None
    waiting: deque[Ticket] = field(default_factory=deque)


class CallLines:
    """Every object's line. ``add`` places a ticket; ``finished`` hands the line on."""

    def __init__(self) -> None:
        self._lines: dict[str, Line] = {}

    def __len__(self) -> int:
        return len(self._lines)

    def newer_waits(self, ticket: Ticket) -> bool:
        """Is a call of ``ticket``'s object waiting behind it (which took its place or
        goes after it)?"""
        line = self._lines.get(ticket.call.key)
        return line is not None and line.running is ticket and bool(line.waiting)

    def add(self, ticket: Ticket) -> bool:
        """Place ``ticket`` in its object's line; True when it may run at once (its turn
        is set), False when it waits or was dropped (``ticket.superseded``)."""
        key = ticket.call.key
        line = self._lines.get(key)
        if line is None:
            self._lines[key] = Line(running=ticket)
            ticket.turn.set()
            return True
        while line.waiting:
            older = line.waiting[-1]
            rule = ticket.call.combine(older.call, running=False)
            if rule is Combine.MERGE:
                line.waiting.pop()
                ticket.riders.extend(older.riders)
                older.riders = []
                older.merged = True
                if older.background:
                    older.finish()  # nobody awaits it: its submitter learns no more
                else:
                    ticket.riders.append(older)  # its caller awaits the merged call
                line.waiting.append(ticket)
                return False
            if rule is Combine.REPLACE:
                line.waiting.pop()
                older.drop()
                continue
            if rule is Combine.SKIP:
                ticket.drop()
                return False
            line.waiting.append(ticket)
            return False
        head = line.running
        assert head is not None
        if not head.started and head.background:
            # Its task has not begun: a newer call may take its place, as of a waiting one.
            rule = ticket.call.combine(head.call, running=False)
            if rule in (Combine.MERGE, Combine.REPLACE):
                ticket.riders.extend(head.riders)
                head.riders = []
                head.merged = rule is Combine.MERGE
                if head.merged:
                    head.finish()
                else:
                    head.drop()
                line.running = ticket
                ticket.turn.set()
                return True
            if rule is Combine.SKIP:
                ticket.drop()
                return False
            line.waiting.append(ticket)
            return False
        rule = ticket.call.combine(head.call, running=True)
        if rule is Combine.SKIP:
            ticket.drop()
            return False
        line.waiting.append(ticket)  # merged or not, it goes after the running one
        return False

    def finished(self, ticket: Ticket) -> Ticket | None:
        """``ticket`` (running) ended: the next call of its object, whose turn is now
        set, or None when the line is empty (and gone)."""
        key = ticket.call.key
        line = self._lines.get(key)
        if line is None or line.running is not ticket:
            return None
        if not line.waiting:
            del self._lines[key]
            return None
        line.running = line.waiting.popleft()
        line.running.turn.set()
        return line.running

    def withdraw(self, ticket: Ticket) -> Ticket | None:
        """Take ``ticket`` out of its line unsent (its caller was cancelled); returns the
        call whose turn comes instead, if any (as :meth:`finished`)."""
        line = self._lines.get(ticket.call.key)
        if line is None:
            return None
        if line.running is ticket:
            return self.finished(ticket)
        if ticket in line.waiting:
            line.waiting.remove(ticket)
        ticket.drop()
        return None
