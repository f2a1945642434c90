"""Other schedulers' APIs converted at the edge (layer 0).

One module per API, each with the same two jobs: objects in (a PodGroup, a Queue) as the
domain model's :class:`~scheduler.api.job.JobInfo` and
:class:`~scheduler.api.queue.QueueInfo`, and status out, in the shape that API's own
scheduler writes (because other controllers wait on it). No second gang logic: once
converted, a gang is a gang. Pure functions of their arguments; each raises
:class:`~scheduler.api.errors.InvalidInputError` naming the object and the field.

* :mod:`.volcano`: ``scheduling.volcano.sh/v1beta1`` PodGroup and Queue;
* :mod:`.coscheduling`: scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroup;
* :mod:`.kubernetes`: ``scheduling.k8s.io/v1alpha2`` PodGroup (Kubernetes v1.36).

What a converter cannot honour of an object is not lost silently: it comes back as
:attr:`Converted.notes`, one line each, which the cache tells once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scheduler.api import labels as L
from scheduler.api.convert import conditions_of, parse_time, ref
from scheduler.api.group_apis import GroupApi
from scheduler.api.job import JobInfo

T_co = TypeVar("T_co", covariant=True)

__all__ = ["Converted", "GroupObject"]


@dataclass(frozen=True, slots=True)
class Converted(Generic[T_co]):
    """A converted object and what of it Sluice does not honour (one line each)."""

    value: T_co
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupObject:
    """A PodGroup object of ``api``, read: its parts, and ``where``, how messages name it
    (``PodGroup ns/name (scheduling.volcano.sh/v1beta1)``)."""

    api: GroupApi
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    namespace: str
    name: str
    where: str

    @staticmethod
    def read(pg: Mapping[str, Any], api: GroupApi) -> GroupObject:
        meta = pg.get("metadata") or {}
        return GroupObject(
            api,
            meta,
            pg.get("spec") or {},
            pg.get("status") or {},
            str(meta.get("namespace", "default")),
            str(meta["name"]),
            ref({"kind": "PodGroup", "metadata": meta}) + f" ({api.api_version})",
        )

    @property
    def labelled_queue(self) -> str:
        """The queue of an API without queues: the label ``scheduling.sluice.dev/queue``,
        else ``default``."""
        return str((self.meta.get("labels") or {}).get(L.QUEUE_LABEL) or L.DEFAULT_QUEUE)

    def job(self, **fields: Any) -> JobInfo:
        """Its gang: the fields every API's have (job id, namespace, name, creation,
        uid, conditions) and ``fields``."""
        return JobInfo(
            uid=self.api.job_id(self.namespace, self.name),
            namespace=self.namespace,
            name=self.name,
            creation=parse_time(self.meta.get("creationTimestamp")),
            has_pod_group=True,
            pod_group_uid=str(self.meta.get("uid") or ""),
            conditions=conditions_of(self.status),
            **fields,
        )
