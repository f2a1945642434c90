"""A ResourceClaim as the dra plugin keeps it during one session (its allocation, from
the API or made here; who holds it; who left it), and what the claim writes before a bind
(:func:`claim_writes`). Called by :mod:`scheduler.plugins.dra` only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.api.dra.model import (
    FINALIZER,
    Allocation,
    ClaimBinding,
    ClaimInfo,
    ExtendedClaim,
)
from scheduler.api.errors import InvariantError
from scheduler.api.task import TaskInfo, TaskStatus


@dataclass(slots=True)
class ClaimState:
    """A claim in the session: its allocation (API or session), who holds it."""

    claim: ClaimInfo
    allocation: Allocation | None
    devices: tuple[int, ...] = ()
    holders: set[str] = field(default_factory=set)
    """Tasks (uids) placed, bound or nominated that hold the claim now."""
    departed: dict[str, TaskInfo] = field(default_factory=dict)
    """Tasks that held it and left in this session (or were releasing at open)."""
    made_by: str = ""
    """The task whose placement allocated it in this session ("" for the API's)."""
    nominated: int | None = None
    """For a claim allocated in the session for a nominated task: its priority."""
    extended: ExtendedClaim | None = None
    """For a pod's extended-resource claim made in this session: what to create."""


def released(state: ClaimState, tasks: Mapping[str, TaskInfo]) -> bool:
    """Is the API allocation of a claim nobody holds any more on its way out (its
    consumers being evicted or gone, so the claim controller will deallocate it)?"""
    if state.holders or state.made_by or state.allocation is None:
        return False
    for t in state.departed.values():
        if t.status is TaskStatus.RELEASING:
            return True
    for consumer in state.claim.reserved_for:
        holder = tasks.get(consumer.uid)
        if holder is None or holder.status is TaskStatus.RELEASING:
            return True
    return False


def claim_writes(
    task: TaskInfo, keys: Sequence[str], states: Mapping[str, ClaimState]
) -> list[ClaimBinding]:
    """The writes to ``task``'s claims ``keys`` (those it holds) before it is bound: for
    each not reserved for it in the API, the allocation made in this session (if the API
    has none), the pod for ``reservedFor``, and whether the claim needs the finalizer.
    Raises InvariantError for a claim without devices: a pod is never bound without."""
    out = []
    for key in keys:
        state = states.get(key)
        if state is None or state.allocation is None:
            # Never bind a pod whose claim has no devices: the job's attempt fails
            # (SchedulerError) and is rolled back instead.
            raise InvariantError(f"ResourceClaim {key} of {task.key} is not allocated")
        claim = state.claim
        if state.extended is not None:
            out.append(
                ClaimBinding(
                    claim.namespace,
                    "",
                    "",
                    task.name,
                    task.uid,
                    state.allocation,
                    add_finalizer=True,
                    extended=state.extended,
                )
            )
            continue
        if claim.reserved_for_pod(task.uid) and claim.allocation is not None:
            continue
        allocation = state.allocation if claim.allocation is None else None
        out.append(
            ClaimBinding(
                claim.namespace,
                claim.name,
                claim.uid,
                task.name,
                task.uid,
                allocation,
                add_finalizer=allocation is not None and FINALIZER not in claim.finalizers,
            )
        )
    return out
