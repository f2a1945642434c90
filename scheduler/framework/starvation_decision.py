"""What one cycle decides for starvation protection (layer 1).

The reservation (the starving job elected, the nodes held for it) lives between cycles in
the loop's scheduling queue, which hands it to each snapshot (:attr:`QueueView.reservation
<scheduler.api.holds.QueueView.reservation>`). During the cycle the ``elect`` and
``reserve`` actions change it here; the ``reservation`` plugin reads it as it stands; after
the cycle the queue takes what was decided (:mod:`scheduler.loop.queue.starvation_hold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.api.errors import InvariantError
from scheduler.api.holds import Reservation
from scheduler.api.job import JobInfo


class StarvationDecision:
    """The cycle's reservation, from the snapshot's, as the actions change it. Used by the
    actions of one cycle, then read once by the loop."""

    def __init__(
        self, reservation: Reservation | None, waiting_since: Mapping[str, float], now: float
    ) -> None:
        self.reservation = reservation
        """The reservation as it stands now (None: no job elected)."""
        self.released = ""
        """Why the reservation of the cycle's start ended, if it did (for its event)."""
        self._waiting_since = waiting_since
        self._now = now

    def elect(self, job: JobInfo) -> None:
        """Make ``job`` the starving job to reserve nodes for (called by ``elect``); a
        reservation held by another job ends (say why first, with :meth:`release`)."""
        since = self._waiting_since.get(job.uid, self._now)
        self.reservation = Reservation(job.uid, job.priority, since)

    def reserve(self, nodes: frozenset[str]) -> None:
        """Hold ``nodes`` for the elected job (called by ``reserve``)."""
        if self.reservation is None:
            raise InvariantError("nodes reserved with no job elected")
        self.reservation = replace(self.reservation, nodes=nodes, reserved_at=self._now)

    def release(self, why: str) -> None:
        """End the reservation (``why``: for users, "the job started")."""
        if self.reservation is not None and not self.released:
            self.released = why
        self.reservation = None
