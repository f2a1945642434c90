"""The victim search shared by the evicting actions (layer 2).

- :mod:`.candidates`: a candidate node with its victims, ranks and their lower bounds,
  PodDisruptionBudget counting;
- :mod:`.policy`: who may be a victim and how candidates rank (:class:`VictimPolicy`;
  :class:`LowerPriority` for preempt);
- :mod:`.search`: the search itself (:class:`VictimSearch`): the candidate window, the
  branch and bound, the simulation by removal and re-adding, the gang bundling.
"""

from __future__ import annotations

from scheduler.actions.victims.candidates import (
    Candidate,
    RankKey,
    kube_rank,
    kube_rank_bound,
    pdb_violations,
)
from scheduler.actions.victims.policy import LowerPriority, QueueReclaim, VictimPolicy
from scheduler.actions.victims.search import (
    ReclaimArguments,
    SearchArguments,
    VictimSearch,
    with_sentence,
)

__all__ = [
    "Candidate",
    "LowerPriority",
    "QueueReclaim",
    "RankKey",
    "ReclaimArguments",
    "SearchArguments",
    "VictimPolicy",
    "VictimSearch",
    "kube_rank",
    "kube_rank_bound",
    "pdb_violations",
    "with_sentence",
]
