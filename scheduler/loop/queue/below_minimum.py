"""The ``dissolve`` action's clock: since when each gang has run below its minimum
(layer 3, loop).

A gang that runs below its minimum (:meth:`~scheduler.api.job.JobInfo.runs_below_minimum`)
is dissolved once it has been seen so for ``graceSeconds`` on end
(:mod:`scheduler.actions.dissolve`). The count must outlive the session, so it is kept
here, between cycles: at each cycle's snapshot :meth:`BelowMinimum.see` takes the jobs as
the snapshot has them (before any action decides) and carries each count on, by the
rule of :func:`~scheduler.actions.dissolve.below_minimum_since`. The scheduling queue
publishes the counts in its view (``QueueView.below_minimum_since``), so a cycle's
decisions depend on its snapshot alone. Owned by the scheduling queue
(:mod:`scheduler.loop.queue`); the loop's task only.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.actions.dissolve import below_minimum_since
from scheduler.api.job import JobInfo


class BelowMinimum:
    def __init__(self) -> None:
        self._since: dict[str, float] = {}
        """Job uid -> the loop's clock at the first snapshot of the run below minimum."""

    def see(self, jobs: Mapping[str, JobInfo], now: float) -> Mapping[str, float]:
        """The counts as the snapshot of ``jobs`` taken at ``now`` sees them (a gang not
        below its minimum there ends its count; a gang newly below starts one at
        ``now``). Called once per snapshot, in order."""
        self._since = below_minimum_since(jobs, self._since, now)
        return self._since
