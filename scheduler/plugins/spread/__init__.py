"""podtopologyspread: kube-scheduler's PodTopologySpread, filter and score, over the node
table (layer 2).

A pod's constraints (:mod:`.constraints`): its own ``topologySpreadConstraints``, each
selector merged with its ``matchLabelKeys``; or, for a pod without any, the default
constraints (kube's system defaults: ScheduleAnyway over hostname, maxSkew 3, and zone,
maxSkew 5) with the selector its Services and controllers select it by.

**Counting.** For a constraint, the pods that count are the held pods (placed, bound,
running or nominated, not being evicted) of the pod's namespace that match the selector
(a selector with no requirement counts none), on the *eligible* nodes: nodes with every
topology key of the pod's constraints of that kind, matching the pod's node selector and
required node affinity unless ``nodeAffinityPolicy: Ignore``, and without a NoSchedule or
NoExecute taint the pod does not tolerate when ``nodeTaintsPolicy: Honor``. A domain is a
value of the topology key among eligible nodes. The counts follow every placement of the
session (placement handlers), so a pod placed earlier in the same cycle counts, a member
of a gang placed before another counts for it, and a rolled-back statement takes its pods
out again; an evicted pod stops counting, so a preemption can lower a skew.

**Filter** (DoNotSchedule), per constraint in order, the first failure charged: a node
without the topology key fails (unresolvable: ``node(s) didn't match pod topology spread
constraints (missing required label)``); otherwise ``count(domain of the node) + (1 if
the pod matches the selector) - global minimum > maxSkew`` fails (resolvable: evicting
matching pods there can fix it), where the global minimum is the least count over the
domains, or 0 while there are fewer domains than ``minDomains``.

**Score** (ScheduleAnyway), over the feasible nodes being scored: nodes missing a
constraint's key are not scored (0) unless the constraints are the system defaults; each
other node scores ``round(sum over constraints of count * log(domains + 2) + maxSkew -
1)``, where for hostname the count is the node's own matching pods and ``domains`` the
number of nodes scored, and for any other key the count of the node's domain over the
eligible nodes and ``domains`` the number of domains among the nodes scored; normalised
as kube does: ``100 * (max + min - score) // max`` (100 for all when max is 0).

Costs: a pod without constraints (and without defaults) pays one attribute test per
question. Counts are kept per distinct selector and, per domain, per set of eligible
nodes; a placement updates the counts of the selectors the pod matches.
"""

from __future__ import annotations

from scheduler.plugins.spread.constraints import PodTopologySpreadArguments
from scheduler.plugins.spread.plugin import MISSING_LABEL, SKEW, PodTopologySpreadPlugin

__all__ = ["MISSING_LABEL", "SKEW", "PodTopologySpreadArguments", "PodTopologySpreadPlugin"]
