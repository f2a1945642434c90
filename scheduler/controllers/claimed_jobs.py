"""Which of a JobSet's Jobs put their pods in a group of their own (layer 4, no kopf here).

A pod belongs to the group it names (:func:`~scheduler.api.membership.pod_group_ref`), and
the pod grouper only sees pods that name none. But the gang it makes for a JobSet is sized
before all the JobSet's pods exist, so it must know which of the JobSet's Jobs will give
their pods a group of their own, and not count those (issue 35 item 4: with them counted,
the driver of a JobSet whose workers joined the Job controller's PodGroup waited for ever
in a gang of 5 that only it would ever join). A Job's pods are in a group of their own when:

1. its pod template names a group (any API's reference, read by the same rule as a pod's);
   or
2. v1.36's Job controller made a ``scheduling.k8s.io/v1alpha2`` PodGroup for it (feature
   gate ``WorkloadWithJob``): a PodGroup in the namespace whose controller owner is the Job.
   The Job controller (``pkg/controller/job/job_scheduling_manager.go``) makes one, before
   any pod, for a Job that has never started, is Indexed, has ``parallelism`` > 1 equal to
   ``completions``, and whose pod template names no group (:func:`job_controller_may_group`),
   and names it in every pod it makes. Whether the gate is on cannot be read from the API,
   so for such a Job the answer waits (:class:`Undecided`, the grouper tries again later)
   until the PodGroup exists or the Job controller has started the Job without one
   (:func:`job_started`: a start time, pods counted, or a ``Suspended`` condition; the Job
   controller makes none for a Job once it has started). A cluster that does not serve
   ``scheduling.k8s.io/v1alpha2`` PodGroups has none to wait for.

Reads: the JobSet's Jobs (a list by the JobSet controller's label
``jobset.sigs.k8s.io/jobset-name``, kept to those it controls) and the namespace's
``scheduling.k8s.io`` PodGroups, both only when some Job may have a group of the Job
controller's; a list it may not read (403) counts as none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol
from urllib.parse import quote

from scheduler.api.membership import pod_group_ref
from scheduler.api.owners import controller_ref
from scheduler.controllers.api_client import ApiStatusError
from scheduler.controllers.gang_rules import ChildJob

__all__ = [
    "ClaimedJobs",
    "Undecided",
    "job_controller_may_group",
    "job_started",
    "template_group",
]

Obj = Mapping[str, Any]

JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
KUBERNETES_POD_GROUPS: Final = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
JOBS: Final = "/apis/batch/v1/namespaces/{ns}/jobs"


class Undecided(Exception):
    """Whether some Job's pods get a group of their own is not known yet (the message says
    which Job and what it waits for): the pod is grouped later."""


class ListApi(Protocol):
    async def get(self, path: str) -> dict[str, Any] | None: ...


def template_group(job_spec: Obj) -> str:
    """The group a Job's pod template names (``<API> PodGroup <name>``), or ""."""
    template = job_spec.get("template")
    ref = pod_group_ref(template) if isinstance(template, Mapping) else None
    return f"{ref.api.name} PodGroup {ref.name}" if ref is not None else ""


def job_controller_may_group(job_spec: Obj) -> bool:
    """Would v1.36's Job controller, with ``WorkloadWithJob``, make a PodGroup for a new
    Job of ``job_spec``? (Indexed, ``parallelism`` > 1 and equal to ``completions``, a pod
    template that names no group.)"""
    parallelism = job_spec.get("parallelism", 1)
    completions = job_spec.get("completions")
    return (
        job_spec.get("completionMode") == "Indexed"
        and isinstance(parallelism, int)
        and parallelism > 1
        and completions == parallelism
        and not template_group(job_spec)
    )


def job_started(job: Obj) -> bool:
    """Has the Job controller started ``job`` (or seen it suspended)? Then it has decided
    whether the Job has a PodGroup of its own, and never makes one after (its ``isNewJob``)."""
    status = job.get("status")
    if not isinstance(status, Mapping):
        return False
    if status.get("startTime") or any(status.get(k) for k in ("active", "succeeded", "failed")):
        return True
    conditions = status.get("conditions") or ()
    return any(isinstance(c, Mapping) and c.get("type") == "Suspended" for c in conditions)


def _items(listed: Obj | None) -> list[Obj]:
    items = (listed or {}).get("items") or ()
    return [i for i in items if isinstance(i, Mapping)]


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


class ClaimedJobs:
    """Answers :meth:`elsewhere` for the grouper. Stateless but for what it is given."""

    async def elsewhere(
        self, api: ListApi, owner: Obj, children: Sequence[ChildJob]
    ) -> dict[str, str]:
        """The Jobs of ``children`` (of JobSet ``owner``) whose pods join a group of their
        own, by name, with why. Raises :class:`Undecided` while a Job's answer waits for
        the Job controller (module docstring), and what the API raises but a 403."""
        out: dict[str, str] = {}
        pending: list[ChildJob] = []
        for child in children:
            named = template_group(child.spec)
            if named:
                out[child.name] = f"its pod template names {named}"
            elif job_controller_may_group(child.spec):
                pending.append(child)
        if not pending:
            return out
        meta = owner.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        groups = await self._list(api, KUBERNETES_POD_GROUPS.format(ns=quote(namespace, safe="")))
        if groups is None:
            return out  # no scheduling.k8s.io PodGroups served (or readable): none to join
        selector = quote(f"{JOBSET_NAME_LABEL}={meta.get('name', '')}", safe="")
        path = JOBS.format(ns=quote(namespace, safe="")) + f"?labelSelector={selector}"
        listed = await self._list(api, path)
        jobs = {
            _name(j): j
            for j in listed or ()
            if (ref := controller_ref(j)) is not None and ref.uid == _uid(owner)
        }
        made = _made_for_jobs(groups)
        for child in pending:
            job = jobs.get(child.name)
            group = made.get(child.name)
            if group is not None and (job is None or _uid(job) == group[1]):
                out[child.name] = (
                    f"its pods join PodGroup {namespace}/{group[0]} (scheduling.k8s.io), "
                    "made by the Job controller"
                )
            elif listed is None:
                continue  # the Jobs may not be read: counted, as nothing says otherwise
            elif job is None:
                raise Undecided(
                    f"Job {namespace}/{child.name} of JobSet {namespace}/{_name(owner)} does "
                    "not exist yet (it may get a PodGroup of its own from the Job controller)"
                )
            elif not job_started(job):
                raise Undecided(
                    f"Job {namespace}/{child.name} has not been started by the Job controller "
                    "yet (it may get a PodGroup of its own: WorkloadWithJob)"
                )
        return out

    @staticmethod
    async def _list(api: ListApi, path: str) -> list[Obj] | None:
        """The items at ``path``; None when it is not served (404) or may not be read."""
        try:
            listed = await api.get(path)
        except ApiStatusError as exc:
            if exc.status != 403:
                raise
            return None
        return None if listed is None else _items(listed)


def _made_for_jobs(groups: Iterable[Obj]) -> dict[str, tuple[str, str]]:
    """Job name -> (name, Job uid) of the PodGroup whose controller owner is that Job."""
    out: dict[str, tuple[str, str]] = {}
    for group in groups:
        ref = controller_ref(group)
        if ref is not None and ref.kind == "Job" and ref.group == "batch":
            out[ref.name] = (_name(group), ref.uid)
    return out
