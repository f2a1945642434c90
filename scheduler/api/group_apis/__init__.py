"""The gang APIs Sluice reads: one row each, and the keys their objects are kept under
(layer 0).

Sluice's own ``scheduling.sluice.dev`` PodGroup and three other schedulers' APIs become
the same :class:`~scheduler.api.job.JobInfo` (and, for the APIs with queues,
:class:`~scheduler.api.queue.QueueInfo`): :data:`SLUICE`, :data:`VOLCANO`
(``scheduling.volcano.sh/v1beta1``), :data:`SCHEDULER_PLUGINS` (the coscheduling plugin of
kubernetes-sigs/scheduler-plugins, ``scheduling.x-k8s.io/v1alpha1``) and
:data:`KUBERNETES` (the alpha Workload API of Kubernetes v1.36, ``scheduling.k8s.io/
v1alpha2``).

This package is everything Sluice knows of them. A row here (:class:`GroupApi`) is what
the rest of the code may ask without the API's behaviour: where its kinds live, how its
job ids are prefixed, how a pod names one of its groups. One module per API implements
the protocol (:mod:`.protocol`: read, membership, status, queue) and
:mod:`.table` holds the four, which the cache and the status writer use. A fifth API is a
row, a module and a line of the table.

**Kind keys.** Four APIs have a kind named ``PodGroup`` and two a ``Queue``, so both
backends (the embedded cluster's store, the kube informers) and the cache keep objects
under a *kind key*: the kind alone for Sluice's and the built-in kinds, ``Kind.group``
(as the API server names a kind in its messages) for the kinds of the other APIs:
:func:`kind_key`.

**Job ids.** A Sluice PodGroup's job is ``namespace/name``; another API's is prefixed with
the API's name (``volcano:ml/train``), so PodGroups of the same name in two APIs are two
jobs: :meth:`GroupApi.job_id`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from scheduler.api import labels as L

__all__ = [
    "APIS",
    "KUBERNETES",
    "QUALIFIED_KINDS",
    "SCHEDULER_PLUGINS",
    "SLUICE",
    "VOLCANO",
    "GroupApi",
    "PodField",
    "api_named",
    "api_of_job",
    "kind_key",
    "split_job_id",
]


@dataclass(frozen=True, slots=True)
class PodField:
    """Where a pod names a group of one API: a label, an annotation, or a field of its
    ``spec`` (``key`` a dotted path there)."""

    place: Literal["label", "annotation", "spec"]
    key: str

    @property
    def path(self) -> str:
        """How messages name it: ``metadata.labels[KEY]``, ``spec.KEY``."""
        if self.place == "spec":
            return f"spec.{self.key}"
        return f"metadata.{self.place}s[{self.key}]"

    def lookup(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
        """The value a pod of ``labels`` and ``annotations`` has in this label or
        annotation (None when it has none: an empty value is a value)."""
        return (labels if self.place == "label" else annotations).get(self.key)

    def read(self, pod: Mapping[str, Any]) -> str:
        """The group name ``pod`` gives there; "" when none."""
        if self.place == "spec":
            value: Any = pod.get("spec") or {}
            for part in self.key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
        else:
            meta = pod.get("metadata") or {}
            value = (meta.get(f"{self.place}s") or {}).get(self.key)
        return str(value) if value else ""


@dataclass(frozen=True, slots=True)
class GroupApi:
    """One API of gangs: where its PodGroup (and Queue) kinds live, and how a pod names
    one of its groups.

    ``name`` prefixes its job ids (none for Sluice's own); ``title`` is how messages and
    the docs name it. ``queue_kind`` is empty when the API has no queues.
    ``member_field``: where a pod names its group; ``precedence``: of a pod naming groups
    of several APIs, the group of the lowest precedence is the one
    (:func:`~scheduler.api.membership.pod_group_ref`). ``falls_back_to``: the API whose
    group of the same name a pod joins when this API has no group of that name ("" for
    none). ``status_subresource``: its PodGroup's status is written through ``/status``
    (else with the object). ``root_queue``: the name of its Queue that is the root of the
    queue tree, not a queue of its own ("" when it has none); its children are top-level
    queues. ``builtin``: the API server serves its kinds itself (an APIService says
    whether), where the others are CRDs.

    A pod's own conventions in this API, each a label or annotation, the first a pod has
    being the API's word (:mod:`scheduler.api.membership` asks the APIs in :data:`APIS`
    order): ``role_fields`` name its role in its gang, ``queue_fields`` the queue of a pod
    without a group, ``preemptable_fields`` whether it may be a victim, which it may not
    when ``preemptable_if`` says False of the value.
    """

    name: str
    title: str
    group: str
    version: str
    member_field: PodField
    precedence: int
    pod_group_kind: str = "PodGroup"
    queue_kind: str = ""
    falls_back_to: str = ""
    status_subresource: bool = True
    root_queue: str = ""
    builtin: bool = False
    role_fields: tuple[PodField, ...] = ()
    queue_fields: tuple[PodField, ...] = ()
    preemptable_fields: tuple[PodField, ...] = ()
    preemptable_if: Callable[[str], bool] = bool
    prefix: str = field(init=False, compare=False)
    """What its job ids start with: "" for Sluice's, ``name:`` for another API's."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", "" if self.group == L.GROUP else f"{self.name}:")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def pod_group_key(self) -> str:
        """The kind key of its PodGroups (:func:`kind_key`)."""
        return kind_key(self.api_version, self.pod_group_kind)

    @property
    def queue_key(self) -> str:
        """The kind key of its Queues, "" when it has none."""
        return kind_key(self.api_version, self.queue_kind) if self.queue_kind else ""

    def job_id(self, namespace: str, name: str) -> str:
        """The id of the job of this API's PodGroup ``namespace/name``."""
        return f"{self.prefix}{namespace}/{name}"

    def where(self, kind: str, key: str) -> str:
        """How messages name its object of ``kind`` ``key`` (``ns/name`` or ``name``):
        ``PodGroup ns/name``, with `` (group/version)`` for another API's."""
        return f"{kind} {key}" if self.group == L.GROUP else f"{kind} {key} ({self.api_version})"


