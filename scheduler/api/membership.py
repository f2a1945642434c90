"""Which gang a pod belongs to, its role, its queue: the one rule for every API (layer 0).

:func:`pod_group_ref` is THE rule for "which group does this pod name, of which API"
(the scheduler's cache and the pod grouper of ``sluice controller`` both ask it). A pod
names at most one group; when it carries several references, the first of this order
wins (the others are ignored):

1. the label ``scheduling.sluice.dev/pod-group``: a Sluice PodGroup (Sluice's own API:
   whoever writes it means Sluice);
2. ``spec.schedulingGroup.podGroupName``: a ``scheduling.k8s.io/v1alpha2`` PodGroup (the
   platform's own field, validated by the API server);
3. the label ``scheduling.x-k8s.io/pod-group``: a scheduler-plugins PodGroup;
4. the annotation ``scheduling.k8s.io/group-name``: a Volcano PodGroup, or, when no
   Volcano PodGroup of that name exists and a Sluice one does, the Sluice one (Sluice has
   read this annotation as its own since its first release).

:func:`resolve_job_id` then turns a reference into the job the pod's task joins, given
which PodGroups exist (:class:`GroupIndex`): the annotation's fallback above, and the
members of a ``basic`` ``scheduling.k8s.io`` PodGroup, which are scheduled alone (each a
gang of one, as a pod without a group). Pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from scheduler.api import labels as L
from scheduler.api.group_apis import APIS, SCHEDULER_PLUGINS, VOLCANO, GroupApi, PodField, api_named

__all__ = [
    "COSCHEDULING_POD_GROUP_LABEL",
    "VOLCANO_PREEMPTABLE",
    "VOLCANO_QUEUE_ANNOTATION",
    "VOLCANO_TASK_SPEC",
    "GroupIndex",
    "GroupRef",
    "lone_job_id",
    "pod_group_ref",
    "pod_preemptable",
    "pod_queue",
    "pod_role",
    "resolve_job_id",
]

COSCHEDULING_POD_GROUP_LABEL: Final = SCHEDULER_PLUGINS.member_field.key
"""scheduler-plugins' label naming a pod's PodGroup."""
VOLCANO_QUEUE_ANNOTATION: Final = VOLCANO.queue_fields[0].key
"""Volcano's annotation naming the queue of a pod without a PodGroup."""
VOLCANO_TASK_SPEC: Final = VOLCANO.role_fields[0].key
"""Volcano's annotation (and label) naming a pod's task within its job: its role."""
VOLCANO_PREEMPTABLE: Final = VOLCANO.preemptable_fields[0].key
"""Volcano's annotation (or label) saying whether a pod may be preempted."""


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A pod's reference to a PodGroup: of ``api``, named ``name`` in the pod's
    namespace, written in ``field`` of the pod (for messages)."""

    api: GroupApi
    name: str
    field: str


_BY_PRECEDENCE: Final = tuple(sorted(APIS, key=lambda api: api.precedence))


def pod_group_ref(pod: Mapping[str, Any]) -> GroupRef | None:
    """The PodGroup ``pod`` names (the first reference in the order of this module's
    docstring: each API's :attr:`~scheduler.api.group_apis.GroupApi.member_field`, by
    its precedence), or None when it names none. Reads only the pod."""
    for api in _BY_PRECEDENCE:
        name = api.member_field.read(pod)
        if name:
            return GroupRef(api, name, api.member_field.path)
    return None


class GroupIndex(Protocol):
    """Which PodGroups exist, by job id (the cache is one)."""

    def has_group(self, job_id: str, /) -> bool:
        """A PodGroup of that job id exists (whatever its policy)."""
        ...

    def is_basic(self, job_id: str, /) -> bool:
        """That PodGroup exists and its pods are scheduled alone (``basic`` policy)."""
        ...


def lone_job_id(namespace: str, pod_name: str) -> str:
    """The job of a pod scheduled alone: ``namespace/name`` of the pod."""
    return f"{namespace}/{pod_name}"


def resolve_job_id(
    ref: GroupRef | None, namespace: str, pod_name: str, groups: GroupIndex | None = None
) -> str:
    """The job a pod of ``namespace/pod_name`` naming ``ref`` joins. Without ``groups``
    (nothing known of which PodGroups exist), the job of the PodGroup it names."""
    if ref is None:
        return lone_job_id(namespace, pod_name)
    job_id = ref.api.job_id(namespace, ref.name)
    if groups is None:
        return job_id
    if ref.api.falls_back_to and not groups.has_group(job_id):
        other = api_named(ref.api.falls_back_to).job_id(namespace, ref.name)
        if groups.has_group(other):
            return other
    if groups.is_basic(job_id):
        return lone_job_id(namespace, pod_name)
    return job_id


def _first(
    fields: tuple[PodField, ...], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> str | None:
    for f in fields:
        value = f.lookup(labels, annotations)
        if value is not None:
            return str(value)
    return None


def pod_role(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """A pod's role in its gang: the first API (in :data:`APIS` order) whose role fields
    the pod has says it (Sluice's label ``scheduling.sluice.dev/task-role``, then
    Volcano's task, ``volcano.sh/task-spec``, annotation then label); else none."""
    for api in APIS:
        role = _first(api.role_fields, labels, annotations)
        if role is not None:
            return role
    return L.DEFAULT_ROLE


def pod_queue(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The queue of a pod scheduled alone: the first API's queue field the pod fills
    (Sluice's label ``scheduling.sluice.dev/queue``, then Volcano's annotation
    ``scheduling.volcano.sh/queue-name``), else ``default``."""
    for api in APIS:
        queue = _first(api.queue_fields, labels, annotations)
        if queue:
            return queue
    return L.DEFAULT_QUEUE


def pod_preemptable(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    """May the pod be a victim? Not if any API's preemptable field says no, as that API
    reads it (Sluice's label ``scheduling.sluice.dev/preemptable`` says ``false``;
    Volcano's ``volcano.sh/preemptable``, annotation else label, is not a true value)."""
    for api in APIS:
        value = _first(api.preemptable_fields, labels, annotations)
        if value is not None and not api.preemptable_if(value):
            return False
    return True
