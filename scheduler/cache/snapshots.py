"""What a snapshot is made of (layer 2): reused copies, jobs, disruption budgets.

:class:`Copies` keeps the copies of tasks and nodes that the last snapshot handed out,
and what changed since: the cache tells it of every change it makes
(:meth:`Copies.task_changed`, :meth:`Copies.node_changed`), and the session that used
the last snapshot recorded in it what it touched (``Snapshot.touched_*``, written by
``Session.move``). Everything else is shared with the next snapshot unchanged. A copy
never goes back into use once changed, so what the loop's background work still holds
of an older cycle (the tasks of its effects, all touched) is never changed under it.

:func:`jobs_of` and :func:`budgets_of` build the rest of a snapshot afresh each time.
Called by :class:`~scheduler.cache.SchedulerCache` only; nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from scheduler.api.convert import budget_from_object, job_for_lone_pod
from scheduler.api.disruption import (
    ALWAYS_ALLOW,
    disruptions_allowed,
    is_healthy,
    unhealthy_evictable,
)
from scheduler.api.group_apis import SLUICE, api_of_job
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.membership import pod_queue
from scheduler.api.node import NodeInfo
from scheduler.api.owners import grouper_wait_reason
from scheduler.api.snapshot import DisruptionBudget, Snapshot
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import USES_NODE

Obj = Mapping[str, Any]


class Copies:
    """The last snapshot's copies, by task uid and node name, and what changed since."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskInfo] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._changed_tasks: set[str] = set()
        self._changed_nodes: set[str] = set()
        self._last: Snapshot | None = None

    def task_changed(self, uid: str) -> None:
        """The cache changed (or replaced, or dropped) task ``uid``."""
        self._changed_tasks.add(uid)

    def node_changed(self, name: str) -> None:
        """The cache changed node ``name``, or the tasks on it."""
        self._changed_nodes.add(name)

    def take(
        self, tasks: Mapping[str, TaskInfo], nodes: Mapping[str, NodeInfo]
    ) -> tuple[dict[str, TaskInfo], dict[str, NodeInfo]]:
        """Copies of the cache's ``tasks`` and ``nodes`` (nodes in name order), reusing
        the last ones where nothing changed. A task copied anew makes its node (before
        and after) copied anew too, so each node holds the copies the jobs will hold."""
        changed_tasks, changed_nodes = self._changed_tasks, self._changed_nodes
        if self._last is not None:
            changed_tasks |= self._last.touched_tasks
            changed_nodes |= self._last.touched_nodes
        old = self._tasks
        task_copies: dict[str, TaskInfo] = {}
        for uid, t in tasks.items():
            copy = old.get(uid)
            if copy is None or uid in changed_tasks:
                if copy is not None and copy.node_name:
                    changed_nodes.add(copy.node_name)
                copy = t.clone()
                if copy.node_name:
                    changed_nodes.add(copy.node_name)
            task_copies[uid] = copy
        node_copies: dict[str, NodeInfo] = {}
        for name in sorted(nodes):
            node = self._nodes.get(name)
            if node is None or name in changed_nodes:
                node = nodes[name].clone(task_copies)
            node_copies[name] = node
        self._tasks, self._nodes = task_copies, node_copies
        self._changed_tasks, self._changed_nodes = set(), set()
        return task_copies, node_copies

    def drop_all(self) -> None:
        """Share nothing with the snapshots handed out so far: the next :meth:`take`
        copies everything (after a cycle that failed midway, whose session may have
        changed copies without recording it)."""
        self._tasks, self._nodes = {}, {}
        self._changed_tasks, self._changed_nodes = set(), set()
        self._last = None

    @property
    def last_jobs(self) -> Mapping[str, JobInfo]:
        """The jobs of the snapshot handed out last (none before the first)."""
        return self._last.jobs if self._last is not None else {}

    def retire(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` (made of the last :meth:`take`) is the one handed out now: what
        its session touches is copied anew next time. Returns it."""
        self._last = snapshot
        return snapshot


def jobs_of(
    tasks: Mapping[str, TaskInfo],
    pod_groups: Mapping[str, JobInfo],
    last: Mapping[str, JobInfo] | None = None,
    grouped: Collection[str] = (),
) -> dict[str, JobInfo]:
    """The jobs of a snapshot: a copy of each PodGroup's, and a gang of one for each pod
    of Sluice without a PodGroup, each holding its tasks' copies. A pod naming a PodGroup
    that does not exist (its uid is in ``grouped``: the tasks whose job is a PodGroup's)
    forms a job with that ``problem``; so does a pod that waits for the pod grouper
    (``TaskInfo.awaits_grouper``): it is not tried until it is grouped. Another API's
    PodGroup whose pods all belong to other schedulers is left out (Sluice neither admits
    it nor writes its status); one without pods yet is in (Volcano's controllers create
    the pods once it is admitted).

    ``last``: the jobs of the last snapshot. A gang of one whose task copy is reused (the
    very object: the task did not change) is reused too, as nothing else goes into it and
    sessions do not change it."""
    jobs: dict[str, JobInfo] = {uid: pg.clone() for uid, pg in pod_groups.items()}
    last = last or {}
    # Jobs of other schedulers' pods: another API's PodGroup whose pods are all theirs is
    # theirs (kube-scheduler, or Volcano's scheduler, beside Sluice), not Sluice's to admit.
    others: set[str] = set()
    for task in tasks.values():
        if not task.sluice:
            others.add(task.job_id)
            continue
        job = jobs.get(task.job_id)
        if job is None:
            before = last.get(task.job_id)
            if (
                before is not None
                and not before.has_pod_group
                and len(before.tasks) == 1
                and before.tasks.get(task.uid) is task
            ):
                jobs[task.job_id] = before
                continue
            job = job_for_lone_pod(task, pod_queue(task.labels or {}, task.annotations or {}))
            if task.uid in grouped:
                job.has_pod_group = True
                job.phase = PodGroupPhase.PENDING
                job.problem = f"pod group {task.job_id} does not exist"
            elif task.awaits_grouper:
                job.problem = grouper_wait_reason(task.awaits_grouper)
            jobs[job.uid] = job
        if task.spec.problem and not job.problem:
            job.problem = task.spec.problem  # a member that can never fit holds its gang
        job.add_task(task)
    for uid in others:
        job = jobs.get(uid)
        if job is not None and not job.tasks and api_of_job(uid) is not SLUICE:
            del jobs[uid]
    for job in jobs.values():
        if job.has_pod_group and not job.priority_class and job.tasks:
            job.priority = max(t.priority for t in job.tasks.values())
    return jobs


def budgets_of(
    budgets: Mapping[str, Obj], tasks: Iterable[TaskInfo]
) -> tuple[DisruptionBudget, ...]:
    """The PodDisruptionBudgets, in key order, with the disruptions each allows: its
    ``status.disruptionsAllowed`` (and ``currentHealthy``, ``desiredHealthy``), or what the
    disruption controller would write, by the rule the embedded API server's evictions
    follow too (:mod:`scheduler.api.disruption`)."""
    if not budgets:
        return ()
    pods = [t for t in tasks if t.status in USES_NODE or t.status is TaskStatus.PENDING]
    out = []
    for key in sorted(budgets):
        obj = budgets[key]
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        base = budget_from_object(obj, 0)
        where = f"PodDisruptionBudget {base.namespace}/{base.name}"
        if "disruptionsAllowed" in status:
            allowed = int(status["disruptionsAllowed"])
            healthy = int(status.get("currentHealthy") or 0)
            desired = int(status.get("desiredHealthy") or 0)
            evictable = spec.get("unhealthyPodEvictionPolicy") == ALWAYS_ALLOW or (
                healthy >= desired > 0
            )
        else:
            matching = [
                t
                for t in pods
                if t.namespace == base.namespace and base.selector.matches(t.labels or {})
            ]
            healthy = sum(1 for t in matching if _healthy(t))
            allowed = disruptions_allowed(spec, len(matching), healthy, obj=where)
            evictable = unhealthy_evictable(spec, len(matching), healthy, obj=where)
        out.append(DisruptionBudget(base.namespace, base.name, base.selector, allowed, evictable))
    return tuple(out)


def _healthy(t: TaskInfo) -> bool:
    return is_healthy(
        running=t.status is TaskStatus.RUNNING, ready=t.ready, terminating=t.terminating
    )
