"""Which placed pods could let a pending pod pass its placement filters (layer 1).

A pod whose required pod affinity found no pod to go near, or whose hard topology spread
constraint found every domain too full, may fit as soon as some other pod is placed: one
its affinity term selects, or one its spread selector counts (the emptier domains fill,
the global minimum rises). One whose required anti-affinity found a pod everywhere may fit
when such a pod is relabelled out of the term's selector. kube-scheduler requeues it on
such a pod's add or update (InterPodAffinity's and PodTopologySpread's queueing hints);
the parking of the scheduling queue (:mod:`scheduler.loop.queue.parking`) lets its job go
on the same news. Room freed (a pod deleted, a node added) is news for every parked job
already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from scheduler.api.label_selectors import LabelSelector
from scheduler.api.task import TaskInfo
from scheduler.framework.affinity_terms import NamespaceLabels, scope_of
from scheduler.framework.pod_counts import Scope


class PlacedPod(NamedTuple):
    """A pod given a node, or relabelled on one."""

    namespace: str
    labels: Mapping[str, str]
    before: Mapping[str, str] | None = None
    """Relabelled: its labels before (None: newly placed)."""


Wanted = tuple[tuple[LabelSelector, Scope], ...]


@dataclass(frozen=True, slots=True)
class AwaitedPods:
    """What some pending pods wait for: a pod placed (or relabelled into) a selector of
    ``placed`` in its scope, or one relabelled out of a selector of ``unlabelled``."""

    placed: Wanted
    unlabelled: Wanted

    def any_among(self, pods: Iterable[PlacedPod]) -> bool:
        """Is one of ``pods`` a pod waited for?"""
        for pod in pods:
            for selector, scope in self.placed:
                if (scope is None or pod.namespace in scope) and selector.matches(pod.labels):
                    return True
            if pod.before is None:
                continue
            for selector, scope in self.unlabelled:
                if (
                    (scope is None or pod.namespace in scope)
                    and selector.matches(pod.before)
                    and not selector.matches(pod.labels)
                ):
                    return True
        return False


def awaited_pods(tasks: Iterable[TaskInfo], namespaces: NamespaceLabels) -> AwaitedPods | None:
    """The pods whose placement could let one of ``tasks`` (pending pods) pass its
    required pod (anti-)affinity or hard spread constraints; None: none has such a
    constraint. Namespace selectors are read against ``namespaces`` as they are now (a
    namespace's labels changing is news of its own)."""
    placed: dict[tuple[LabelSelector, Scope], None] = {}
    unlabelled: dict[tuple[LabelSelector, Scope], None] = {}
    for task in tasks:
        spec = task.spec
        for term in spec.pod_affinity:
            placed[term.selector, scope_of(term, task.namespace, namespaces)] = None
        for term in spec.pod_anti_affinity:
            unlabelled[term.selector, scope_of(term, task.namespace, namespaces)] = None
        for constraint in spec.spread:
            if constraint.hard:
                own = frozenset((task.namespace,))
                placed[constraint.selector_for(task.labels or {}), own] = None
    if not placed and not unlabelled:
        return None
    return AwaitedPods(tuple(placed), tuple(unlabelled))