SLUICE: Final = GroupApi(
    "sluice",
    "Sluice",
    L.GROUP,
    L.VERSION,
    PodField("label", L.POD_GROUP_LABEL),
    precedence=0,
    queue_kind="Queue",
    role_fields=(PodField("label", L.TASK_ROLE_LABEL),),
    queue_fields=(PodField("label", L.QUEUE_LABEL),),
    preemptable_fields=(PodField("label", L.PREEMPTABLE_LABEL),),
    preemptable_if=lambda value: value.lower() != "false",
)
"""Sluice's own API: its label is its own, whoever writes it means Sluice."""
KUBERNETES: Final = GroupApi(
    "kubernetes",
    "Kubernetes",
    "scheduling.k8s.io",
    "v1alpha2",
    PodField("spec", "schedulingGroup.podGroupName"),
    precedence=1,
    builtin=True,
)
"""The platform's own field, validated by the API server."""
SCHEDULER_PLUGINS: Final = GroupApi(
    "scheduler-plugins",
    "scheduler-plugins",
    "scheduling.x-k8s.io",
    "v1alpha1",
    PodField("label", "scheduling.x-k8s.io/pod-group"),
    precedence=2,
)
VOLCANO: Final = GroupApi(
    "volcano",
    "Volcano",
    "scheduling.volcano.sh",
    "v1beta1",
    PodField("annotation", L.POD_GROUP_ANNOTATION),
    precedence=3,
    queue_kind="Queue",
    falls_back_to="sluice",
    status_subresource=False,
    root_queue="root",
    role_fields=(
        PodField("annotation", "volcano.sh/task-spec"),
        PodField("label", "volcano.sh/task-spec"),
    ),
    queue_fields=(PodField("annotation", "scheduling.volcano.sh/queue-name"),),
    preemptable_fields=(
        PodField("annotation", "volcano.sh/preemptable"),
        PodField("label", "volcano.sh/preemptable"),
    ),
    # as Volcano parses it (Go's ParseBool): anything but a true value, "" too, says no
    preemptable_if=lambda value: value.lower() in ("true", "1", "t"),
)
"""Its annotation is Kubernetes' old group-name annotation, which Sluice has read as its
own since its first release: a pod naming a group that Volcano has not and Sluice has
joins Sluice's."""

APIS: Final[tuple[GroupApi, ...]] = (SLUICE, VOLCANO, SCHEDULER_PLUGINS, KUBERNETES)
"""Every API of gangs, Sluice's first (of two Queues of one name, the first API's is
used)."""

QUALIFIED_KINDS: Final[frozenset[tuple[str, str]]] = frozenset(
    {(api.group, api.pod_group_kind) for api in APIS if api is not SLUICE}
    | {(api.group, api.queue_kind) for api in APIS if api is not SLUICE and api.queue_kind}
    | {(KUBERNETES.group, "Workload")}
)
"""(group, kind) of the kinds kept under ``Kind.group``: those of the APIs other than
Sluice's (and the Workload API's Workload, which ``sluice snapshot`` reads)."""


def kind_key(api_version: str, kind: str) -> str:
    """The key objects of ``kind`` in ``api_version`` are kept under: ``Kind.group`` for
    the kinds of other schedulers' APIs (:data:`QUALIFIED_KINDS`), the kind alone for any
    other (``PodGroup`` is Sluice's; ``PriorityClass`` of ``scheduling.k8s.io`` too)."""
    group = api_version.rpartition("/")[0]
    return f"{kind}.{group}" if (group, kind) in QUALIFIED_KINDS else kind


def api_named(name: str) -> GroupApi:
    """The API called ``name`` (KeyError if none)."""
    for api in APIS:
        if api.name == name:
            return api
    raise KeyError(name)


def api_of_job(job_id: str) -> GroupApi:
    """The API whose PodGroup a job id names (Sluice's for a lone pod's id too)."""
    prefix, sep, _ = job_id.partition(":")
    if sep:
        for api in APIS:
            if api.name == prefix:
                return api
    return SLUICE


def split_job_id(job_id: str) -> tuple[GroupApi, str, str]:
    """A job id as (its API, namespace, name)."""
    api = api_of_job(job_id)
    ns, _, name = job_id.removeprefix(api.prefix).partition("/")
    return api, ns, name
