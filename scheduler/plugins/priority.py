"""The ``priority`` plugin (layer 2): order jobs and tasks by priority, then age, then name.

Higher priority first; among equals the older first. The framework appends the name
(job uid, task namespace/name) as the last tie-break, so decisions are deterministic.
"""

from __future__ import annotations

from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import (
    JOB_ORDER,
    TASK_ORDER,
    HookSet,
    OrderKey,
    PluginContext,
)
from scheduler.framework.registry import NoArguments


def job_key(job: JobInfo) -> OrderKey:
    return (-job.priority, job.creation)


def task_key(task: TaskInfo) -> OrderKey:
    return (-task.priority, task.creation)


class PriorityPlugin:
    name = "priority"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        hooks.add(JOB_ORDER, job_key)
        hooks.add(TASK_ORDER, task_key)

    def close(self) -> None:
        pass
