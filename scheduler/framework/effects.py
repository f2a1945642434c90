"""Effects: what a committed decision asks the cluster to do (layer 1).

Statements produce them on commit, one per decision: a Bind per placement, a Preemption
(every nomination of a preempt or reclaim decision with the evictions made for it) or a
Dissolution (what is left of one gang) whole, a ClearNomination per withdrawn
nomination, a SetPhase per admission; the loop hands them to the binding cycle and the
preemption executor. They carry the session's TaskInfo so the cache can assume them
without looking anything up; a Preemption's or Dissolution's per-pod parts (Evict,
Nominate) are what the ledger assumes and forgets one by one.

:class:`EffectLedger` is the port through which every assumption about an effect is made
and undone: the cache implements it; the loop (binds, phases, and the preemption
effects it hands on), the status reporter and the preemption executor use it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskInfo
from scheduler.api.volumes.prebind import VolumeBindings


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind ``task`` to ``node``: first write ``annotations`` on the pod, ``volumes`` (PVs'
    claimRefs and claims' selected nodes, then wait for the PV controller to bind the
    claims) and ``claims`` (DRA allocations and reservations), in kube-scheduler's PreBind
    order, then the binding."""

    task: TaskInfo
    node: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[ClaimBinding, ...] = ()
    volumes: VolumeBindings | None = None


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
    """Nominate ``task`` to ``node``, where room is being freed for it (a part of a
    :class:`Preemption`)."""

    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class ClearNomination:
    """A nominated task no longer fits its node: withdraw the nomination."""

    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption (or reclaim) as a statement committed it, whole: the preemptor's
    pods nominated to their nodes (a gang: each task it needs) and the pods evicted for
    them, each in decision order (every eviction names its preemptor, one of
    ``nominations``; a nomination may have none: room is being freed already)."""

    nominations: tuple[Nominate, ...]
    evictions: tuple[Evict, ...] = ()

    def victims_of(self, preemptor: TaskInfo) -> tuple[Evict, ...]:
        """The evictions made for ``preemptor`` (one of the nominations' tasks)."""
        return tuple(
            e
            for e in self.evictions
            if e.preemptor is not None and e.preemptor.uid == preemptor.uid
        )


@dataclass(frozen=True, slots=True)
class Dissolution:
    """What is left of gang ``job`` (``namespace/name``), evicted as one decision (the
    ``dissolve`` action's, reason :attr:`EvictReason.DISSOLVED`): no preemptor, no node
    to nominate."""

    job: str
    evictions: tuple[Evict, ...]


@dataclass(frozen=True, slots=True)
class SetPhase:
    job: JobInfo
    phase: PodGroupPhase


Effect = Bind | Preemption | Dissolution | ClearNomination | SetPhase

Part = Evict | Nominate
"""The per-pod parts of a Preemption or Dissolution: what the ledger assumes and forgets
one by one."""


def parts(effects: Iterable[Effect]) -> Iterator[Effect | Part]:
    """``effects`` with each Preemption and Dissolution opened into its parts, in the
    order they were decided (a preemption's evictions, then its nominations); other
    effects as they are."""
    for e in effects:
        if isinstance(e, Preemption):
            yield from e.evictions
            yield from e.nominations
        elif isinstance(e, Dissolution):
            yield from e.evictions
        else:
            yield e


class EffectLedger(Protocol):
    """What the scheduler assumes of its own effects before the cluster shows them.

    The one place every assume and forget goes through; implemented by the cache. Called
    from the loop's task only (the loop and what it owns: its binder, its status
    reporter, the preemption executor). Synchronous, never raises for an unknown pod.
    """

    def assume(self, effect: Effect, /) -> Mapping[str, Sequence[TaskInfo]]:
        """Act on ``effect`` from now on, as if the cluster showed it already: a Bind's pod
        on its node, a Preemption's victims releasing and then its pods waiting on their
        nodes, a Dissolution's pods releasing, a ClearNomination's pod pending again, a
        SetPhase's PodGroup in its phase. The events win over a decision made on an older
        snapshot: a Bind whose pod they show on a node already (another replica bound
        it) or gone assumes nothing, and its call meets the API server's answer.

        Returns, for a Preemption, per nominated pod's uid, the pods of lower priority
        nominated to the same node whose nomination it withdrew because they no longer
        fit there with it (KEP-4832; lowest priority first, only as many as needed:
        those that still fit keep their nomination); their nominations must be cleared
        in the API too. Empty for every other effect.
        """
        ...

    def forget(self, effect: Effect | Part, /) -> None:
        """``effect``'s call failed: undo what :meth:`assume` did. A Bind's pod is pending
        again (and will be retried); an Evict's pod holds its room again; a Nominate's pod
        is pending again (a Preemption or Dissolution: each of its parts). Idempotent."""
        ...

    def bound_elsewhere(self, effect: Bind, node: str, /) -> None:
        """The API server says the pod of the assumed ``effect`` is bound to ``node``, not
        ``effect.node`` (a 409 naming it, or a lost reply's read: another replica bound
        it and the events have not shown it yet). That is knowledge, not a failure: the
        pod leaves ``effect.node`` and holds its room on ``node``, assumed (not tried
        again), until the events show it there or gone. Nothing when the events show it
        on a node already. Idempotent."""
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
