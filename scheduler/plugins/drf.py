"""The ``drf`` plugin (layer 2): dominant resource fairness between jobs, and between
queues with ``hierarchy``.

Volcano's ``drf`` plugin (``pkg/scheduler/plugins/drf``, read at the commit named in
tests/conformance/README.md). A job's *share* is its dominant share: the largest fraction
of the cluster's total (the allocatable of every node) it holds of any resource, counting
its pods that are placed and not being evicted, and those nominated.

* job order: within a queue, the job of smallest share first (after the keys of the
  plugins before it: ``priority``'s, ``gang``'s); shares move as pods are placed in the
  cycle, and ``allocate`` asks again after each turn of a job;
* victims (``preemptable``, on by default; Volcano's ``enablePreemptable``): of the
  candidates of the preemptor's own queue, those whose job's share without them (and
  without the candidates of the same job before them) is at least the preemptor's job's
  share with the preemptor, to within 1e-6; candidates of other queues (reclaim's) are
  left to the reclaim rules. Sluice asks the victim filters of the first tier that has
  one only: with ``conformance`` in an earlier tier, this rule is not asked;
* ``hierarchy`` (Volcano's ``enableHierarchy``, hierarchical DRF): queues are ordered by
  :mod:`~scheduler.plugins.drf_hierarchy` on Sluice's queue tree (``parent``, ``weight``),
  and a pod of another queue may be reclaimed only when the reclaimer's queue, holding the
  reclaimer, still comes before the victim's queue without the victim.

Volcano's per-queue annotations ``volcano.sh/hierarchy`` and ``volcano.sh/hierarchy-weights``
are not read: Sluice's tree is made of Queue objects, each with its own limits and status,
and the same tree shares the cluster out in ``proportion``; write the hierarchy as Queues
with ``spec.parent`` and ``spec.weight`` (tests/conformance/README.md has the mapping).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.queue_tree import queue_tree
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    JOB_ORDER,
    QUEUE_ORDER,
    RECLAIMABLE,
    VICTIMS,
    HookSet,
    OrderKey,
    PluginContext,
)
from scheduler.plugins import drf_hierarchy as hdrf
from scheduler.plugins.drf_hierarchy import dominant_share

NAME: Final = "drf"
SHARE_DELTA: Final = 0.000001
"""Shares this close are equal (Volcano's ``shareDelta``)."""


@dataclass(frozen=True, slots=True)
class DrfArguments:
    """The arguments of ``drf``; field names are the YAML keys."""

    preemptable: bool = True
    """Filter preemption victims by share (Volcano's ``enablePreemptable``)."""
    hierarchy: bool = False
    """Order queues and allow reclaim by hierarchical DRF (Volcano's ``enableHierarchy``)."""


class DrfPlugin:
    name = NAME

    def __init__(self, arguments: DrfArguments) -> None:
        self.arguments = arguments
        self.total: dict[str, int] = {}
        self.held: dict[str, dict[str, int]] = {}
        """Job uid -> what its counted pods request."""
        self.shares: dict[str, float] = {}
        self._jobs: Mapping[str, JobInfo] = {}
        self._hierarchy: hdrf.Hierarchy | None = None
        self._in_use: dict[str, int] = {}
        """What every job holds together (for the resources still in demand)."""
        self._stale = True

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        total: dict[str, int] = {}
        for node in context.nodes.values():
            for name, n in node.allocatable.items():
                total[name] = total.get(name, 0) + n
        self.total = {k: n for k, n in total.items() if n > 0}
        self._jobs = context.jobs
        for job in context.jobs.values():
            held: dict[str, int] = {}
            for t in job.tasks.values():
                if t.status in COUNTED_FOR_PLUGINS:
                    _add(held, t.request.amounts, 1)
                    _add(self._in_use, t.request.amounts, 1)
            self.held[job.uid] = held
            self.shares[job.uid] = dominant_share(held, self.total)
        hooks.add(JOB_ORDER, self.job_key)
        if self.arguments.preemptable:
            hooks.add(VICTIMS, self.victims)
        if self.arguments.hierarchy:
            queues = context.queues
            self._hierarchy = hdrf.build(
                queue_tree(queues),
                {name: q.weight for name, q in queues.items()},
                (
                    (job.uid, job.queue, _requested(job))
                    for job in context.jobs.values()
                    if job.queue in queues
                ),
            )
            self._stale = True
            hooks.add(QUEUE_ORDER, self.queue_key)
            hooks.add(RECLAIMABLE, self.reclaimable)
        hooks.add_placement_handlers(self.on_place, self.on_unplace)

    def close(self) -> None:
        self.held = {}
        self.shares = {}
        self._jobs = {}
        self._hierarchy = None
        self._in_use = {}

    # Jobs -------------------------------------------------------------------------------

    def job_key(self, job: JobInfo) -> OrderKey:
        return (self.shares.get(job.uid, 0.0),)

    def victims(self, preemptor: TaskInfo, candidates: Sequence[TaskInfo]) -> list[TaskInfo]:
        """Those of ``candidates`` of the preemptor's queue that leave their job's share
        at least the preemptor's job's with the preemptor (see the module's docstring);
        the others (of other queues) as they are."""
        job = self._jobs.get(preemptor.job_id)
        if job is None:
            return list(candidates)
        mine = dict(self.held.get(job.uid, {}))
        _add(mine, preemptor.request.amounts, 1)
        preemptor_share = dominant_share(mine, self.total)
        left: dict[str, dict[str, int]] = {}
        out: list[TaskInfo] = []
        for t in candidates:
            owner = self._jobs.get(t.job_id)
            if owner is None or owner.queue != job.queue:
                out.append(t)
                continue
            held = left.get(t.job_id)
            if held is None:
                held = left[t.job_id] = dict(self.held.get(t.job_id, {}))
            _add(held, t.request.amounts, -1)
            share = dominant_share(held, self.total)
            if preemptor_share < share or abs(preemptor_share - share) <= SHARE_DELTA:
                out.append(t)
        return out

    # Queues (hierarchy) -----------------------------------------------------------------

    def queue_key(self, queue: QueueInfo) -> OrderKey:
        hierarchy = self._evaluated()
        return hdrf.queue_key(hierarchy, queue.name)

    def reclaimable(
        self, reclaimers: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Those of ``candidates`` without which their queue still comes after the
        reclaimers' queue holding the reclaimers (pods of one job placed by the same
        reclaim; each candidate taken alone, as Volcano does)."""
        hierarchy = self._hierarchy
        job = self._jobs.get(reclaimers[0].job_id) if reclaimers else None
        if hierarchy is None or job is None:
            return []
        held = {uid: dict(h) for uid, h in self.held.items()}
        in_use = dict(self._in_use)
        for reclaimer in reclaimers:
            _add(held.setdefault(job.uid, {}), reclaimer.request.amounts, 1)
            _add(in_use, reclaimer.request.amounts, 1)
        out: list[TaskInfo] = []
        for t in candidates:
            owner = self._jobs.get(t.job_id)
            if owner is None:
                continue
            victim = held.setdefault(owner.uid, {})
            _add(victim, t.request.amounts, -1)
            _add(in_use, t.request.amounts, -1)
            hdrf.evaluate(hierarchy.root, held, self.total, self._demanding(in_use))
            if hdrf.queue_key(hierarchy, job.queue) < hdrf.queue_key(hierarchy, owner.queue):
                out.append(t)
            _add(victim, t.request.amounts, 1)
            _add(in_use, t.request.amounts, 1)
        self._stale = True  # the tree was evaluated for what-ifs
        return out

    def _evaluated(self) -> hdrf.Hierarchy:
        hierarchy = self._hierarchy
        assert hierarchy is not None
        if self._stale:
            hdrf.evaluate(hierarchy.root, self.held, self.total, self._demanding(self._in_use))
            self._stale = False
        return hierarchy

    def _demanding(self, in_use: Mapping[str, int]) -> frozenset[str]:
        """The resources the cluster has some of left."""
        return frozenset(k for k, n in self.total.items() if in_use.get(k, 0) < n)

    # Placement --------------------------------------------------------------------------

    def on_place(self, task: TaskInfo, node: NodeInfo) -> None:
        self._move(task, 1)

    def on_unplace(self, task: TaskInfo, node: NodeInfo) -> None:
        self._move(task, -1)

    def _move(self, task: TaskInfo, sign: int) -> None:
        held = self.held.setdefault(task.job_id, {})
        _add(held, task.request.amounts, sign)
        _add(self._in_use, task.request.amounts, sign)
        self.shares[task.job_id] = dominant_share(held, self.total)
        self._stale = True


def _add(into: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
    for k, n in amounts.items():
        into[k] = into.get(k, 0) + sign * n


def _requested(job: JobInfo) -> dict[str, int]:
    """What all of ``job``'s pods ask (Volcano's ``TotalRequest``)."""
    out: dict[str, int] = {}
    for t in job.tasks.values():
        _add(out, t.request.amounts, 1)
    return out
