"""Status: the answer of an extension point, and of an attempt to schedule a job (layer 1).

Four codes, each with its own retry meaning, as kube-scheduler's framework separates them:

=================  ==========================================================================
code               meaning
=================  ==========================================================================
SUCCESS            yes: the job may go on (valid, ready, placed)
UNSCHEDULABLE      not now, and removing pods (preemption, reclaim) may change that
UNRESOLVABLE       not now, and no eviction can change that (only a change of the cluster)
ERROR              a plugin (or Sluice) failed: the job is rolled back, its pods say
                   ``SchedulerError`` naming the plugin, and it backs off
=================  ==========================================================================

Expected outcomes are values of this type. What the codes do:

- a JOB_READY or JOB_PIPELINED answer that is UNRESOLVABLE makes the evicting actions leave
  the job alone this cycle (no victim search: no eviction can help it), as kube-scheduler
  skips PostFilter for UnschedulableAndUnresolvable; UNSCHEDULABLE lets them search;
- an ERROR answer is a failure of the plugin that gave it, handled as if it had raised
  (:class:`~scheduler.api.errors.PluginError`): the job's boundary
  (:meth:`scheduler.framework.session.Session.job_scope`) rolls it back, it says
  ``SchedulerError`` and backs off;
- a filter says the same per node with :attr:`Rejection.resolvable
  <scheduler.framework.extension_points.Rejection.resolvable>`: only the nodes whose
  rejections are all resolvable are preemption candidates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Code(enum.Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Status:
    """``code`` with a one-line ``message`` (empty on success) and the ``plugin`` that gave
    it (empty when the framework or an action did)."""

    code: Code = Code.SUCCESS
    message: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @staticmethod
    def unschedulable(message: str, plugin: str = "") -> Status:
        return Status(Code.UNSCHEDULABLE, message, plugin)

    @staticmethod
    def unresolvable(message: str, plugin: str = "") -> Status:
        return Status(Code.UNRESOLVABLE, message, plugin)

    @staticmethod
    def error(message: str, plugin: str = "") -> Status:
        """A plugin's own failure, told as a value rather than raised (handled the same)."""
        return Status(Code.ERROR, message, plugin)

    def __bool__(self) -> bool:
        """Truthy when the answer is yes, so ``if session.job_ready(job)`` reads as meant."""
        return self.code is Code.SUCCESS


SUCCESS = Status()
"""The one success value (extension points return it instead of building a new one)."""
