"""A pod waiting for the pod grouper says so only once the wait is long (layer 3, loop).

A pod a controller made that names no group waits, untried, until ``sluice controller``'s
pod grouper has grouped it (:func:`scheduler.api.owners.grouper_wait`). That is a normal
step of a second or so for every pod of a Job or a ReplicaSet, not a failure:
kube-scheduler says nothing of a pod its pre-enqueue checks hold back (a gated pod gets no
``FailedScheduling`` event; the API server, not the scheduler, writes its condition). So
the status reporter keeps such a pod quiet for a grace (the configuration's
``podGrouperGrace``) and tells its ``PodScheduled=False`` condition and its event only
when it has waited longer: then no controller is likely running, and the message asks.
The steps right after it are as normal and as short, and are kept quiet within the same
grace, counted from when the pod was first seen waiting for the grouper: its gang lacking
the pods still being grouped (the grouper labels a Job's pods one after another), and its
PodGroup not seen yet (the grouper creates it first, but the scheduler's watches of pods
and PodGroups deliver in their own time).

Owned by :class:`~scheduler.loop.status.StatusReporter`, called from the loop's task only.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.api.reasons import Reason, ReasonCode
from scheduler.api.task import TaskInfo

AFTER_GROUPING: frozenset[ReasonCode] = frozenset(
    {ReasonCode.JOB_NOT_VALID, ReasonCode.JOB_UNRESOLVED}
)
"""Reasons of a pod just grouped that the grace covers too (module docstring)."""

__all__ = ["QuietWait"]


class QuietWait:
    """Since when (the loop's clock) each pod has waited for the pod grouper."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._since: dict[str, float] = {}

    def quiet(self, task: TaskInfo, told: Reason, now: float) -> bool:
        """Is ``task`` (told ``told`` this cycle) within the grace of its wait for the pod
        grouper? The first call that sees it waiting for the grouper starts the grace;
        then, once grouped, it stays quiet while its reason is one of
        :data:`AFTER_GROUPING`. Any other reason ends it."""
        if self.grace <= 0:
            return False
        if task.awaits_grouper:
            since = self._since.setdefault(task.uid, now)
        elif task.uid in self._since and told.code in AFTER_GROUPING:
            since = self._since[task.uid]
        else:
            self._since.pop(task.uid, None)
            return False
        return now - since < self.grace

    def retain(self, uids: Iterable[str]) -> None:
        """Forget the pods not in ``uids`` (bound, deleted, ...)."""
        keep = set(uids)
        self._since = {uid: t for uid, t in self._since.items() if uid in keep}
