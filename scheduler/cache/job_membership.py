"""Which job each pod's task joins, kept right as PodGroups come and go (layer 2).

A pod names a PodGroup by one of several APIs' references
(:func:`~scheduler.api.membership.pod_group_ref`); the job it joins may depend on which
PodGroups exist (:func:`~scheduler.api.membership.resolve_job_id`: Volcano's annotation
falls back to a Sluice PodGroup of that name; the members of a ``basic``
``scheduling.k8s.io`` PodGroup are scheduled alone). :class:`Membership` remembers each
pod's reference, indexed by the name it names, so that when a PodGroup of that name
appears, goes or changes policy, only those pods' tasks are resolved again
(:meth:`Membership.affected`). Owned by :class:`~scheduler.cache.SchedulerCache`; called
from its event handlers only. Nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.membership import (
    GroupIndex,
    GroupRef,
    lone_job_id,
    pod_group_ref,
    resolve_job_id,
)

__all__ = ["Membership"]


class Membership:
    """Pods' references to PodGroups, by task uid and by the ``(namespace, name)`` named."""

    def __init__(self) -> None:
        self._refs: dict[str, tuple[str, str, GroupRef]] = {}
        """uid -> (namespace, pod name, reference), for pods that name a group."""
        self._by_name: dict[tuple[str, str], set[str]] = {}
        self.grouped: set[str] = set()
        """Tasks whose job is a PodGroup's (they name one, and are not scheduled alone):
        a missing PodGroup is then a problem of their job."""

    def job_of(self, uid: str, pod: Mapping[str, Any], groups: GroupIndex) -> str:
        """Record ``pod``'s reference (as task ``uid``) and return the job it joins now.
        Called on every event of every pod: the usual case (the same reference as
        before) is a few dictionary lookups."""
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "default")), str(meta["name"])
        ref = pod_group_ref(pod)
        old = self._refs.get(uid)
        if old is not None and (ref is None or old[2].name != ref.name or old[0] != ns):
            self.forget(uid)
            old = None
        if ref is None:
            return lone_job_id(ns, name)
        self._refs[uid] = (ns, name, ref)
        if old is None:
            self._by_name.setdefault((ns, ref.name), set()).add(uid)
        return self._resolve(uid, groups)

    def _resolve(self, uid: str, groups: GroupIndex) -> str:
        ns, name, ref = self._refs[uid]
        job_id = resolve_job_id(ref, ns, name, groups)
        if job_id == lone_job_id(ns, name):
            self.grouped.discard(uid)  # a basic group's pod: scheduled alone
        else:
            self.grouped.add(uid)
        return job_id

    def forget(self, uid: str) -> None:
        """The pod is gone (or names another group now)."""
        old = self._refs.pop(uid, None)
        self.grouped.discard(uid)
        if old is None:
            return
        members = self._by_name.get((old[0], old[2].name))
        if members is not None:
            members.discard(uid)
            if not members:
                del self._by_name[(old[0], old[2].name)]

    def affected(self, namespace: str, name: str, groups: GroupIndex) -> dict[str, str]:
        """A PodGroup ``namespace/name`` (of any API) appeared, went or changed: the job
        each pod naming that name joins now, by task uid."""
        return {uid: self._resolve(uid, groups) for uid in self._by_name.get((namespace, name), ())}

    def members(self, job_id: str) -> list[str]:
        """The task uids of the pods that name the PodGroup of ``job_id`` (whatever job
        they joined), sorted."""
        out = []
        for uid in self._by_name.get(_ns_name(job_id), ()):
            ns, _, ref = self._refs[uid]
            if ref.api.job_id(ns, ref.name) == job_id:
                out.append(uid)
        return sorted(out)


def _ns_name(job_id: str) -> tuple[str, str]:
    ns, _, name = (
        job_id.partition(":")[2].partition("/") if ":" in job_id else job_id.partition("/")
    )
    return ns, name
