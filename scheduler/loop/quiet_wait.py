"""A pod waiting for the pod grouper says so only once the wait is long (layer 3, loop).

A pod a controller made that names no group waits, untried, until ``sluice controller``'s
pod grouper has grouped it (:func:`scheduler.api.owners.grouper_wait`). That is a normal
step of a second or so for every pod of a Job or a ReplicaSet, not a failure:
kube-scheduler says nothing of a pod its pre-enqueue checks hold back (a gated pod gets no
``FailedScheduling`` event; the API server, not the scheduler, writes its condition). So
the status reporter keeps such a pod quiet for a grace (the configuration's
``podGrouperGrace``) and tells its ``PodScheduled=False`` condition and its event only
when it has waited longer: then no controller is likely running, and the message asks.

Owned by :class:`~scheduler.loop.status.StatusReporter`, called from the loop's task only.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.api.task import TaskInfo

__all__ = ["QuietWait"]


class QuietWait:
    """Since when (the loop's clock) each pod has waited for the pod grouper."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._since: dict[str, float] = {}

    def quiet(self, task: TaskInfo, now: float) -> bool:
        """Is ``task`` waiting for the pod grouper, for less than the grace? The first call
        that sees it waiting starts its wait; one that sees it no longer waiting ends it."""
        if not task.awaits_grouper or self.grace <= 0:
            self._since.pop(task.uid, None)
            return False
        since = self._since.setdefault(task.uid, now)
        return now - since < self.grace

    def retain(self, uids: Iterable[str]) -> None:
        """Forget the pods not in ``uids`` (bound, deleted, ...)."""
        keep = set(uids)
        self._since = {uid: t for uid, t in self._since.items() if uid in keep}
