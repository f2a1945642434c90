"""Effects: what a committed decision asks the cluster to do (layer 1).

Statements produce them on commit; the loop hands them to the backends. They carry the
session's TaskInfo so the cache can assume them without looking anything up.

:class:`EffectLedger` is the port through which every assumption about an effect is made
and undone: the cache implements it; the loop (binds, phases, and the preemption
effects it hands on), the status reporter and the preemption executor use it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskInfo


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind ``task`` to ``node``: first write ``annotations`` on the pod and ``claims``
    (DRA allocations and reservations, kube-scheduler's PreBind), then the binding."""

    task: TaskInfo
    node: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[ClaimBinding, ...] = ()


class EvictReason(enum.Enum):
    """Why a pod is evicted."""

    PREEMPTED = "preempted"
    """For a pod of higher priority of the same queue."""
    RECLAIMED = "reclaimed"
    """For a queue below its share: the pod's queue is above its own."""
    DISSOLVED = "dissolved"
    """For no other pod: the pod's gang has run below its minimum for too long (the
    ``dissolve`` action); it is evicted so that the gang can start again whole."""

    __hash__ = object.__hash__


class VictimBundle(enum.Enum):
    """What a victim's eviction does to its gang (the bundles of the victim search)."""

    POD = "pod"
    """A pod of its own (no PodGroup)."""
    SAFE = "safe"
    """A member the gang can spare: it stays whole (above its minimum)."""
    WHOLE = "whole"
    """A member of the gang's core: the gang is broken, its other members go too."""

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Evict:
    """Evict ``task`` from ``node`` for ``preemptor`` (of queue ``queue``), for ``reason``;
    ``bundle`` says what the eviction does to the victim's gang; ``breaks_budget``,
    whether it takes a pod a PodDisruptionBudget allows no more disruption of, as the
    victim search counted it (kube-scheduler's ``NumPDBViolations``). A dissolution
    (:attr:`EvictReason.DISSOLVED`) has no preemptor; every other eviction has one."""

    task: TaskInfo
    node: str
    reason: EvictReason
    preemptor: TaskInfo | None = None
    queue: str = ""
    bundle: VictimBundle = VictimBundle.POD
    breaks_budget: bool = False


@dataclass(frozen=True, slots=True)
class Nominate:
    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class ClearNomination:
    """A nominated task no longer fits its node: withdraw the nomination."""

    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class SetPhase:
    job: JobInfo
    phase: PodGroupPhase


Effect = Bind | Evict | Nominate | ClearNomination | SetPhase


class EffectLedger(Protocol):
    """What the scheduler assumes of its own effects before the cluster shows them.

    The one place every assume and forget goes through; implemented by the cache. Called
    from the loop's task only (the loop and what it owns: its binder, its status
    reporter, the preemption executor). Synchronous, never raises for an unknown pod.
    """

    def assume(self, effect: Effect, /) -> Sequence[TaskInfo]:
        """Act on ``effect`` from now on, as if the cluster showed it already: a Bind's pod
        on its node, an Evict's pod releasing, a Nominate's pod waiting on its node, a
        ClearNomination's pod pending again, a SetPhase's PodGroup in its phase.

        Returns, for a Nominate, the pods of lower priority nominated to the same node
        whose nomination it withdrew because they no longer fit there with it (KEP-4832;
        lowest priority first, only as many as needed: those that still fit keep their
        nomination); their nominations must be cleared in the API too. Empty for every
        other effect.
        """
        ...

    def forget(self, effect: Effect, /) -> None:
        """``effect``'s call failed: undo what :meth:`assume` did. A Bind's pod is pending
        again (and will be retried); an Evict's pod holds its room again; a Nominate's pod
        is pending again. Idempotent."""
        ...

    def claim_written(self, binding: ClaimBinding, /) -> None:
        """The claim write ``binding`` of an assumed Bind took effect: whatever becomes of
        the bind, the claim stays allocated until its events say otherwise (forgetting
        the Bind no longer undoes it)."""
        ...

    def holds(self, uid: str, /) -> bool:
        """Is pod ``uid`` still there as far as the events show (its deletion not seen)?"""
        ...

    def holds_devices(self, uid: str, /) -> bool:
        """Is a DRA claim with devices allocated still reserved for pod ``uid``, as the
        events show (the claim controller has not released them yet)?"""
        ...
