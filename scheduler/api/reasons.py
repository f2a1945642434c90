"""Every reason users read of why a pod or a job is not scheduled, built here (layer 0).

A :class:`Reason` is a stable :class:`ReasonCode` and the sentence users read. The
sentence goes into the pod's ``PodScheduled=False`` condition, its ``FailedScheduling``
event and the PodGroup's condition (their ``reason`` fields keep the API's words:
``Unschedulable``, ``SchedulerError``); the code is for what matches on reasons:
``sluice explain -o json`` (``reasonCode``), ``sluice simulate --output json``
(``pendingCodes``), the scenario and conformance tests (``pendingCodes`` expectations)
and the logs. A code is part of Sluice's interface: it is not renamed, and a new kind of
reason gets a new code. The sentences may be reworded.

The actions build reasons with the functions below (never free text); what a plugin says
(a filter's rejections counted per node, a gang's or a topology's status) comes in as
the plugin's message under the code of its kind.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class ReasonCode(enum.StrEnum):
    """Why, in one word. The value is what users and tests match on."""

    NODES_UNAVAILABLE = "NodesUnavailable"
    """No node takes the pod (``0/5 nodes are available: ...``, per filter)."""
    QUEUE_SHARE_USED = "QueueShareUsed"
    """The pod's queue has no room left within its deserved share."""
    GANG_NOT_READY = "GangNotReady"
    """Fewer of the gang's pods can be placed than its minimum."""
    GANG_TOO_LARGE = "GangLargerThanFreeRoom"
    """The gang's minimum asks more than all the free room of the cluster together."""
    NO_NODE_SET_FITS = "NoNodeSetFits"
    """No node set (a rack, a zone) of the job's topology has room for its minimum."""
    JOB_NOT_VALID = "JobNotValid"
    """A plugin finds the job not worth trying yet (too few pods, pods held by scheduling
    gates, a topology constraint that names nothing)."""
    JOB_UNRESOLVED = "JobUnresolved"
    """The job cannot be built as it is (its PodGroup missing, a pod waiting for the pod
    grouper, a DRA claim not there yet, a node pool that no shard of the scheduler
    serves)."""
    QUEUE_MISSING = "QueueMissing"
    QUEUE_CLOSED = "QueueClosed"
    QUEUE_NOT_LEAF = "QueueNotLeaf"
    QUEUE_NOT_OPEN = "QueueNotOpen"
    MIN_RESOURCES_EXCEED_IDLE = "MinResourcesExceedIdle"
    """A PodGroup's minResources exceed the cluster's idle resources (not admitted)."""
    QUEUE_NO_ROOM_FOR_MIN_RESOURCES = "QueueNoRoomForMinResources"
    """The queue cannot admit a PodGroup's minResources."""
    WAITING_FOR_VICTIMS = "WaitingForVictims"
    """Nominated to a node; waiting for the pods evicted for it to terminate."""
    WAITING_FOR_PREEMPTION_CALLS = "WaitingForPreemptionCalls"
    NOMINATED_BINDING_NEXT = "NominatedBindingNext"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    """A pod of a job behind its preemption's gate, not nominated itself."""
    PREEMPTION_CANNOT_HELP = "PreemptionCannotHelp"
    """No eviction the policy allows would make room (and the pod had no other reason)."""
    PREEMPTION_BACKOFF = "PreemptionBackoff"
    """A preemption of the job failed; it may not preempt again until its backoff ends."""
    SCHEDULER_ERROR = "SchedulerError"
    """A plugin (or Sluice) failed while the job was tried; it backs off."""
    SCHEDULING_GATED = "SchedulingGated"
    """The pod has scheduling gates: it is not tried (``sluice explain`` only)."""


