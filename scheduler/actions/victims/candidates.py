"""Candidates of a victim search and how they rank (layer 2).

A :class:`Candidate` is a node with the victims whose eviction lets the preemptor fit
there. Ranks are tuples, smaller is better; :func:`kube_rank` is kube-scheduler's order,
and :func:`kube_rank_bound` a cheap lower bound of it that lets the search skip nodes
that cannot rank first. :func:`pdb_violations` counts PodDisruptionBudgets broken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.api.cluster_snapshot import DisruptionBudget
from scheduler.api.disruption import is_healthy
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus

PRIORITY_OFFSET = 1 << 31
"""Makes every priority positive for the sum, as kube-scheduler does."""

RankKey = tuple[int | float | str, ...]
"""A candidate's rank; smaller is better. Compared lexicographically."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Evicting ``victims`` (on ``node``, and members of the gangs they break elsewhere)
    makes room for the preemptor on ``node``; ``pdb_violations`` budgets break."""

    node: NodeInfo
    victims: tuple[TaskInfo, ...]
    pdb_violations: int

    def rank(self) -> RankKey:
        """kube-scheduler's order (:func:`kube_rank`)."""
        return kube_rank(self)


def kube_rank(c: Candidate) -> RankKey:
    """Fewest PDB violations, lowest priority of the highest victim, smallest sum of
    priorities, fewest victims, latest start of the highest-priority victims, node name."""
    top = max(v.priority for v in c.victims)
    total = sum(v.priority + PRIORITY_OFFSET for v in c.victims)
    earliest_top_start = min(v.start_time for v in c.victims if v.priority == top)
    return (c.pdb_violations, top, total, len(c.victims), -earliest_top_start, c.node.name)


def pdb_violations(victims: Sequence[TaskInfo], budgets: Sequence[DisruptionBudget]) -> list[bool]:
    """For each victim, in order, whether evicting it (after the ones before) breaks a budget.
    An unhealthy victim of a budget that lets unhealthy pods go costs it nothing (the rule
    of :mod:`scheduler.api.disruption`, which the Eviction API follows too), nor does one
    the budget lists as disrupted already (its eviction processed: ``disruptedPods``)."""
    allowed = {(b.namespace, b.name): b.disruptions_allowed for b in budgets}
    out = []
    for v in victims:
        broke = False
        # Running as the cluster shows it: the search may have marked it releasing already.
        running = v.status in (TaskStatus.RUNNING, TaskStatus.RELEASING)
        healthy = is_healthy(running=running, ready=v.ready, terminating=v.terminating)
        for b in budgets:
            if not healthy and b.unhealthy_evictable:
                continue
            if b.namespace == v.namespace and v.name in b.disrupted:
                continue
            if b.namespace == v.namespace and b.selector.matches(v.labels or {}):
                key = (b.namespace, b.name)
                allowed[key] -= 1
                broke = broke or allowed[key] < 0
        out.append(broke)
    return out


def breaking(victims: Sequence[TaskInfo], budgets: Sequence[DisruptionBudget]) -> dict[str, bool]:
    """:func:`pdb_violations` by victim uid: whether each eviction breaks a budget."""
    return dict(zip((v.uid for v in victims), pdb_violations(victims, budgets), strict=True))


def fewest_victims(room: Sequence[Sequence[int]], need: Sequence[int]) -> int | None:
    """The fewest of the pods whose rooms are ``room`` (per column) that could free
    ``need`` (per column), or None when all of them cannot: for each column, the largest
    rooms first. A lower bound of how many victims any preemption needs."""
    fewest = 1
    for j, lack in enumerate(need):
        if lack <= 0:
            continue
        freed = 0
        for count, amount in enumerate(sorted((r[j] for r in room), reverse=True), 1):
            freed += amount
            if freed >= lack:
                fewest = max(fewest, count)
                break
        else:
            return None
    return fewest


def kube_rank_bound(
    node: str, possible: Sequence[TaskInfo], room: Sequence[Sequence[int]], need: Sequence[int]
) -> RankKey | None:
    """A lower bound of :func:`kube_rank` of any preemption on ``node`` that evicts pods of
    ``possible`` there, or None when evicting all of them cannot free ``need``.

    ``room[i]`` is what evicting ``possible[i]`` frees, per column; ``need`` is what the
    node lacks, per column (:meth:`Session.shortfall`). Sound because the victims on the
    node must free ``need``, so they are at least ``k`` (:func:`fewest_victims`), and the
    rank compares lexicographically: no PDB violation; the lowest priority among
    ``possible``; the ``k`` lowest priorities; ``k``; and, if every victim has that lowest
    priority, their earliest start is no later than the ``k``-th latest start among such
    pods. Victims of a broken gang elsewhere only add to the rank.
    """
    if not possible:
        return None
    fewest = fewest_victims(room, need)
    if fewest is None:
        return None
    priorities = sorted(t.priority for t in possible)
    lowest = priorities[0]
    starts = sorted((t.start_time for t in possible if t.priority == lowest), reverse=True)
    latest = starts[min(fewest, len(starts)) - 1]
    total = sum(p + PRIORITY_OFFSET for p in priorities[:fewest])
    return (0, lowest, total, fewest, -latest, node)
