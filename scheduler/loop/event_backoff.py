"""When an unschedulable pod gets its ``FailedScheduling`` event again (layer 3, loop).

kube-scheduler records ``FailedScheduling`` at every failed attempt of a pod, and a pod's
attempts are spaced by its backoff: 1 s after the first failure, doubling after each
one, at most 10 s (``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``). Sluice looks
at every pending pod in every cycle, so the loop asks :class:`EventBackoff` whether a pod's
event is due: at once when its message is new or changed, else once its backoff has
passed since the last one. Repeats with the same message become one Event with a series
count in the recorder, so ``kubectl describe pod`` shows ``(x5 over 40s)``.

Owned by the :class:`~scheduler.loop.status.StatusReporter`, on the loop's task only.
Times are the loop clock's (virtual in simulations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["INITIAL_BACKOFF", "MAX_BACKOFF", "EventBackoff"]

INITIAL_BACKOFF: Final = 1.0
"""Seconds before the first repeat (kube-scheduler's ``podInitialBackoffSeconds``)."""
MAX_BACKOFF: Final = 10.0
"""The longest wait between repeats (kube-scheduler's ``podMaxBackoffSeconds``)."""


@dataclass(slots=True)
class _Entry:
    message: str
    due: float
    wait: float


class EventBackoff:
    """Per pod (by uid): the last message, and when the next repeat of it is due."""

    def __init__(self, initial: float = INITIAL_BACKOFF, maximum: float = MAX_BACKOFF) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {initial}, {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def due(self, uid: str, message: str, now: float) -> bool:
        """Whether pod ``uid``, unschedulable with ``message`` at ``now``, gets an event
        now. True for a new or changed message (its backoff starts again at ``initial``),
        and for the same message once its backoff has passed (the backoff then doubles, up
        to ``maximum``). Records the answer: call once per pod and cycle."""
        entry = self._entries.get(uid)
        if entry is None or entry.message != message:
            self._entries[uid] = _Entry(message, now + self.initial, self.initial)
            return True
        if now < entry.due:
            return False
        entry.wait = min(self.maximum, entry.wait * 2)
        entry.due = now + entry.wait
        return True

    def retain(self, uids: set[str]) -> None:
        """Forget every pod not in ``uids`` (those unschedulable this cycle): a pod bound,
        gone or no longer failing starts afresh at its next failure."""
        if len(uids) < len(self._entries):
            self._entries = {u: e for u, e in self._entries.items() if u in uids}

    def __len__(self) -> int:
        return len(self._entries)
