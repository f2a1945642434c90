"""The ``gang`` plugin (layer 2): a job is placed in full (at least minMember) or not at all.

- valid: a job needs at least ``minMember`` live pods, and ``minTaskMember[role]`` per
  role, before it is worth trying; otherwise it waits and says why;
- ready: at least ``minMember`` tasks placed, and per role at least ``minTaskMember``;
- pipelined: the same, counting tasks nominated to nodes being freed;
- starving: not pipelined and still has pending tasks (a candidate for preemption);
- order: among equals, jobs that are not ready yet go first.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from scheduler.api.job import JobInfo
from scheduler.api.task import ALIVE, TaskStatus
from scheduler.framework.extension_points import HookSet, OrderKey
from scheduler.framework.registry import NoArguments

if TYPE_CHECKING:
    from scheduler.framework.session import Session

_PIPELINED = frozenset({TaskStatus.PIPELINED})


def _roles_met(job: JobInfo, counts: Counter[str]) -> bool:
    return all(counts[role] >= n for role, n in job.min_task_member.items())


def job_valid(job: JobInfo) -> str | None:
    alive = job.valid_count()
    if alive < job.min_member:
        return f"pod group {job.uid} has {alive} pod(s), fewer than its minMember {job.min_member}"
    if job.min_task_member:
        by_role = Counter(t.role for t in job.tasks.values() if t.status in ALIVE)
        for role in sorted(job.min_task_member):
            need = job.min_task_member[role]
            if by_role[role] < need:
                return (
                    f"pod group {job.uid} has {by_role[role]} pod(s) of role "
                    f"{role!r}, fewer than its minTaskMember {need}"
                )
    return None


def job_ready(job: JobInfo) -> bool:
    if job.placed_count() < job.min_member:
        return False
    return not job.min_task_member or _roles_met(job, job.placed_by_role())


def job_pipelined(job: JobInfo) -> bool:
    placed = job.placed_count() + job.count(_PIPELINED)
    if placed < job.min_member:
        return False
    return not job.min_task_member or _roles_met(job, job.placed_by_role(_PIPELINED))


def job_starving(job: JobInfo) -> bool:
    return not job_pipelined(job) and bool(job.pending_tasks())


def job_key(job: JobInfo) -> OrderKey:
    return (1 if job_ready(job) else 0,)


class GangPlugin:
    name = "gang"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def open(self, session: Session, hooks: HookSet) -> None:
        hooks.add_job_valid(job_valid)
        hooks.add_job_ready(job_ready)
        hooks.add_job_pipelined(job_pipelined)
        hooks.add_job_starving(job_starving)
        hooks.add_job_order(job_key)

    def close(self, session: Session) -> None:
        pass
