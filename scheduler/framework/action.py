"""The Action extension point (layer 1): a step of the scheduling cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from scheduler.framework.session import Session


class Action(Protocol):
    """One step of a cycle (enqueue, allocate, preempt, backfill, ...).

    ``execute`` is called once per cycle, in the configured order, synchronously. It
    decides through statements and the session's hooks and never does I/O.
    """

    name: str

    def execute(self, session: Session, /) -> None: ...
