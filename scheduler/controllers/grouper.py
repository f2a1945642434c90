"""The pod grouper of ``sluice controller``: gangs from owners (layer 4, no kopf here).

For every pod of Sluice that waits for it (:func:`scheduler.api.owners.grouper_wait`: made
by a controller, naming no group of any API, not opted out), :class:`PodGrouper`:

1. reads the pod's chain of controller owners up to the top (:class:`OwnerReader`: the
   resource of each owner's kind from API discovery, then the owner itself), stopping at
   an owner whose kind the cluster does not serve, that it may not read (403) or that is
   gone;
2. reads the default queue its Namespace names (the label ``scheduling.sluice.dev/queue``);
   for an owner whose gang counts its child Jobs (a JobSet), which of them put their pods
   in a group of their own (:class:`~scheduler.controllers.claimed_jobs.ClaimedJobs`: the
   gang never counts pods that belong elsewhere; while that is not known yet, the pod is
   tried again later);
3. asks :func:`~scheduler.controllers.gang_rules.plan` what gang the pod forms;
4. for a gang: creates its PodGroup (``scheduling.sluice.dev/v1alpha1``) owned by the
   owner the minimum comes from (the garbage collector deletes it with that owner), or
   brings the ``minMember`` of the one it made before up to date; then labels the pod
   ``scheduling.sluice.dev/pod-group: <name>``. The PodGroup exists before any pod names
   it, so the scheduler never sees a member of a group that does not exist yet;
5. for a pod left alone: annotates it ``scheduling.sluice.dev/gang-of-one: <why>`` (and
   labels its queue, when it has none and the queue is not ``default``), in one patch.

Either write ends the pod's wait in the scheduler. Pods are worked on by a few workers
from a :class:`~scheduler.controllers.workqueue.WorkQueue` (one worker per pod at a time,
the newest version of it); a pod whose work failed (the API server down, a 5xx, a
conflict) is tried again after a backoff, 0.5 s doubling to 60 s, for as long as it
waits; a 401 logs in again first. Owners and Namespaces read are kept a few seconds, so
that the pods of one Job cost one read of the Job, and API discovery ten minutes (30 s for
a kind not served, so that a CRD installed later is found).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import quote

import aiohttp

from scheduler.api import labels as L
from scheduler.api.owners import OwnerRef, controller_ref, grouper_wait
from scheduler.api.shards import POOL_LABEL
from scheduler.controllers.api_client import ApiStatusError
from scheduler.controllers.claimed_jobs import ClaimedJobs, Undecided
from scheduler.controllers.gang_rules import Alone, Gang, chosen_owner, counted_jobs, plan
from scheduler.controllers.workqueue import WorkQueue

__all__ = [
    "GrouperApi",
    "OwnerReader",
    "PodGrouper",
    "pod_group_body",
]

log = logging.getLogger("sluice.controller.grouper")

Obj = Mapping[str, Any]

#: How far up a chain of owners the grouper reads.
MAX_DEPTH: Final = 8
#: Seconds an owner or a Namespace read is kept.
OBJECT_TTL: Final = 5.0
#: Seconds API discovery of a served kind is kept, and of a kind not served.
DISCOVERY_TTL: Final = 600.0
MISSING_KIND_TTL: Final = 30.0
#: Seconds a PodGroup written is remembered as up to date (not read again for each pod).
MADE_TTL: Final = 60.0
#: Longest ``gang-of-one`` annotation written.
MAX_WHY: Final = 1000
WORKERS: Final = 4

POD_GROUPS: Final = f"/apis/{L.API_VERSION}/namespaces/{{ns}}/podgroups"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
CONTROLLER_NAME: Final = "sluice-controller"


class GrouperApi(Protocol):
    """The calls the grouper makes (:class:`~scheduler.controllers.api_client.ApiClient`)."""

    async def get(self, path: str) -> dict[str, Any] | None: ...

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None: ...

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None: ...


class Retry(Exception):
    """A pass over a pod that must be tried again later (what happened is the message)."""


def _q(part: str) -> str:
    return quote(part, safe="")


def object_path(group: str, version: str, plural: str, namespace: str, name: str) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    where = f"/namespaces/{_q(namespace)}" if namespace else ""
    return f"{base}{where}/{plural}/{_q(name)}"


@dataclass(frozen=True, slots=True)
class _Kind:
    plural: str
    namespaced: bool


class OwnerReader:
    """Reads owners and Namespaces for the grouper, with the caches of the module docstring.

    ``clock``: monotonic seconds (a seam for tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._kinds: dict[str, tuple[float, dict[str, _Kind] | None]] = {}
        self._objects: dict[str, tuple[float, dict[str, Any] | None]] = {}

    async def _kind(self, api: GrouperApi, ref: OwnerRef) -> _Kind | None:
        """The resource of ``ref``'s kind, or None when the cluster does not serve it."""
        now = self._clock()
        cached = self._kinds.get(ref.api_version)
        if (
            cached is None
            or cached[0] <= now
            or (cached[1] is not None and ref.kind not in cached[1])
        ):
            path = f"/apis/{ref.api_version}" if ref.group else f"/api/{ref.version}"
            try:
                listed = await api.get(path)
            except ApiStatusError as exc:
                if exc.status != 403:
                    raise
                listed = None
            kinds = None
            if listed is not None:
                kinds = {
                    str(r.get("kind")): _Kind(str(r["name"]), bool(r.get("namespaced")))
                    for r in listed.get("resources") or ()
                    if isinstance(r, Mapping) and "/" not in str(r.get("name", "/"))
                }
            ttl = DISCOVERY_TTL if kinds and ref.kind in kinds else MISSING_KIND_TTL
            cached = self._kinds[ref.api_version] = (now + ttl, kinds)
        kinds = cached[1]
        return kinds.get(ref.kind) if kinds is not None else None

    async def _get(
        self, api: GrouperApi, path: str, *, fresh: bool = False
    ) -> dict[str, Any] | None:
        now = self._clock()
        cached = self._objects.get(path)
        if cached is not None and cached[0] > now and not fresh:
            return cached[1]
        if len(self._objects) > 10_000:
            self._objects = {k: v for k, v in self._objects.items() if v[0] > now}
        found = await api.get(path)
        self._objects[path] = (now + OBJECT_TTL, found)
        return found

    async def chain(self, api: GrouperApi, pod: Obj) -> tuple[list[dict[str, Any]], str]:
        """The pod's controller owners as read, nearest first, and why the chain stops
        short of the top ("" when it does not). Raises what the API raises but a 403."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        out: list[dict[str, Any]] = []
        current: Obj = pod
        for _ in range(MAX_DEPTH):
            ref = controller_ref(current)
            if ref is None:
                return out, ""
            where = ref.describe(namespace)
            kind = await self._kind(api, ref)
            if kind is None:
                return out, f"{where}: the cluster serves no {ref.api_version} {ref.kind}"
            path = object_path(
                ref.group, ref.version, kind.plural, namespace if kind.namespaced else "", ref.name
            )
            try:
                owner = await self._get(api, path)
                if _uid_of(owner) != ref.uid:  # kept from before it was deleted and made again?
                    owner = await self._get(api, path, fresh=True)
            except ApiStatusError as exc:
                if exc.status != 403:
                    raise
                return out, f"{where}: sluice controller may not read it (403 Forbidden)"
            if owner is None or _uid_of(owner) != ref.uid:
                return out, f"{where}: not found (deleted, or another object of its name)"
            out.append(owner)
            current = owner
        return out, f"the chain of owners goes further than {MAX_DEPTH}"

    async def namespace_queue(self, api: GrouperApi, namespace: str) -> str:
        """The queue Namespace ``namespace`` names by its label, or ""."""
        try:
            ns = await self._get(api, f"/api/v1/namespaces/{_q(namespace)}")
        except ApiStatusError as exc:
            if exc.status != 403:
                raise
            return ""
        labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        value = labels.get(L.QUEUE_LABEL) if isinstance(labels, Mapping) else None
        return value if isinstance(value, str) else ""


def pod_group_body(namespace: str, gang: Gang, pool: str | None = None) -> dict[str, Any]:
    """The PodGroup made for ``gang``; ``pool``: the node pool its first pod names (label
    ``scheduling.sluice.dev/node-pool``), which the PodGroup then carries, so that the
    shard of that pool schedules the whole gang (:mod:`scheduler.api.shards`)."""
    labels = {MANAGED_BY: CONTROLLER_NAME}
    if pool is not None:
        labels[POOL_LABEL] = pool
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {L.MINIMUM_ANNOTATION: gang.minimum},
            "ownerReferences": [gang.owner.as_reference()],
        },
        "spec": {"minMember": gang.min_member, "queue": gang.queue},
    }


class PodGrouper:
    """Groups pods by their owners (module docstring).

    ``api()`` gives the client to call with (the controller's, for its current login);
    ``relogin()`` logs in again after a 401. ``scheduler_name``: the pods it groups.
    Called from the controller's kopf handlers (:meth:`offer`, :meth:`forget`) and run by
    its startup handler (:meth:`run`, until cancelled at cleanup).
    """

    def __init__(
        self,
        api: Callable[[], Awaitable[GrouperApi]],
        relogin: Callable[[], Awaitable[object]],
        *,
        scheduler_name: str = L.SCHEDULER_NAME,
        workers: int = WORKERS,
        queue: WorkQueue[str, dict[str, Any]] | None = None,
        reader: OwnerReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._relogin = relogin
        self.scheduler_name = scheduler_name
        self.workers = workers
        self.queue: WorkQueue[str, dict[str, Any]] = queue if queue is not None else WorkQueue()
        self.reader = reader if reader is not None else OwnerReader(clock)
        self.claimed = ClaimedJobs()
        self._clock = clock
        self._made: dict[tuple[str, str], tuple[float, tuple[object, ...]]] = {}
        """PodGroups written (namespace, name) -> (until when, what was written)."""

    # ----------------------------------------------------------------- what kopf calls

    def wants(self, pod: Obj) -> bool:
        """Does ``pod`` wait for the grouper (of this scheduler's pods)?"""
        spec = pod.get("spec")
        name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        return name == self.scheduler_name and bool(grouper_wait(pod))

    def offer(self, pod: Obj) -> None:
        """A pod's newest version (from a watch event): grouped in the background."""
        uid = _uid(pod)
        if self.wants(pod):
            self.queue.offer(uid, dict(pod))
        else:
            self.queue.forget(uid)  # grouped meanwhile, bound, deleted, ...

    def forget(self, pod: Obj) -> None:
        """The pod is gone."""
        self.queue.forget(_uid(pod))

    def holds(self, pod: Obj) -> bool:
        return self.queue.holds(_uid(pod))

    # ----------------------------------------------------------------- the workers

    async def run(self) -> None:
        """The workers, until cancelled. Never ends otherwise: every failure of a pass over
        a pod is logged and the pod retried later."""
        async with asyncio.TaskGroup() as group:
            for i in range(self.workers):
                group.create_task(self._worker(), name=f"sluice pod grouper {i}")

    async def _worker(self) -> None:
        while True:
            uid, pod = await self.queue.take()
            failed = True
            try:
                await self.group(pod)
                failed = False
            except (Retry, Undecided, ApiStatusError, aiohttp.ClientError, TimeoutError) as exc:
                self._log_retry(pod, uid, exc)
                if isinstance(exc, ApiStatusError) and exc.status == 401:
                    with contextlib.suppress(Exception):
                        await self._relogin()
            except Exception:
                log.exception(f"Grouping pod {_key(pod)} failed; trying again later.")
            finally:
                self.queue.done(uid, pod, failed=failed)

    def _log_retry(self, pod: Obj, uid: str, exc: Exception) -> None:
        count = self.queue.failures(uid) + 1
        level = logging.INFO if isinstance(exc, Undecided) else logging.WARNING  # expected
        log.log(level, f"Cannot group pod {_key(pod)} yet (attempt {count}): {exc!s:.300}")

    # ----------------------------------------------------------------- one pass

    async def group(self, pod: Obj) -> Gang | Alone | None:
        """Group ``pod`` (module docstring); None when it no longer waits. Idempotent.
        Raises Retry, Undecided, ApiStatusError or a network error when it must be tried
        again."""
        if not self.wants(pod):
            return None
        api = await self._api()
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        chain, cut = await self.reader.chain(api, pod)
        namespace_queue = await self.reader.namespace_queue(api, namespace)
        chosen = chosen_owner(chain)
        elsewhere: dict[str, str] = {}
        if chosen is not None and (children := counted_jobs(chosen)):
            elsewhere = await self.claimed.elsewhere(api, chosen, children)
        verdict = plan(pod, chain, cut, namespace_queue, elsewhere)
        path = object_path("", "v1", "pods", namespace, str(meta.get("name") or ""))
        if isinstance(verdict, Gang):
            pool = (meta.get("labels") or {}).get(POOL_LABEL)
            await self._ensure_pod_group(api, namespace, verdict, pool)
            patch: dict[str, Any] = {"metadata": {"labels": {L.POD_GROUP_LABEL: verdict.name}}}
            said = f"joins PodGroup {namespace}/{verdict.name} (minMember {verdict.min_member})"
        else:
            fields: dict[str, Any] = {
                "annotations": {L.GANG_OF_ONE_ANNOTATION: verdict.why[:MAX_WHY]}
            }
            labels = meta.get("labels") or {}
            if L.QUEUE_LABEL not in labels and verdict.queue != L.DEFAULT_QUEUE:
                fields["labels"] = {L.QUEUE_LABEL: verdict.queue}
            patch = {"metadata": fields}
            said = f"is a gang of one: {verdict.why}"
        if await api.patch(path, patch) is None:
            return None  # the pod is gone
        log.info(f"Pod {_key(pod)} {said}")
        return verdict

    async def _ensure_pod_group(
        self, api: GrouperApi, namespace: str, gang: Gang, pool: str | None = None
    ) -> None:
        """The PodGroup of ``gang`` exists, with its minimum, before any pod names it."""
        key = (namespace, gang.name)
        wanted: tuple[object, ...] = (gang.min_member, gang.minimum, gang.owner.uid)
        now = self._clock()
        made = self._made.get(key)
        if made is not None and made[0] > now and made[1] == wanted:
            return
        collection = POD_GROUPS.format(ns=_q(namespace))
        created = await api.create(collection, pod_group_body(namespace, gang, pool))
        if created is None:  # made before: by this controller for another pod, or by someone
            path = f"{collection}/{_q(gang.name)}"
            existing = await api.get(path)
            if existing is None:
                raise Retry(f"PodGroup {namespace}/{gang.name} was there and is gone")
            update = self._update_of(existing, gang)
            if update and await api.patch(path, update) is None:
                raise Retry(f"PodGroup {namespace}/{gang.name} was deleted while updated")
        if len(self._made) > 10_000:
            self._made = {k: v for k, v in self._made.items() if v[0] > now}
        self._made[key] = (now + MADE_TTL, wanted)

    @staticmethod
    def _update_of(existing: Obj, gang: Gang) -> dict[str, Any]:
        """The merge patch that brings a PodGroup this grouper made to ``gang``'s minimum
        (the queue is kept: it was chosen when the gang was made); {} when none is needed
        or the PodGroup is someone else's (its pods join it as it is)."""
        meta = existing.get("metadata") or {}
        owners = meta.get("ownerReferences") or ()
        if not any(isinstance(o, Mapping) and o.get("uid") == gang.owner.uid for o in owners):
            log.warning(
                f"PodGroup {meta.get('namespace')}/{gang.name} exists and is not owned by "
                f"{gang.owner.kind} {gang.owner.name}: its pods join it as it is"
            )
            return {}
        spec = existing.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if (
            spec.get("minMember") == gang.min_member
            and annotations.get(L.MINIMUM_ANNOTATION) == gang.minimum
        ):
            return {}
        return {
            "metadata": {"annotations": {L.MINIMUM_ANNOTATION: gang.minimum}},
            "spec": {"minMember": gang.min_member},
        }


def _uid_of(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


def _uid(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
