"""The victim search shared by the evicting actions (layer 2).

- :mod:`.policy`: who may be a victim, whether the preemptor then fits, and how candidates
  and bundles rank (:class:`VictimPolicy`; :class:`LowerPriority` for preempt,
  :class:`QueueReclaim` for reclaim);
- :mod:`.candidates`: a candidate node with its victims, ranks and their lower bounds,
  PodDisruptionBudget counting;
- :mod:`.search`: the pod-by-pod search (:class:`VictimSearch`): the candidate window, the
  branch and bound, the simulation by removal and re-adding;
- :mod:`.bundles`: a gang's possible victims grouped in Safe and Whole bundles;
- :mod:`.gang_search`: the domain-wide search for a gang preemptor
  (:class:`~.gang_search.GangSearch`: one call to the plugins, the least that makes room,
  the trim), each search's state in a value made for it (:mod:`.gang_dry_run`, with the
  dry run that places the gang); :mod:`.bundle_scores`: the bundles' need, ROI and the
  exact choice's ways;
- :mod:`.fill`: the node-by-node half of the gang search, for when the ways to choose
  are too many to try all.

Where a job may be made room for in several domains, each domain is searched once and
the best one's decisions are replayed (:meth:`~scheduler.framework.statement.Statement.
replay`), not searched again (:mod:`scheduler.actions.evictions`).
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
]
