"""Hierarchical dominant resource fairness (layer 2): the tree the ``drf`` plugin orders
queues by when ``hierarchy`` is on.

Volcano's HDRF (``pkg/scheduler/plugins/drf``), on Sluice's queue tree: a queue's place is
its chain of ``parent`` queues, its weight its ``weight`` (at least 1); the jobs of a
queue are its leaves. Volcano builds the same tree from each queue's ``volcano.sh/hierarchy``
and ``volcano.sh/hierarchy-weights`` annotations, whose inner nodes are names, not queues.

:func:`evaluate` computes, bottom up, each node's *allocated* and *share* (dominant share
of the cluster's total) and whether it is *saturated*:

* a job is saturated when it holds all it asks of some resource, or holds some of a
  resource the cluster has none left of (not *demanding*); its allocated is what it
  holds;
* an inner node's children that hold something are rescaled to the smallest dominant
  share among those not saturated (saturated ones count as they are), and summed: that
  is the node's allocated; it is saturated when every child is.

Queues are ordered by the chain of their nodes from the root: at the first level where
two chains differ, the unsaturated node first, then the lower share / weight; when one
chain ends with every level equal, the two are equal here (the next plugin decides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from scheduler.api.queue_tree import ROOT, QueueTree


def dominant_share(allocated: Mapping[str, float], total: Mapping[str, int]) -> float:
    """The largest share of ``total`` that ``allocated`` holds, over the resources of
    ``total`` (Volcano's ``calculateShare``: none of a resource the cluster has none of
    counts as a share of 1)."""
    share = 0.0
    for name, amount in total.items():
        held = allocated.get(name, 0.0)
        s = (held / amount) if amount else (1.0 if held else 0.0)
        share = max(share, s)
    return share


class Unranked(float):
    """A level a queue's chain does not reach: equal to anything, so that two chains
    that agree as far as the shorter goes tie, and the next plugin's key decides (as
    Volcano's comparison stops at the shorter path)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = float.__hash__


UNRANKED: Final = Unranked(0.0)


@dataclass(slots=True)
class Node:
    """A queue (``job`` empty) or a job (``job`` its uid) of the tree."""

    name: str
    weight: float = 1.0
    children: list[Node] = field(default_factory=list)
    job: str = ""
    request: Mapping[str, int] = field(default_factory=dict)
    """A job's: what all its pods ask (Volcano's ``TotalRequest``)."""
    allocated: dict[str, float] = field(default_factory=dict)
    share: float = 0.0
    saturated: bool = False


@dataclass(slots=True)
class Hierarchy:
    """The tree of the queues that hold jobs (and their ancestors), and each queue's chain
    of nodes from the root."""

    root: Node
    chains: dict[str, list[Node]]
    """Queue name -> its node and its ancestors', top down (the root left out)."""
    depth: int


def build(
    tree: QueueTree,
    weights: Mapping[str, int],
    jobs: Iterable[tuple[str, str, Mapping[str, int]]],
) -> Hierarchy:
    """The tree of ``jobs`` ((uid, queue, total request) each) on ``tree``: each queue of
    a job and its ancestors get a node, weighted by ``weights`` (at least 1). Jobs of a
    queue outside the tree (closed) are left out."""
    root = Node(ROOT)
    nodes: dict[str, Node] = {}
    chains: dict[str, list[Node]] = {}

    def node_of(queue: str) -> Node:
        found = nodes.get(queue)
        if found is not None:
            return found
        parent_name = tree.parents.get(queue, ROOT)
        parent = root if parent_name == ROOT else node_of(parent_name)
        found = nodes[queue] = Node(queue, float(max(weights.get(queue, 1), 1)))
        parent.children.append(found)
        chains[queue] = [*chains.get(parent_name, []), found]
        return found

    for uid, queue, request in sorted(jobs):
        if queue not in tree.parents or queue in tree.closed:
            continue
        node_of(queue).children.append(Node(uid, job=uid, request=request))
    depth = max((len(c) for c in chains.values()), default=0)
    return Hierarchy(root, chains, depth)


def evaluate(
    node: Node,
    held: Mapping[str, Mapping[str, int]],
    total: Mapping[str, int],
    demanding: frozenset[str],
) -> None:
    """Compute ``node``'s subtree from ``held`` (job uid -> what it holds) bottom up, in
    place (see the module's docstring)."""
    if node.job:
        node.allocated = {k: float(v) for k, v in held.get(node.job, {}).items() if v}
        node.share = dominant_share(node.allocated, total)
        node.saturated = _saturated(node.allocated, node.request, demanding)
        return
    smallest = 1.0
    for child in node.children:
        evaluate(child, held, total, demanding)
        if child.share != 0 and not child.saturated:
            smallest = min(smallest, child.share)
    allocated: dict[str, float] = {}
    for child in node.children:
        if child.share == 0:
            continue
        scale = 1.0 if child.saturated else smallest / child.share
        for k, v in child.allocated.items():
            allocated[k] = allocated.get(k, 0.0) + v * scale
    node.allocated = allocated
    node.share = dominant_share(allocated, total)
    node.saturated = all(c.saturated for c in node.children)


def _saturated(
    allocated: Mapping[str, float], request: Mapping[str, int], demanding: frozenset[str]
) -> bool:
    for name, held in allocated.items():
        asked = request.get(name, 0)
        if held and asked and held >= asked:
            return True
        if name not in demanding and asked:
            return True
    return False


def queue_key(hierarchy: Hierarchy, queue: str) -> tuple[float, ...]:
    """``queue``'s place in the order: per level of its chain, (saturated, share /
    weight), padded with :data:`UNRANKED` to the tree's depth (every key is as long)."""
    key: list[float] = []
    for node in hierarchy.chains.get(queue, ()):
        key += (1.0 if node.saturated else 0.0, node.share / node.weight)
    key += [UNRANKED] * (2 * hierarchy.depth - len(key))
    return tuple(key)
