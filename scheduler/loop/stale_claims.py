"""Allocated DRA claims that nobody uses and that keep a pod from being placed (layer 3).

kube-scheduler's DynamicResources PostFilter: when a pod fits no node, a claim of it
that is allocated but reserved for nobody (or for that pod only) is deallocated, so that
the next attempt may allocate it where the pod fits. Such a claim is left behind when a
bind failed after its claim was written (the reservation withdrawn, the allocation kept
and pinned to that node), or when a claim was allocated by someone else. The claim
controller does not deallocate it: it acts only when reservations are removed.

:func:`stale_claims` picks them from a finished cycle (pure); the loop clears their
allocation through the :class:`~scheduler.ports.ClaimWriter`, guarded by the claim's
resourceVersion (a reservation made meanwhile makes it a conflict, and nothing changes).
A claim whose write the scheduler itself has in flight is never picked.

:func:`stale_extended_claims` picks, the same way, the claims made for a pending pod's
extended resources (KEP-5004) by an earlier attempt whose bind failed (the claim's
deletion then failed, or its reply was lost) or by another scheduler: kube-scheduler's
PostFilter deletes such a claim so that the next attempt makes a new one; the loop does
too (:meth:`~scheduler.ports.ClaimWriter.delete_claim`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from scheduler.api.dra.model import ClaimInfo
from scheduler.api.dra.pods import claims_of_pod
from scheduler.api.dra.view import DraView
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskStatus


def stale_claims(
    view: DraView | None,
    jobs: Mapping[str, JobInfo],
    unschedulable: Callable[[str], bool],
    assumed: Callable[[str], bool],
) -> list[ClaimInfo]:
    """The claims to deallocate after a cycle over ``jobs`` (the session's, after its
    actions): of each pending pod of Sluice that ``unschedulable(uid)`` says found no
    node, those allocated and reserved for nobody but it, that no other pod holds (on a
    node or nominated), and that ``assumed(key)`` does not say are being written."""
    if view is None:
        return []
    held: set[str] = set()
    pending = []
    for job in jobs.values():
        for t in job.tasks.values():
            if not t.spec.resource_claims:
                continue
            keys = claims_of_pod(t, view.claims).keys
            if t.status is TaskStatus.PENDING:
                if t.sluice and unschedulable(t.uid):
                    pending.append((t.uid, keys))
            elif t.status not in (TaskStatus.SUCCEEDED, TaskStatus.FAILED):
                held.update(keys)
    out: dict[str, ClaimInfo] = {}
    for uid, keys in pending:
        for key in keys:
            claim = view.claims[key]
            if (
                claim.allocation is not None
                and key not in held
                and all(c.uid == uid for c in claim.reserved_for)
                and not claim.deleting
                and not assumed(key)
            ):
                out[key] = claim
    return [out[k] for k in sorted(out)]


def stale_extended_claims(
    view: DraView | None, jobs: Mapping[str, JobInfo], unschedulable: Callable[[str], bool]
) -> list[ClaimInfo]:
    """The claims to delete after a cycle over ``jobs``: of each pending pod of Sluice
    that ``unschedulable(uid)`` says found no node, the claim in the API made for its
    extended resources (one assumed written by the scheduler, not in the API yet, is
    never picked: its own writes delete it if they fail)."""
    if view is None or not view.extended_claims:
        return []
    out = []
    for job in jobs.values():
        for t in job.tasks.values():
            key = view.extended_claims.get(t.uid)
            if key is None or t.status is not TaskStatus.PENDING:
                continue
            claim = view.claims.get(key)
            if claim is not None and claim.uid and t.sluice and unschedulable(t.uid):
                out.append(claim)
    return sorted(out, key=lambda c: c.key)
