"""TaskInfo: one pod as the scheduler sees it (layer 0).

A task's ``status`` is the cache's pod state machine, extended with the session's
decisions::

    GATED ──last scheduling gate removed──▶ PENDING
    PENDING ──allocate──▶ ALLOCATED ──commit──▶ BINDING ──bind ok──▶ BOUND ──kubelet──▶ RUNNING
       │                                            └──bind failed (forget)──▶ PENDING
       └──pipeline (nominated, waits for victims)──▶ PIPELINED
    BOUND/RUNNING ──evict──▶ RELEASING ──deleted──▶ (gone)
    RUNNING ──▶ SUCCEEDED | FAILED

A GATED pod (``spec.schedulingGates`` not empty, as Kueue creates them) is never tried:
no placement, no preemption, no reason written over the API server's ``SchedulingGated``
condition; a gang does not count it among the members it can place.

Tasks that take a node's resources are those in
:data:`scheduler.api.task_states.USES_NODE`; a PIPELINED task is counted in its node's
``nominated`` resources instead. Every named set of statuses is in
:mod:`scheduler.api.task_states`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from scheduler.api.owners import OwnerRef
from scheduler.api.pod import PodSpecView
from scheduler.api.resource import Resource


class TaskStatus(enum.Enum):
    GATED = "Gated"
    PENDING = "Pending"
    ALLOCATED = "Allocated"
    PIPELINED = "Pipelined"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"

    # Members are singletons compared by identity: hash them by identity too, in C,
    # instead of Enum's hash of the name (status sets are tested on every placement).
    __hash__ = object.__hash__


@dataclass(slots=True)
class TaskInfo:
    """One pod. Mutable: the cache and the session update ``status`` and ``node_name``.

    ``spec`` is an immutable parse of the pod spec shared between clones, so cloning a
    task for a snapshot copies a handful of references.
    """

    uid: str
    namespace: str
    name: str
    job_id: str
    spec: PodSpecView
    priority: int = 0
    creation: float = 0.0
    role: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    status: TaskStatus = TaskStatus.PENDING
    node_name: str = ""
    nominated_node: str = ""
    preemptable: bool = True
    preemption_policy: str = "PreemptLowerPriority"
    priority_class: str = ""
    start_time: float = 0.0
    terminating: bool = False
    ready: bool = False
    """The pod's ``Ready`` condition is True (what a PodDisruptionBudget counts)."""
    sluice: bool = True
    """Scheduled by Sluice (schedulerName matches). Other pods only use capacity."""
    scheduling_gates: tuple[str, ...] = ()
    """The names of the pod's ``spec.schedulingGates`` (while any is left it is GATED)."""
    awaits_grouper: str = ""
    """The owner (``Job team/train``) whose pod grouper this pod waits for before it may
    be scheduled (:func:`scheduler.api.owners.grouper_wait`); "" when it does not wait.
    Set by the cache."""
    claim_statuses: tuple[tuple[str, str], ...] = ()
    """``status.resourceClaimStatuses`` (DRA): (pod claim name, claim name made from its
    template; "" when no claim is needed)."""
    controller: OwnerRef | None = None
    """The pod's controller (its owner reference marked ``controller``), if any."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def request(self) -> Resource:
        return self.spec.request

    @property
    def eviction_in_flight(self) -> bool:
        """Releasing on this scheduler's word alone: its eviction was asked for and the API
        has not shown the deletion yet (no ``deletionTimestamp``), so the call may still
        fail and the pod stay."""
        return self.status is TaskStatus.RELEASING and not self.terminating

    def clone(self) -> TaskInfo:
        return TaskInfo(
            self.uid,
            self.namespace,
            self.name,
            self.job_id,
            self.spec,
            self.priority,
            self.creation,
            self.role,
            self.labels,
            self.annotations,
            self.status,
            self.node_name,
            self.nominated_node,
            self.preemptable,
            self.preemption_policy,
            self.priority_class,
            self.start_time,
            self.terminating,
            self.ready,
            self.sluice,
            self.scheduling_gates,
            self.awaits_grouper,
            self.claim_statuses,
            self.controller,
        )

    def __repr__(self) -> str:
        where = f"@{self.node_name}" if self.node_name else ""
        return f"Task({self.key} {self.status.value}{where} p={self.priority})"
