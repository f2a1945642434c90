"""The reclaim rule of the ``proportion`` plugin (layer 2): which pods of other queues a
reclaiming pod may take, so that shares only ever get fairer and nothing is taken back.

**Measures.** Only *contended* resources count: those some queue deserves less of than
it asks for (its demand capped by its capability); where every queue deserves all it
asks, nobody is above its share and nothing needs taking back. In a contended resource a
queue holds ``min(allocated, deserved)`` within its share; its *satisfaction* is that
over what it deserves, and a queue's satisfaction is the lowest over the contended
resources it deserves some of (1 when it deserves none: it has all of nothing; a pod
needs all its resources, so the scarcest one is what the queue gets). ``L_r`` sums what
every queue of the tree (parents too) holds within its share of resource r.

**The rule.** A reclaim (the reclaiming pods placed, their victims evicted) is fair when
the queues' satisfactions get better in the leximin order (max-min fairness: the lowest
rises, or stays and the next lowest rises, and so on), or stay the same multiset and
``L`` falls in no contended resource, rises in one, and rises in every one in which some
queue loses within its share (a queue at its share is never emptied for another to hold
the same within its own). Pods larger than what is left of their queue's share (in some
resource they ask) may reclaim too, but only from queues above their shares by at least
what the pods take of them: no queue loses anything within its share for them (a trade
of one queue's share for another's, equal but for the rounding of the shares, is no
gain). Besides, the queues a reclaim takes from (and each ancestor below the branch they
share with the reclaiming queue) keep their guarantees and are ``reclaimable``. So a
queue is taken below its share for a pod that fits in the reclaiming queue's share when
the reclaiming queue is left less satisfied than it will be (two queues deserving 1 and
3 CPU, the first holding nothing, the second 4 in pods of 2, the first waiting with a
pod of 1: one of the second's pods goes, 0 and 1.33 becoming 1 and 0.67), or when their
satisfactions only trade places and the reclaiming queue gains more within its share
than the other loses (Volcano's "Node available resources should be included in
reclaimed resources").

**Why it cannot loop.** Both measures depend on the queues' allocations alone. While
demand stands still (and with it the deserved shares and the contended set), every
reclaim makes the allocation strictly better in the order "leximin of satisfactions,
then ``L`` resource by resource" (a strict partial order), and allocating into free room
makes it no worse in either (holding more never lowers a satisfaction or ``L``). The
allocations are finitely many, so the reclaims end, and none takes the queues back to an
allocation they had: a pod reclaimed is never reclaimed back by the pod it made room for,
since with the two queues as they were the reverse reclaim would be worse by the order
(after a third queue took from the first victim's queue, the queues stand elsewhere, and
taking back may then be fairer: no return to an allocation they had).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

ONE = Fraction(1)


@dataclass(frozen=True, slots=True)
class Standing:
    """A queue as the rule reads it: what it holds and deserves (per resource), its
    guarantee, and whether it lets anything be reclaimed."""

    allocated: Mapping[str, int]
    deserved: Mapping[str, int]
    guarantee: Mapping[str, int]
    reclaimable: bool


def within(allocated: int, deserved: int) -> int:
    """What a queue holding ``allocated`` of a resource holds within its ``deserved``."""
    return min(allocated, deserved)


class ReclaimBudget:
    """One reclaim being judged: the reclaiming queue's path (the queue and its
    ancestors) gains ``gain``; candidates are offered one at a time (:meth:`take`) and
    kept while the reclaim stays fair. Taking fewer victims leaves every queue at least
    as satisfied and ``L`` at least as high, so any subset of what was kept is fair too
    (the victim search trims its choice).

    ``standing`` is asked once per queue, as the session stands when the budget is made."""

    def __init__(
        self,
        standing: Callable[[str], Standing],
        contended: Collection[str],
        mine: Sequence[str],
        gain: Mapping[str, int],
        *,
        within_share: bool,
    ) -> None:
        self._standing = standing
        self._within_share = within_share
        """Do the reclaiming pods fit within what is left of their queue's share? If not,
        no queue may lose anything within its share for them."""
        self._contended = frozenset(contended)
        self._queues: dict[str, Standing] = {}
        self._mine = frozenset(mine)
        self._delta: dict[str, dict[str, int]] = {}
        """How each queue's allocation changes with the reclaim, per resource."""
        self._node_lift: dict[tuple[str, str], int] = {}
        """How what each queue holds within its share changes, per contended resource."""
        self.lift: dict[str, int] = dict.fromkeys(contended, 0)
        """The change of ``L_r`` per contended resource so far."""
        self.lost: dict[str, int] = dict.fromkeys(contended, 0)
        """What the queues that lose within their shares lose, per contended resource."""
        for q in mine:
            self._shift(q, gain, 1)

    def fair(self) -> bool:
        """The satisfactions of the queues touched better in the leximin order; or the
        same, with ``L`` lowered in no contended resource, raised in one, and raised in
        every one in which some queue loses within its share. For reclaiming pods larger
        than what is left of their queue's share, no queue loses anything within its own."""
        if not self._within_share and any(v > 0 for v in self.lost.values()):
            return False
        touched = list(self._delta)
        before = sorted(self.satisfaction(q, moved=False) for q in touched)
        after = sorted(self.satisfaction(q, moved=True) for q in touched)
        if after != before:
            return after > before
        lift, lost = self.lift, self.lost
        return (
            all(v >= 0 for v in lift.values())
            and any(v > 0 for v in lift.values())
            and all(lift[r] > 0 for r, v in lost.items() if v > 0)
        )

    def gains(self) -> bool:
        """Does the reclaiming queue gain within its share in some contended resource (no
        reclaim is fair otherwise)?"""
        return any(v > 0 for v in self.lift.values())

    def satisfaction(self, q: str, *, moved: bool) -> Fraction:
        """Queue ``q``'s satisfaction (see the module docstring), before the reclaim or,
        with ``moved``, after what it takes and gives so far."""
        standing = self._of(q)
        delta = self._delta.get(q, {}) if moved else {}
        lowest = ONE
        for r in self._contended:
            deserved = standing.deserved.get(r, 0)
            if deserved > 0:
                held = standing.allocated.get(r, 0) + delta.get(r, 0)
                lowest = min(lowest, Fraction(within(held, deserved), deserved))
        return lowest

    def take(self, path: Sequence[str], request: Mapping[str, int]) -> bool:
        """Offer a victim of the queue whose path (the queue, then its ancestors) is
        ``path``, freeing ``request``: kept (True) if the reclaim stays fair with it and
        the queues below the shared branch keep their guarantees and are reclaimable;
        otherwise nothing changes (False)."""
        below = [q for q in path if q not in self._mine]
        if not below:
            return False  # the reclaiming queue itself, or one of its ancestors
        for q in below:
            standing = self._of(q)
            if not standing.reclaimable:
                return False
            moved = self._delta.get(q, {})
            for r, n in request.items():
                floor = standing.guarantee.get(r, 0)
                if n > 0 and floor and standing.allocated.get(r, 0) + moved.get(r, 0) - n < floor:
                    return False
        for q in path:
            self._shift(q, request, -1)
        if self.fair():
            return True
        for q in path:
            self._shift(q, request, 1)
        return False

    def _of(self, q: str) -> Standing:
        found = self._queues.get(q)
        if found is None:
            found = self._queues[q] = self._standing(q)
        return found

    def _shift(self, q: str, request: Mapping[str, int], sign: int) -> None:
        standing = self._of(q)
        moved = self._delta.setdefault(q, {})
        for r, n in request.items():
            if not n:
                continue
            moved[r] = moved.get(r, 0) + sign * n
            if r in self.lift:
                held = standing.allocated.get(r, 0)
                deserved = standing.deserved.get(r, 0)
                now = within(held + moved[r], deserved) - within(held, deserved)
                before = self._node_lift.get((q, r), 0)
                self._node_lift[q, r] = now
                self.lift[r] += now - before
                self.lost[r] += max(-now, 0) - max(-before, 0)