@dataclass(frozen=True, slots=True)
class Reason:
    """``message``, what users read, of kind ``code``."""

    code: ReasonCode
    message: str

    def __str__(self) -> str:
        return self.message

    def with_sentence(self, more: str) -> Reason:
        """This reason followed by the sentence ``more`` (its code kept)."""
        sep = " " if self.message.endswith(".") else ". "
        return Reason(self.code, f"{self.message}{sep}{more}" if self.message else more)

    def and_then(self, detail: str) -> Reason:
        """This reason, ``; detail`` appended (its code kept)."""
        return Reason(self.code, f"{self.message}; {detail}")


# Placement -------------------------------------------------------------------------------


def nodes_unavailable(explained: str) -> Reason:
    """No node takes the pod: ``explained`` is the filters' count per reason."""
    return Reason(ReasonCode.NODES_UNAVAILABLE, explained)


def queue_share_used(queue: str) -> Reason:
    return Reason(ReasonCode.QUEUE_SHARE_USED, f"queue {queue!r} has no room left within its share")


def queue_deserved_used(queue: str) -> Reason:
    return Reason(ReasonCode.QUEUE_SHARE_USED, f"queue {queue!r} has used its deserved share")


def gang_not_ready(message: str) -> Reason:
    """The gang plugin's (or any readiness plugin's) ``message``."""
    return Reason(ReasonCode.GANG_NOT_READY, message)


def gang_too_large(short: str, gang: str) -> Reason:
    """The gang's minimum (``4 pods of 2 CPU``) against the cluster's free room: ``short``
    says each resource it lacks, free and needed (``0 CPU free in all, 9 CPU needed``),
    so that the resource named is the one short."""
    return Reason(
        ReasonCode.GANG_TOO_LARGE,
        f"the cluster has {short}: too little for {gang}, the least this gang can start with",
    )


def no_node_set_fits(kind: str, gang: str) -> Reason:
    return Reason(ReasonCode.NO_NODE_SET_FITS, f"no {kind or 'node set'} has room for {gang}")


# The job and its queue --------------------------------------------------------------------


def job_not_valid(message: str) -> Reason:
    """A plugin's ``message`` of why the job is not tried yet."""
    return Reason(ReasonCode.JOB_NOT_VALID, message)


def job_unresolved(problem: str) -> Reason:
    """What the cache found wrong when building the job (``JobInfo.problem``)."""
    return Reason(ReasonCode.JOB_UNRESOLVED, problem)


def queue_missing(queue: str) -> Reason:
    return Reason(ReasonCode.QUEUE_MISSING, f"queue {queue!r} does not exist")


def queue_closed(queue: str, why: str) -> Reason:
    return Reason(ReasonCode.QUEUE_CLOSED, f"queue {queue!r} is closed: {why}")


def queue_not_leaf(queue: str, children: Iterable[str]) -> Reason:
    return Reason(
        ReasonCode.QUEUE_NOT_LEAF,
        f"queue {queue!r} has child queues ({', '.join(children)}); "
        "pods and PodGroups must name a leaf queue",
    )


def queue_not_open(queue: str, state: str) -> Reason:
    return Reason(ReasonCode.QUEUE_NOT_OPEN, f"queue {queue!r} is {state}")


def min_resources_exceed_idle(job: str, short: str) -> Reason:
    return Reason(
        ReasonCode.MIN_RESOURCES_EXCEED_IDLE,
        f"minResources of {job} exceed the cluster's idle resources ({short})",
    )


def min_resources_exceed_room(job: str, short: str, measure: str) -> Reason:
    """A plugin measured the room for admitting gangs (``overcommit``): ``measure`` says how."""
    return Reason(
        ReasonCode.MIN_RESOURCES_EXCEED_IDLE,
        f"minResources of {job} exceed {measure} ({short})",
    )


def queue_no_room_for_min_resources(queue: str, job: str) -> Reason:
    return Reason(
        ReasonCode.QUEUE_NO_ROOM_FOR_MIN_RESOURCES,
        f"queue {queue!r} has no room for the minResources of {job} (without any, the "
        "devices its pods' ResourceClaims ask)",
    )


