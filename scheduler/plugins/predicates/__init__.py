"""predicates: which nodes can take a task, kube-scheduler's filters on all nodes at once
(layer 2).

One :class:`~scheduler.framework.extension_points.NodeFilter` answers for every row of the
session's :class:`~scheduler.framework.node_table.TableView` with numpy masks. Its checks,
in the order of the rejections it returns:

=====================================  ==========================================  ==========
check                                  reason (kube-scheduler's string)            resolvable
=====================================  ==========================================  ==========
``spec.unschedulable``                 node(s) were unschedulable                  no
node readiness                         node(s) were not ready                      no
nodeSelector, required node affinity   node(s) didn't match Pod's node             no
                                       affinity/selector
NoSchedule / NoExecute taints          node(s) had untolerated taint               no
free = idle - blocking nominations     Insufficient <name> / Too many pods         yes
host ports                             node(s) didn't have free ports for the      yes
                                       requested pod ports
required pod affinity                  node(s) didn't match pod affinity rules     no
required pod anti-affinity             node(s) didn't match pod anti-affinity      yes
                                       rules
existing pods' anti-affinity           node(s) didn't satisfy existing pods        yes
                                       anti-affinity rules
=====================================  ==========================================  ==========

Each check stands for one of kube-scheduler's filter plugins, which stop at the first
failure on a node, so a node is charged to one check only: the first that fails it, except
that a check that cannot be resolved by preemption goes before every check that can. The
node counts of ``Fit.explain()`` then add up as kube-scheduler's do, and
``Fit.candidates()`` excludes exactly the nodes with at least one unresolvable failure.
(The resource check reports every insufficient resource of a node, as NodeResourcesFit.)

Room is ``TableView.free``: idle less the nominations that block the task (its own and
those of lower priority do not, as in KEP-4832), plus the room of pods being evicted when
the filter is asked with ``releasing`` (a preemptor's view). The other checks do not
count the task itself where it is already held.

Costs. The four static checks depend only on the pod's ``spec.shape`` and on node labels,
taints and flags, which do not change within a session: they are computed once per shape
(per-node Python loops are allowed there) and reused. Host ports and pod (anti-)affinity
keep per-session indexes, updated by placement handlers, so a pod without ports or affinity
pays one dictionary lookup for them. The common pod costs one shape lookup and one
comparison of ``(rows x resources)`` integers, and gets an empty list back.

Modules: :mod:`.plugin` (the plugin and its filter), :mod:`.static` (checks per shape),
:mod:`.resource_fit` (the resource check), :mod:`.pod_index` (host ports and inter-pod
affinity, kept by the placement handlers), :mod:`.kube_reasons`.
"""

from __future__ import annotations

from scheduler.plugins.predicates.kube_reasons import (
    EXISTING_ANTI_AFFINITY,
    HOST_PORTS,
    NODE_AFFINITY,
    NOT_READY,
    POD_AFFINITY,
    POD_ANTI_AFFINITY,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_TAINT,
    UNTOLERATED_TAINT,
    insufficient,
)
from scheduler.plugins.predicates.plugin import PredicatesPlugin

__all__ = [
    "EXISTING_ANTI_AFFINITY",
    "HOST_PORTS",
    "NODE_AFFINITY",
    "NOT_READY",
    "POD_AFFINITY",
    "POD_ANTI_AFFINITY",
    "TOO_MANY_PODS",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_TAINT",
    "UNTOLERATED_TAINT",
    "PredicatesPlugin",
    "insufficient",
]
