"""The gang APIs Sluice reads, and the keys their objects are kept under (layer 0).

Sluice's own ``scheduling.sluice.dev`` PodGroup and three other schedulers' APIs become
the same :class:`~scheduler.api.job.JobInfo` (and, for Volcano's queues,
:class:`~scheduler.api.queue.QueueInfo`): :data:`SLUICE`, :data:`VOLCANO`
(``scheduling.volcano.sh/v1beta1``), :data:`SCHEDULER_PLUGINS` (the coscheduling plugin of
kubernetes-sigs/scheduler-plugins, ``scheduling.x-k8s.io/v1alpha1``) and
:data:`KUBERNETES` (the alpha Workload API of Kubernetes v1.36, ``scheduling.k8s.io/
v1alpha2``). Each is a row of data here; the converters live in :mod:`scheduler.api.foreign`.

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

from dataclasses import dataclass, field
from typing import Final

from scheduler.api import labels as L

__all__ = [
    "APIS",
    "FOREIGN_KINDS",
    "KUBERNETES",
    "SCHEDULER_PLUGINS",
    "SLUICE",
    "VOLCANO",
    "GroupApi",
    "api_of_job",
    "kind_key",
]


@dataclass(frozen=True, slots=True)
class GroupApi:
    """One API of gangs: where its PodGroup (and Queue) kinds live.

    ``name`` prefixes its job ids (none for Sluice's own); ``title`` is how messages and
    the docs name it. ``queue_kind`` is empty when the API has no queues.
    """

    name: str
    title: str
    group: str
    version: str
    pod_group_kind: str = "PodGroup"
    queue_kind: str = ""
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


SLUICE: Final = GroupApi("sluice", "Sluice", L.GROUP, L.VERSION, queue_kind="Queue")
VOLCANO: Final = GroupApi(
    "volcano", "Volcano", "scheduling.volcano.sh", "v1beta1", queue_kind="Queue"
)
SCHEDULER_PLUGINS: Final = GroupApi(
    "scheduler-plugins", "scheduler-plugins", "scheduling.x-k8s.io", "v1alpha1"
)
KUBERNETES: Final = GroupApi("kubernetes", "Kubernetes", "scheduling.k8s.io", "v1alpha2")

APIS: Final[tuple[GroupApi, ...]] = (SLUICE, VOLCANO, SCHEDULER_PLUGINS, KUBERNETES)
"""Every API of gangs, Sluice's first."""

FOREIGN_KINDS: Final[frozenset[tuple[str, str]]] = frozenset(
    {(VOLCANO.group, "PodGroup"), (VOLCANO.group, "Queue")}
    | {(SCHEDULER_PLUGINS.group, "PodGroup")}
    | {(KUBERNETES.group, "PodGroup"), (KUBERNETES.group, "Workload")}
)
"""(group, kind) of the kinds kept under ``Kind.group``: those of the other APIs."""


def kind_key(api_version: str, kind: str) -> str:
    """The key objects of ``kind`` in ``api_version`` are kept under: ``Kind.group`` for
    the kinds of other schedulers' APIs (:data:`FOREIGN_KINDS`), the kind alone for any
    other (``PodGroup`` is Sluice's; ``PriorityClass`` of ``scheduling.k8s.io`` too)."""
    group = api_version.rpartition("/")[0]
    return f"{kind}.{group}" if (group, kind) in FOREIGN_KINDS else kind


def api_of_job(job_id: str) -> GroupApi:
    """The API whose PodGroup a job id names (Sluice's for a lone pod's id too)."""
    prefix, sep, _ = job_id.partition(":")
    if sep:
        for api in APIS:
            if api.name == prefix:
                return api
    return SLUICE
