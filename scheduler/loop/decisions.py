"""The preemptions, reclaims and dissolutions a cycle decided, read from its effects
(layer 3, loop).

Used by the simulator's timeline (``preempt``, ``reclaim`` and ``dissolve`` entries) and
the live page's list of recent decisions. A pod nominated to wait for room already being
released (victims of an earlier cycle, or a DRA device whose claim is being released) is
no decision of the cycle: the page shows it among the pods nominated to its node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.framework.effects import Dissolution, Effect, EvictReason, Preemption


@dataclass(frozen=True, slots=True)
class Decision:
    """One preemption, reclaim or dissolution decided in a cycle: ``pod`` (the preemptor;
    None for victims evicted for no single pod), the ``node`` it is nominated to (the
    first victim's for a dissolution), the ``victims`` (``namespace/name``) in the order
    chosen, ``breaking`` how many of them a PodDisruptionBudget allowed no more
    disruption of (kube-scheduler's ``NumPDBViolations``), and ``kind``: ``reclaim``
    when the victims were another queue's, ``dissolve`` when they are what was left of a
    gang (the ``dissolve`` action's: one decision per gang), else ``preempt``."""

    kind: str
    pod: str | None
    node: str
    victims: tuple[str, ...]
    breaking: int = 0


def decisions_of(effects: Iterable[Effect]) -> list[Decision]:
    """The preemptions and reclaims among ``effects`` (a cycle's, in decision order), one
    per preemptor (each nomination of a Preemption, with the victims evicted for it; a
    member of a gang preemptor nominated where nothing was evicted for it has none). A
    Preemption that evicts nothing is no preemption: its pods wait for room (or a DRA
    device) already being released, and are left out. Then the dissolutions, one per
    gang."""
    effects = list(effects)
    found: list[Decision] = []
    for e in effects:
        if not isinstance(e, Preemption) or not e.evictions:
            continue
        for n in e.nominations:
            victims = e.victims_of(n.task)
            reclaim = any(v.reason is EvictReason.RECLAIMED for v in victims)
            found.append(
                Decision(
                    "reclaim" if reclaim else "preempt",
                    n.task.key,
                    n.node,
                    tuple(v.task.key for v in victims),
                    sum(v.breaks_budget for v in victims),
                )
            )
    return found + [
        Decision("dissolve", None, e.evictions[0].node, tuple(v.task.key for v in e.evictions))
        for e in effects
        if isinstance(e, Dissolution) and e.evictions
    ]
