"""What every API's module shares: a PodGroup object read into its parts, and a
converted value with what of it Sluice does not honour (layer 0).

What a converter cannot honour of an object is not lost silently: it comes back as
:attr:`Converted.notes`, one line each, which the cache tells once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scheduler.api import labels as L
from scheduler.api.core_objects import conditions_of, parse_time
from scheduler.api.group_apis import GroupApi
from scheduler.api.job import JobInfo

T_co = TypeVar("T_co", covariant=True)

__all__ = ["Converted", "GroupObject", "condition_message", "labelled_queue"]


@dataclass(frozen=True, slots=True)
class Converted(Generic[T_co]):
    """A converted object and what of it Sluice does not honour (one line each)."""

    value: T_co
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupObject:
    """A PodGroup object of ``api``, read: its parts, and ``where``, how messages name it
    (``PodGroup ns/name``, and `` (scheduling.volcano.sh/v1beta1)`` for another API's)."""

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
            api.where("PodGroup", f"{meta.get('namespace', 'default')}/{meta['name']}"),
        )

    @property
    def labelled_queue(self) -> str:
        """:func:`labelled_queue` of the object."""
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


def condition_message(status: Mapping[str, Any], kind: str, holds: str) -> str:
    """The message of ``status``'s condition ``kind`` while its status is ``holds``; ""
    when it has none."""
    for c in status.get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == holds:
            return str(c.get("message") or "")
    return ""


def labelled_queue(obj: Mapping[str, Any]) -> str:
    """The queue of a PodGroup of an API without queues: its label
    ``scheduling.sluice.dev/queue``, else ``default``."""
    meta = obj.get("metadata") or {}
    return str((meta.get("labels") or {}).get(L.QUEUE_LABEL) or L.DEFAULT_QUEUE)
