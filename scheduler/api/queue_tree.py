"""The hierarchy of queues (layer 0): parents, children, leaves, and what is wrong with it.

Queues form a tree through ``spec.parent`` (absent: a child of the root). A queue whose
parent does not exist, or whose chain of parents loops, cannot be placed in the tree: it
is *closed*, and so is every queue below it, each with a reason that names the problem.
The admission webhook refuses such objects; the scheduler must survive them anyway (they
can exist when the webhook is not installed, or when a parent is deleted), so this never
raises and never loops.

Pure functions of the queues; built once per cycle by whoever needs it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from scheduler.api.queue import QueueInfo

ROOT = ""
"""The name of the root of the tree (queues without a parent are its children)."""


@dataclass(frozen=True, slots=True)
class QueueTree:
    """``children[name]`` in name order (``children[ROOT]``: the top-level queues), over
    the queues that are in the tree; ``closed[name]``: why a queue is not."""

    parents: Mapping[str, str]
    children: Mapping[str, tuple[str, ...]]
    closed: Mapping[str, str]

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)

    def ancestors(self, name: str) -> list[str]:
        """From the queue's parent up to its top-level ancestor (empty for a top-level
        queue, or a closed one)."""
        out: list[str] = []
        parent = self.parents.get(name, ROOT)
        while parent != ROOT and parent not in self.closed:
            out.append(parent)
            parent = self.parents.get(parent, ROOT)
        return out

    def top_down(self) -> Iterator[str]:
        """Every queue in the tree, parents before children, siblings in name order."""
        stack = list(reversed(self.children.get(ROOT, ())))
        while stack:
            name = stack.pop()
            yield name
            stack.extend(reversed(self.children.get(name, ())))

    def leaves(self, name: str) -> list[str]:
        """The leaf queues at or below ``name``, in name order."""
        if self.is_leaf(name):
            return [name]
        out: list[str] = []
        for child in self.children[name]:
            out.extend(self.leaves(child))
        return out


def queue_tree(queues: Mapping[str, QueueInfo]) -> QueueTree:
    """The tree of ``queues``, with the closed ones set apart (see the module docstring)."""
    parents = {name: q.parent for name, q in queues.items()}
    closed: dict[str, str] = {}
    origin: dict[str, tuple[str, str]] = {}
    """For each closed queue: the queue where the problem is, and the problem."""
    for name in sorted(queues):
        if name in closed:
            continue
        chain: list[str] = []
        seen: set[str] = set()
        current = name
        while current != ROOT and current not in closed:
            if current in seen:
                loop = [*chain[chain.index(current) :], current]
                why = f"its chain of parents makes a cycle: {' -> '.join(loop)}"
                for member in chain[chain.index(current) :]:
                    closed[member] = why
                    origin[member] = (member, why)
                break
            seen.add(current)
            chain.append(current)
            parent = parents[current]
            if parent != ROOT and parent not in queues:
                closed[current] = f"its parent queue {parent!r} does not exist"
                origin[current] = (current, closed[current])
                break
            current = parent
        # Everything on the chain below a closed queue is closed because of it.
        for below in reversed(chain):
            above = parents[below]
            if below not in closed and above in closed:
                where, why = origin[above]
                origin[below] = (where, why)
                closed[below] = f"its ancestor {where!r} is closed: {why}"
    children: dict[str, list[str]] = {ROOT: []}
    for name in sorted(queues):
        if name in closed:
            continue
        children.setdefault(parents[name], []).append(name)
    return QueueTree(
        {n: p for n, p in parents.items() if n not in closed},
        {k: tuple(v) for k, v in children.items()},
        closed,
    )
