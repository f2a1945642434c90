"""The ``priority`` plugin (layer 2): order jobs and tasks by priority, then age, then name.

Higher priority first; among equals the older first. The framework appends the name
(job uid, task namespace/name) as the last tie-break, so decisions are deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import HookSet, OrderKey
from scheduler.framework.registry import NoArguments

if TYPE_CHECKING:
    from scheduler.framework.session import Session


def job_key(job: JobInfo) -> OrderKey:
    return (-job.priority, job.creation)


def task_key(task: TaskInfo) -> OrderKey:
    return (-task.priority, task.creation)


class PriorityPlugin:
    name = "priority"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def open(self, session: Session, hooks: HookSet) -> None:
        hooks.add_job_order(job_key)
        hooks.add_task_order(task_key)

    def close(self, session: Session) -> None:
        pass
