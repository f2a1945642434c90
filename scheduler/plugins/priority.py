"""The ``priority`` plugin (layer 2): order jobs and tasks by priority.

Higher priority first. A job's key is its priority alone, as Volcano's: among jobs of
equal priority the plugins after it decide (``gang``: those not ready yet first; ``drf``:
the smaller share first), and then the framework's tie-break, the older first, then the
uid. Among the tasks of a job, equal priorities go the older first, then by name.
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
    return (-job.priority,)


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