# Preemption -------------------------------------------------------------------------------


def waiting_for_victims(nodes: Iterable[str]) -> Reason:
    """What a pod (or a job) nominated to ``nodes`` waits for while the pods evicted for
    it terminate: one sentence for the whole wait.

    The number of victims left is not in it: every new message of a pod is a status
    patch and a FailedScheduling event, on the client the binds and deletes use, and a
    countdown (3, 2, 1 victims) wrote three of each per preemptor where kube-scheduler
    writes one. ``sluice explain`` names the pods still terminating on the node."""
    names = sorted(set(nodes))
    where = f"node {names[0]}" if len(names) == 1 else f"nodes {', '.join(names)}"
    return Reason(
        ReasonCode.WAITING_FOR_VICTIMS,
        f"nominated to {where}; waiting for the pods evicted for it to terminate",
    )


def waiting_for_preemption_calls(node: str) -> Reason:
    return Reason(
        ReasonCode.WAITING_FOR_PREEMPTION_CALLS,
        f"nominated to node {node}; waiting for the preemption's API calls",
    )


def nominated_binding_next(node: str) -> Reason:
    return Reason(
        ReasonCode.NOMINATED_BINDING_NEXT,
        f"nominated to node {node}; its room is free, binding next",
    )


def waiting_for_job_preemption() -> Reason:
    """A pod of a gated job that is not nominated itself."""
    return Reason(ReasonCode.WAITING_FOR_PREEMPTION, "waiting for its job's preemption to finish")


def waiting_for_preemption() -> Reason:
    """A job behind its preemption's gate with no pod nominated yet."""
    return Reason(ReasonCode.WAITING_FOR_PREEMPTION, "waiting for its preemption to finish")


def nothing_helps(base: Reason | None, sentence: str) -> Reason:
    """``base`` (what allocate said) followed by the evicting action's ``sentence`` that
    no eviction makes room; the sentence alone when there was nothing before."""
    if base is None or not base.message:
        return Reason(ReasonCode.PREEMPTION_CANNOT_HELP, sentence)
    return base.with_sentence(sentence)


def preemption_backoff(base: Reason | None, failure: str, delay: float) -> Reason:
    """A job whose preemption failed (``failure``), backing off for ``delay`` seconds;
    ``base``: what it was told before."""
    tail = f"{failure}; preemption retried in {delay:g}s"
    if base is None or not base.message:
        return Reason(ReasonCode.PREEMPTION_BACKOFF, tail)
    return Reason(base.code, f"{base.message} {tail}")


# Failures ---------------------------------------------------------------------------------


def scheduler_error(message: str) -> Reason:
    """A plugin (or Sluice) raised while the job was tried (``SchedulerError: ...``)."""
    return Reason(ReasonCode.SCHEDULER_ERROR, message)


def retried_after(error: str, delay: float) -> Reason:
    """A job backing off after an error: the wait in all, not what is left of it (a
    reason that changes every cycle would rewrite the pods' condition, and repeat their
    event, every cycle)."""
    return Reason(ReasonCode.SCHEDULER_ERROR, f"{error}; retried after {delay:g}s")


def held_by_gates(gates: Iterable[str]) -> Reason:
    """A pending pod with scheduling gates, as ``sluice simulate`` reports it (no reason
    of the scheduler's is written on it)."""
    return Reason(
        ReasonCode.SCHEDULING_GATED, f"held by scheduling gates ({', '.join(gates)}): not tried"
    )


def scheduling_gated(gates: Iterable[str]) -> Reason:
    """A pod held by its scheduling gates (for ``sluice explain``: the pod's own condition
    stays the API server's ``SchedulingGated``)."""
    return Reason(
        ReasonCode.SCHEDULING_GATED,
        f"not tried until its scheduling gates are removed: {', '.join(gates)}",
    )
