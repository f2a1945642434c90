"""When an unschedulable pod is told why again (layer 3, loop): its ``FailedScheduling``
event, and its ``PodScheduled=False`` condition.

kube-scheduler tells a pod why at every failed attempt (an event, and the condition when
it changed), and a pod's attempts are spaced by its backoff: 1 s after the first
failure, doubling after each one, at most 10 s (``podInitialBackoffSeconds``,
``podMaxBackoffSeconds``). Sluice looks at every pending pod in every cycle, and a
reason's text changes with the cluster ("0/12 nodes are available: 10 Insufficient cpu,
2 ..."): were every change written at once, a few dozen pending pods would take the
client's whole rate limit (a soak hour measured 55 status patches a second against a
limit of 50, and the binds and first reasons of new pods waited behind them). So the
loop asks :class:`MessageBackoff` whether a pod is told now:

* its **first** message: at once;
* a **changed** message: once the pod's backoff has passed since it was last told;
* the **same** message: again once its backoff has passed for events (``repeat``:
  repeats become one Event with a series count, ``kubectl describe pod`` shows ``(x5
  over 40s)``), never for the condition (it says so already).

Each time a pod is told after its first, its backoff doubles, up to the maximum.

Owned by the :class:`~scheduler.loop.status.StatusReporter` (one for events, one for
conditions), on the loop's task only. Times are the loop clock's (virtual in
simulations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["INITIAL_BACKOFF", "MAX_BACKOFF", "MessageBackoff"]

INITIAL_BACKOFF: Final = 1.0
"""Seconds before a pod is told again (kube-scheduler's ``podInitialBackoffSeconds``)."""
MAX_BACKOFF: Final = 10.0
"""The longest wait between two tellings (kube-scheduler's ``podMaxBackoffSeconds``)."""


@dataclass(slots=True)
class _Entry:
    message: str
    due: float
    wait: float


class MessageBackoff:
    """Per pod (by uid): what it was last told, and when it may be told again."""

    def __init__(self, initial: float = INITIAL_BACKOFF, maximum: float = MAX_BACKOFF) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {initial}, {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def due(self, uid: str, message: str, now: float, *, repeat: bool) -> bool:
        """Whether pod ``uid``, unschedulable with ``message`` at ``now``, is told now (see
        the module docstring; ``repeat``: the same message is told again once due).
        Records a yes as told: call once per pod and cycle, and :meth:`forget` the pod if
        the telling then fails."""
        entry = self._entries.get(uid)
        if entry is None:
            self.told(uid, message, now)
            return True
        if (message == entry.message and not repeat) or now < entry.due:
            return False
        entry.message = message
        entry.wait = min(self.maximum, entry.wait * 2)
        entry.due = now + entry.wait
        return True

    def told(self, uid: str, message: str, now: float) -> None:
        """Pod ``uid`` was told ``message`` at ``now`` outside :meth:`due` (a failed bind
        says why at once): its backoff starts again."""
        self._entries[uid] = _Entry(message, now + self.initial, self.initial)

    def last(self, uid: str) -> str | None:
        """What pod ``uid`` was last told, if anything."""
        entry = self._entries.get(uid)
        return entry.message if entry is not None else None

    def forget(self, uid: str) -> None:
        """Pod ``uid`` was not told after all (the write failed): its next message is its
        first again, told at once."""
        self._entries.pop(uid, None)

    def retain(self, uids: set[str]) -> None:
        """Forget every pod not in ``uids`` (those still waiting): a pod bound, gone or no
        longer failing starts afresh at its next failure."""
        if len(uids) < len(self._entries):
            self._entries = {u: e for u, e in self._entries.items() if u in uids}

    def __len__(self) -> int:
        return len(self._entries)
