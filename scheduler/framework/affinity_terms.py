"""Which pods an inter-pod affinity term selects, as kube-scheduler reads it (layer 1).

A term selects pods by label (its ``labelSelector``; null selects none) in some
namespaces: those it lists and those whose labels its ``namespaceSelector`` matches; with
neither, its own pod's namespace; with an empty ``namespaceSelector``, every namespace.
Shared by the required filter (predicates) and the preferred score (interpodaffinity).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.pod import PodAffinityTerm
from scheduler.api.task import TaskInfo
from scheduler.framework.pod_counts import Scope

NamespaceLabels = Mapping[str, Mapping[str, str]]
"""Labels of each namespace, by name (a namespace not listed has none)."""


def scope_of(term: PodAffinityTerm, owner_namespace: str, namespaces: NamespaceLabels) -> Scope:
    """The namespaces ``term`` (of a pod in ``owner_namespace``) selects pods in; None: all.
    A namespace selector is read against ``namespaces`` as they are now."""
    selector = term.namespace_selector
    if selector is None:
        return frozenset(term.namespaces) if term.namespaces else frozenset((owner_namespace,))
    if not selector.requirements and not selector.match_nothing:
        return None
    picked = {name for name, labels in namespaces.items() if selector.matches(labels)}
    return frozenset(picked.union(term.namespaces))


def selects(
    term: PodAffinityTerm, owner_namespace: str, pod: TaskInfo, namespaces: NamespaceLabels
) -> bool:
    """Does ``term``, of a pod in ``owner_namespace``, select ``pod``?"""
    if not term.selector.matches(pod.labels or {}):
        return False
    if term.namespace_selector is None:
        listed = term.namespaces or (owner_namespace,)
        return pod.namespace in listed
    if pod.namespace in term.namespaces:
        return True
    return term.namespace_selector.matches(namespaces.get(pod.namespace, {}))
