"""The ``gang`` plugin (layer 2): a job is placed in full (at least minMember) or not at all.

- valid: a job needs at least ``minMember`` live pods that no scheduling gate holds, and
  ``minTaskMember[role]`` per role, before it is worth trying; otherwise it waits and says
  why (a gang waits while a pod it needs is gated, as Kueue gates them before admission);
- ready: at least ``minMember`` tasks placed, and per role at least ``minTaskMember``;
  otherwise the status says how many can be placed, in all or of the role short;
- an elastic gang (``minMember`` below the sum of its ``minTaskMember``: no role minimum
  binds, :meth:`~scheduler.api.job.JobInfo.role_minimums`) counts ``minMember`` only, in
  all three, as Volcano's ``CheckTaskValid``, ``CheckTaskReady`` and
  ``CheckTaskPipelined`` skip the task minimums then;
- pipelined: the same, counting tasks nominated to nodes being freed;
- starving: not pipelined and still has pending tasks (a candidate for preemption);
- order: among equals, jobs that are not ready yet go first.
"""

from __future__ import annotations

from collections import Counter

from scheduler.api.job import JobInfo
from scheduler.api.task import TaskStatus
from scheduler.api.task_states import AVAILABLE
from scheduler.framework.extension_points import (
    JOB_ORDER,
    JOB_PIPELINED,
    JOB_READY,
    JOB_STARVING,
    JOB_VALID,
    HookSet,
    OrderKey,
    PluginContext,
)
from scheduler.framework.plugin_status import SUCCESS, Status
from scheduler.framework.registry import NoArguments

NAME = "gang"
_PIPELINED = frozenset({TaskStatus.PIPELINED})
_GATED = frozenset({TaskStatus.GATED})


def job_valid(job: JobInfo) -> Status:
    available = job.count(AVAILABLE)
    gated = job.count(_GATED)
    if available < job.min_member:
        return Status.unschedulable(
            f"pod group {job.uid} has {available} pod(s)"
            f"{_held(job, gated)}, fewer than its minMember {job.min_member}",
            NAME,
        )
    minimums = job.role_minimums()
    if minimums:
        by_role = Counter(t.role for t in job.tasks.values() if t.status in AVAILABLE)
        for role in sorted(minimums):
            need = minimums[role]
            if by_role[role] < need:
                held = sum(1 for t in job.tasks.values() if t.status in _GATED and t.role == role)
                return Status.unschedulable(
                    f"pod group {job.uid} has {by_role[role]} pod(s) of role "
                    f"{role!r}{_held(job, held)}, fewer than its minTaskMember {need}",
                    NAME,
                )
    return SUCCESS


def _held(job: JobInfo, gated: int) -> str:
    """`` ready to schedule and 2 held by scheduling gates (kueue.x-k8s.io/admission)``,
    or "" when no pod is gated."""
    if not gated:
        return ""
    held = (t for t in job.tasks.values() if t.status in _GATED)
    names = sorted({gate for t in held for gate in t.scheduling_gates})
    return f" ready to schedule and {gated} held by scheduling gates ({', '.join(names)})"


def _short(job: JobInfo, placed: int, by_role: Counter[str]) -> Status:
    """Success when ``placed`` tasks (``by_role`` per role) make ``job`` whole, else why."""
    if placed < job.min_member:
        return Status.unschedulable(
            f"{placed}/{len(job.tasks)} tasks of gang {job.uid} can be placed, "
            f"minMember is {job.min_member}",
            NAME,
        )
    minimums = job.role_minimums()
    for role in sorted(minimums):
        need = minimums[role]
        if by_role[role] < need:
            return Status.unschedulable(
                f"{by_role[role]} tasks of role {role!r} of gang {job.uid} can be placed, "
                f"minTaskMember is {need}",
                NAME,
            )
    return SUCCESS


def job_ready(job: JobInfo) -> Status:
    placed = job.placed_count()
    if placed < job.min_member:
        return _short(job, placed, Counter())
    if not job.role_minimums():
        return SUCCESS
    return _short(job, placed, job.placed_by_role())


def job_pipelined(job: JobInfo) -> Status:
    placed = job.placed_count() + job.count(_PIPELINED)
    if placed < job.min_member:
        return _short(job, placed, Counter())
    if not job.role_minimums():
        return SUCCESS
    return _short(job, placed, job.placed_by_role(_PIPELINED))


def job_starving(job: JobInfo) -> bool:
    return not job_pipelined(job) and bool(job.pending_tasks())


def job_key(job: JobInfo) -> OrderKey:
    return (1 if job_ready(job) else 0,)


class GangPlugin:
    name = NAME

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        hooks.add(JOB_VALID, job_valid)
        hooks.add(JOB_READY, job_ready)
        hooks.add(JOB_PIPELINED, job_pipelined)
        hooks.add(JOB_STARVING, job_starving)
        hooks.add(JOB_ORDER, job_key)

    def close(self) -> None:
        pass
