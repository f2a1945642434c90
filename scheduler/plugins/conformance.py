"""The ``conformance`` plugin (layer 2): pods that must never be victims.

Pods in ``kube-system``, pods of the priority classes ``system-cluster-critical`` and
``system-node-critical``, pods labelled ``scheduling.sluice.dev/preemptable: "false"``,
and pods already terminating are never offered as victims.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.api import labels as L
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import VICTIMS, HookSet, PluginContext
from scheduler.framework.registry import NoArguments


def protected(task: TaskInfo) -> bool:
    """True when ``task`` may never be evicted by the scheduler."""
    return (
        task.namespace == L.SYSTEM_NAMESPACE
        or task.priority_class in L.SYSTEM_PRIORITY_CLASSES
        or not task.preemptable
        or task.terminating
    )


def allowed_victims(preemptor: TaskInfo, candidates: Sequence[TaskInfo]) -> list[TaskInfo]:
    del preemptor
    return [t for t in candidates if not protected(t)]


class ConformancePlugin:
    name = "conformance"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        hooks.add(VICTIMS, allowed_victims)

    def close(self) -> None:
        pass
