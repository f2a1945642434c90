"""Idle cycles: a cycle with nothing to do costs a comparison, not a snapshot (layer 3, loop).

The loop runs a cycle every ``schedulePeriod`` even when nothing waits. At 15,000 nodes and
40,000 pods such a cycle (snapshot, session, status report) takes about 0.4 s of CPU to
decide nothing: a quiet cluster would keep half a core busy. kube-scheduler, whose
queue is empty then, does nothing at all.

A cycle is *settled* when it decided nothing and left nothing waiting: no effect, no
job deferred or failed, no reservation changed, no pod of Sluice pending or nominated.
:class:`IdleCycles` remembers the cache's :attr:`~scheduler.cache.SchedulerCache.revision`
at a settled cycle's snapshot. The next cycle is skipped while

- the revision is the same (no watch event, relist, assumption or forgetting since: the
  snapshot would be the same),
- nothing is in flight (no background call, no hold of the scheduling queue, no
  preemption: each of them changes something when it ends), and
- no status write failed since (the reporter retries a failed write in the next cycle
  that runs).

With nothing pending nothing in a cycle depends on the time alone (backoffs, parking,
starvation protection and FailedScheduling events all concern pending pods), so the cycle
skipped would have decided, written and reported exactly what the settled one did:
nothing. A skipped cycle is counted (``sluice_cycles_idle_total``), not run: no cycle
number, no observers, no metrics of its parts.

Owned by the loop; its task only. ``sluice run`` switches it on
(``SchedulingLoop.skip_idle``); simulations run every cycle (they stop at the first that
finds nothing to do), and tests ask for it when they test it.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.api.job import JobInfo
from scheduler.loop.status import WAITING


def settled(jobs: Iterable[JobInfo], *, decided: bool, deferred: int, failed: bool) -> bool:
    """Did a cycle over ``jobs`` (its session's, after its actions) decide nothing and
    leave nothing of Sluice waiting (see the module docstring)?"""
    if decided or deferred or failed:
        return False
    return not any(t.status in WAITING and t.sluice for job in jobs for t in job.tasks.values())


class IdleCycles:
    """Whether the next cycle may be skipped (see the module docstring)."""

    def __init__(self) -> None:
        self._revision: int | None = None
        """The cache's revision at the last settled cycle's snapshot; None when the last
        cycle that ran was not settled, or something disturbed it since."""

    def after_cycle(self, revision: int, *, settled: bool) -> None:
        """A cycle ran on the snapshot taken at ``revision``; ``settled``: see
        :func:`settled`."""
        self._revision = revision if settled else None

    def disturbed(self) -> None:
        """Something the cache does not show wants a cycle (a status write failed)."""
        self._revision = None

    def may_skip(self, revision: int, in_flight: int) -> bool:
        """May the cycle about to start be skipped: the cache at the settled cycle's
        ``revision`` still, and nothing ``in_flight`` (calls, holds, preemptions)?"""
        return self._revision is not None and revision == self._revision and in_flight == 0
