"""The cache's snapshot builder (layer 2): one copy of the cache per cycle, for a session
to change freely.

:class:`SnapshotBuilder` makes :class:`~scheduler.api.cluster_snapshot.Snapshot` s of a
:class:`~scheduler.cache.cluster_state.ClusterState`: :meth:`SnapshotBuilder.snapshot`
per cycle (the loop's, through :class:`~scheduler.cache.SchedulerCache`), and
:meth:`SnapshotBuilder.full_snapshot` copying everything (checks; the live page). It
reads the state and never changes it, but for taking the record of what changed.

:class:`Copies` keeps the copies of tasks and nodes that the last snapshot handed out.
The state records every change made to it (``ClusterState.task_changed`` and
``node_changed``), and the session that used the last snapshot recorded in it what it
touched (``Snapshot.touched_*``, written by ``Session.move``); everything else is shared
with the next snapshot unchanged. A copy never goes back into use once changed, so what
the loop's background work still holds of an older cycle (the tasks of its effects, all
touched) is never changed under it.

:func:`jobs_of` and :func:`budgets_of` build the rest of a snapshot afresh each time.
Nothing here awaits. What the scheduler holds back itself, and every per-job clock, is
not the cache's: the loop attaches its scheduling queue's view (``Snapshot.queue``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from scheduler.api.cluster_snapshot import DisruptionBudget, Snapshot
from scheduler.api.core_objects import budget_from_object, job_for_lone_pod
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
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import TO_PLACE, USES_NODE
from scheduler.cache.cluster_state import ClusterState

Obj = Mapping[str, Any]


class Copies:
    """The last snapshot's copies, by task uid and node name."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskInfo] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._last: Snapshot | None = None

    def take(
        self,
        tasks: Mapping[str, TaskInfo],
        nodes: Mapping[str, NodeInfo],
        changed_tasks: set[str],
        changed_nodes: set[str],
    ) -> tuple[dict[str, TaskInfo], dict[str, NodeInfo]]:
        """Copies of the cache's ``tasks`` and ``nodes`` (nodes in name order), reusing
        the last ones but for ``changed_tasks`` and ``changed_nodes`` (what the cache
        changed since the last take; the sets are used up) and what the last snapshot's
        session touched. A task copied anew makes its node (before and after) copied
        anew too, so each node holds the copies the jobs will hold."""
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
        return task_copies, node_copies

    def drop_all(self) -> None:
        """Share nothing with the snapshots handed out so far: the next :meth:`take`
        copies everything (after a cycle that failed midway, whose session may have
        changed copies without recording it)."""
        self._tasks, self._nodes = {}, {}
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


class SnapshotBuilder:
    """Snapshots of ``state``; owned by :class:`~scheduler.cache.SchedulerCache`."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._copies = Copies()

    def snapshot(self, *, now: float = 0.0, wall: float = 0.0) -> Snapshot:
        """A copy of what the next cycle decides on, for a session to change freely, taken
        at ``now`` (the loop's clock) and ``wall`` (the wall clock, Unix seconds).

        Tasks and nodes are copied only when they changed since the last snapshot, here
        or in the session that used it (:class:`Copies`); the others' copies are shared
        with the last snapshot. So taking a snapshot retires the last one: the session on
        it must be done. O(nodes + pods) lookups, O(changes) copies; jobs are rebuilt
        each time.
        """
        state = self._state
        last_jobs = self._copies.last_jobs
        tasks, nodes = self._copies.take(state.tasks, state.nodes, *state.take_changes())
        snap = self._build(tasks, nodes, last_jobs)
        snap.now = now
        snap.wall = wall
        snap.dra = state.dra.view()
        state.dra.extend_nodes(snap, state.nodes, state.tasks.values())
        snap.volumes = state.volumes.view()
        return self._copies.retire(snap)

    def drop_copies(self) -> None:
        """Make the next snapshot copy everything (after a cycle that failed midway)."""
        self._copies.drop_all()
        self._state.take_changes()

    def full_snapshot(self) -> Snapshot:
        """A snapshot copying everything, sharing nothing with any other (for checks:
        :meth:`snapshot` must equal it). Leaves the builder and the state as they were."""
        state = self._state
        tasks = {uid: t.clone() for uid, t in state.tasks.items()}
        nodes = {name: state.nodes[name].clone(tasks) for name in sorted(state.nodes)}
        snap = self._build(tasks, nodes)
        snap.dra = state.dra.view()
        state.dra.extend_nodes(snap, state.nodes, state.tasks.values())
        snap.volumes = state.volumes.view()
        return snap

    def _build(
        self,
        tasks: dict[str, TaskInfo],
        nodes: dict[str, NodeInfo],
        last_jobs: Mapping[str, JobInfo] | None = None,
    ) -> Snapshot:
        """The snapshot of ``tasks`` and ``nodes`` (copies) with its jobs (gangs of one
        reused from ``last_jobs`` where their task is) and fresh queues."""
        state = self._state
        groups: Mapping[str, JobInfo] = state.pod_groups
        foreign = state.shards.foreign_groups
        if foreign:
            groups = {u: j for u, j in groups.items() if u not in foreign}
        jobs = jobs_of(tasks, groups, last_jobs, state.membership.grouped)
        for job_id, reason in state.shards.orphans.items():
            job = jobs.get(job_id)
            if job is not None:
                job.problem = reason  # a pool no shard serves: said, never tried
        return Snapshot(
            nodes=nodes,
            jobs=jobs,
            queues={name: q.clone() for name, q in sorted(state.queues.items())},
            budgets=budgets_of(state.budgets, tasks.values()),
            topologies=dict(state.topologies),
            priority_classes=dict(state.priority_classes),
            to_place=jobs_to_place(tasks),
            namespaces=state.placement.namespaces,
            spread_selectors=state.placement.selectors,
        )


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


def jobs_to_place(tasks: Mapping[str, TaskInfo]) -> frozenset[str]:
    """The jobs of ``tasks`` with a task of Sluice's still to place (pending, nominated or
    gated): one pass over the tasks, the same as a walk of the jobs :func:`jobs_of` makes
    of them would find (a property test says so)."""
    return frozenset(t.job_id for t in tasks.values() if t.sluice and t.status in TO_PLACE)


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
        out.append(
            DisruptionBudget(
                base.namespace, base.name, base.selector, allowed, evictable, base.disrupted
            )
        )
    return tuple(out)


def _healthy(t: TaskInfo) -> bool:
    return is_healthy(
        running=t.status is TaskStatus.RUNNING, ready=t.ready, terminating=t.terminating
    )
