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

from scheduler.framework.effects import Effect, Evict, EvictReason, Nominate


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
    per preemptor: its Nominate gives the node, its Evicts the victims (a member of a gang
    preemptor nominated where nothing was evicted for it has none). A nomination of a job
    nothing was evicted for in the cycle is no preemption: the pod waits for room (or a
    DRA device) already being released, and is left out. Then the dissolutions, one per
    gang."""
    effects = list(effects)
    entries: dict[str | None, dict[str, object]] = {}
    victims: dict[str | None, list[str]] = {}
    breaking: dict[str | None, int] = {}
    preempting = {
        e.preemptor.job_id for e in effects if isinstance(e, Evict) and e.preemptor is not None
    }
    for e in effects:
        if isinstance(e, Nominate) and e.task.job_id in preempting:
            entries.setdefault(e.task.key, {"node": e.node, "reclaim": False})
            victims.setdefault(e.task.key, [])
    dissolved: dict[str, list[Evict]] = {}
    for e in effects:
        if isinstance(e, Evict) and e.reason is EvictReason.DISSOLVED:
            dissolved.setdefault(e.task.job_id, []).append(e)
        elif isinstance(e, Evict):
            owner = e.preemptor.key if e.preemptor is not None else None
            entry = entries.setdefault(owner, {"node": e.node, "reclaim": False})
            victims.setdefault(owner, []).append(e.task.key)
            breaking[owner] = breaking.get(owner, 0) + e.breaks_budget
            if e.reason is EvictReason.RECLAIMED:
                entry["reclaim"] = True
    return [
        Decision(
            "reclaim" if entry["reclaim"] else "preempt",
            owner,
            str(entry["node"]),
            tuple(victims[owner]),
            breaking.get(owner, 0),
        )
        for owner, entry in entries.items()
    ] + [
        Decision("dissolve", None, evicts[0].node, tuple(e.task.key for e in evicts))
        for evicts in dissolved.values()
    ]
