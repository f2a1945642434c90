"""Pods placed since the last cycle, for the parked jobs that wait for one (layer 2).

The cache notes each pod given a node (a bind it assumes, a bound pod it is told of) and
each pod relabelled on one; the loop takes the notes before each snapshot and the
scheduling queue lets go the parked jobs such a pod could let pass their required pod
(anti-)affinity or hard spread constraints (:mod:`scheduler.framework.awaited_pods`).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.framework.awaited_pods import PlacedPod

LIMIT = 10_000
"""Notes kept between two takes; past it, the take says "too many to tell" (None)."""


class PlacedPods:
    """Bounded: a cache no loop takes from keeps at most :data:`LIMIT` notes."""

    def __init__(self) -> None:
        self._notes: list[PlacedPod] | None = []

    def note(
        self,
        namespace: str,
        labels: Mapping[str, str] | None,
        before: Mapping[str, str] | None = None,
    ) -> None:
        """A pod of ``namespace`` with ``labels`` is now on a node; ``before``: it was
        there already, with these labels."""
        if self._notes is None:
            return
        if len(self._notes) >= LIMIT:
            self._notes = None
            return
        self._notes.append(PlacedPod(namespace, labels or {}, before))

    def take(self) -> tuple[PlacedPod, ...] | None:
        """The notes since the last take (None: more than :data:`LIMIT`, any pod may have
        been placed); starts afresh."""
        notes, self._notes = self._notes, []
        return None if notes is None else tuple(notes)
