"""Named sets of task statuses, in one place (layer 0).

Each set says what the tasks in it hold or count for; code tests membership in these
instead of listing statuses. See :class:`~scheduler.api.task.TaskStatus` for the state
machine.
"""

from __future__ import annotations

from scheduler.api.task import TaskStatus as S

USES_NODE = frozenset({S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING, S.RELEASING})
"""Tasks that take their node's resources (``node.used``), those leaving included."""

HOLDS_ROOM = USES_NODE - {S.RELEASING}
"""Tasks that take their node's resources and are not being evicted (a queue's
allocation, as its status reports it)."""

ON_NODE = USES_NODE | {S.PIPELINED}
"""Tasks with a node: placed there, or nominated to it (``task.node_name`` is set)."""

COUNTED_FOR_PLUGINS = HOLDS_ROOM | {S.PIPELINED}
"""Tasks a plugin's state counts (queue usage, devices, ports, affinity): placed and not
leaving, or nominated. Placement handlers fire when a task enters or leaves this set."""

COUNTS_FOR_GANG = frozenset({S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING, S.SUCCEEDED})
"""Tasks that count toward a gang's readiness (minMember)."""

KEEPS_GANG_GOING = frozenset({S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING, S.PIPELINED})
"""Members of a running gang that are there or on their way (placed, or nominated while
their victims leave): a gang with fewer of them than its minimum, some of them running,
runs below its minimum (:meth:`~scheduler.api.job.JobInfo.runs_below_minimum`)."""

BEING_PLACED = frozenset({S.ALLOCATED, S.BINDING})
"""Members placed and not bound yet (allocated this cycle, or their bind in flight): a
gang with one is not broken by an eviction (:mod:`scheduler.actions.victims.policy`),
which would leave them alone on their nodes."""

ALIVE = frozenset(set(S) - {S.FAILED, S.UNKNOWN})
"""Tasks that are valid members of a gang (not failed)."""

AVAILABLE = ALIVE - {S.GATED}
"""Members a gang can count on now: alive and not held by scheduling gates. A gang whose
available members are fewer than it needs waits (its gated pods are not tried)."""

EVICTABLE = frozenset({S.BOUND, S.RUNNING})
"""Tasks the scheduler may choose as victims (bound in the API, not already leaving)."""

BOUND_IN_API = frozenset({S.BINDING, S.BOUND, S.RUNNING})
"""Tasks whose node is written in the API (or being written): their annotations are
final, nothing more is written on them before binding."""

TO_PLACE = frozenset({S.GATED, S.PENDING, S.PIPELINED})
"""Tasks still to be placed: pending, nominated (waiting for room), or held by gates. A
job with none of Sluice's is of no interest to the actions that place, preempt or
reserve for jobs (:attr:`~scheduler.api.cluster_snapshot.Snapshot.to_place`); within a cycle a
task only leaves this set (no action makes a placed task pending again)."""

UNFINISHED = USES_NODE | {S.GATED, S.PENDING, S.PIPELINED}
"""Tasks that keep a PodGroup from being Completed."""
