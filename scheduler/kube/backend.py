"""The scheduler's ports against a real API server (layer 4, kube).

:class:`KubeBackend` is to a Kubernetes API server what :class:`scheduler.sim.backend.
SimBackend` is to the embedded cluster: it implements ``Binder``, ``Evictor``,
``StatusWriter`` and ``EventRecorder`` of :mod:`scheduler.ports`, so the loop cannot tell
them apart. Contracts, besides those of the ports:

* Every call makes one attempt, through the :class:`~scheduler.kube.client.KubeClient`
  (rate limit, timeout), on raw JSON, and raises only ApiError subclasses. Callers own
  retries.
* ``bind``: when ``annotations`` are given, first a strategic-merge patch of the pod's
  metadata (a failure there skips the binding), then a POST of the ``binding``
  subresource, guarded by the pod's uid. 201/200 is success; 409 (already bound, or
  another pod of that name) raises ConflictError, 404 NotFoundError.
* ``evict``: mode ``delete`` deletes the pod with a uid precondition; mode ``evict`` posts
  a ``policy/v1`` Eviction (a PodDisruptionBudget refuses with TooManyRequestsError).
* ``patch_pod_status``: a strategic-merge patch of the ``status`` subresource, so
  conditions merge by type and the others stay. ``patch_status``: a JSON merge patch
  (``application/merge-patch+json``) of a custom object's ``status`` subresource. Both
  carry the object's uid when known, which the API server checks.
* ``read_pod`` (the :class:`~scheduler.ports.PodReader` port): a GET of the pod, to learn
  the outcome of a write that raised AmbiguousError (a 5xx, a timeout, a connection lost
  before the reply); every write above may raise it, and a 409 naming the pod's node is
  how a second bind of a pod bound already answers.
* ``record`` (:class:`~scheduler.kube.events.KubeEventRecorder`) is synchronous and never
  blocks nor raises: it queues; the writer (:meth:`KubeBackend.run`, which the owner of
  the backend runs in its task group) writes ``events.k8s.io/v1`` Events through a client
  of its own (:meth:`~scheduler.kube.client.KubeClient.sibling`), so events never wait
  for, nor delay, a bind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus

from scheduler.api.errors import AlreadyExistsError, ConflictError, NotFoundError
from scheduler.kube.claim_writer import KubeClaimWriter
from scheduler.kube.client import KubeClient
from scheduler.kube.events import EventSettings, KubeEventRecorder
from scheduler.kube.resource_paths import (
    GANG_RESOURCES,
    MERGE_PATCH,
    PODS,
    STRATEGIC_MERGE_PATCH,
    TOPOLOGIES,
    Resource,
)
from scheduler.kube.volume_writer import KubeVolumeWriter
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock, ClusterPorts, Event, EvictionMode, ObjectRef, PodState

__all__ = ["KubeBackend"]


#: Custom kinds whose status :meth:`KubeBackend.patch_status` writes, by kind key.
STATUS_RESOURCES: Final[Mapping[str, Resource]] = {r.key: r for r in (TOPOLOGIES, *GANG_RESOURCES)}


class KubeBackend:
    """Binder, Evictor, StatusWriter and EventRecorder over the API server.

    ``eviction_mode`` chooses how :meth:`evict` removes a pod (``delete`` or ``evict``).
    ``events`` is the recorder behind :meth:`record`; by default one with
    ``event_settings``, writing on a sibling of ``client`` (its own rate limit and
    connections) while :meth:`run` runs. ``on_event_drop(reason)`` counts the events
    the recorder drops. ``timeout`` overrides the client's default ``_request_timeout``
    for these calls. Used from one event loop.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        eviction_mode: EvictionMode = "delete",
        events: KubeEventRecorder | None = None,
        event_settings: EventSettings | None = None,
        on_event_drop: Callable[[str], None] | None = None,
        clock: Clock | None = None,
        timeout: float | None = None,
    ) -> None:
        if eviction_mode not in ("delete", "evict"):
            raise ValueError(f"eviction_mode must be 'delete' or 'evict', not {eviction_mode!r}")
        self.client = client
        self.eviction_mode: EvictionMode = eviction_mode
        self.clock: Clock = clock or SystemClock()
        self.events = events or KubeEventRecorder(
            client, settings=event_settings, clock=self.clock, on_drop=on_event_drop
        )
        self.timeout = timeout

    def ports(self) -> ClusterPorts:
        """The ports for the loop: this backend for each, and its clock."""
        return ClusterPorts(
            binder=self,
            evictor=self,
            status=self,
            events=self,
            clock=self.clock,
            reader=self,
            claims=KubeClaimWriter(self.client, timeout=self.timeout),
            volumes=KubeVolumeWriter(self.client, timeout=self.timeout),
        )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write recorded events until cancelled (see :meth:`KubeEventRecorder.run`)."""
        await self.events.run(task_status=task_status)

    async def flush_events(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the events due now to be written (a clean
        stop calls it before cancelling :meth:`run`)."""
        with anyio.move_on_after(timeout):
            await self.events.drained()

    # ----------------------------------------------------------------- Binder

    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        """Bind ``pod`` to ``node`` after writing ``annotations`` (if any) onto it.

        Not idempotent: ConflictError if the pod is already bound (or its uid changed),
        NotFoundError if it is gone. One attempt.
        """
        if annotations:
            meta: dict[str, Any] = {"annotations": dict(annotations)}
            if pod.uid:
                meta["uid"] = pod.uid
            await self.client.request(
                "PATCH",
                PODS.path(pod.namespace, pod.name),
                body={"metadata": meta},
                content_type=STRATEGIC_MERGE_PATCH,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
        binding_meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
        if pod.uid:
            binding_meta["uid"] = pod.uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": binding_meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.client.request(
                "POST",
                PODS.path(pod.namespace, pod.name, "binding"),
                body=body,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
        except AlreadyExistsError as exc:  # a 409 on a binding is always "already bound"
            raise ConflictError(str(exc), kind="Pod", name=pod.name) from exc

    # ----------------------------------------------------------------- Evictor

    async def evict(self, pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        """Delete (mode ``delete``) or evict (mode ``evict``) ``pod``, guarded by its uid.

        NotFoundError: already gone. TooManyRequestsError: a PodDisruptionBudget refused
        (mode ``evict``). ConflictError: the uid no longer matches (another pod).
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if pod.uid:
            options["preconditions"] = {"uid": pod.uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if self.eviction_mode == "delete":
            await self.client.request(
                "DELETE",
                PODS.path(pod.namespace, pod.name),
                body=options,
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
            return
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": options,
        }
        await self.client.request(
            "POST",
            PODS.path(pod.namespace, pod.name, "eviction"),
            body=eviction,
            timeout=self.timeout,
            kind="Pod",
            name=pod.name,
        )

    # ----------------------------------------------------------------- StatusWriter

    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        """Strategic-merge ``patch`` into the pod's status (conditions merge by type).

        ``patch`` is the status content; a mapping whose only key is ``status`` is taken
        as a whole-object patch instead. Idempotent.
        """
        status = patch["status"] if set(patch) == {"status"} else patch
        body: dict[str, Any] = {"status": dict(status)}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        await self.client.request(
            "PATCH",
            PODS.path(pod.namespace, pod.name, "status"),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
            timeout=self.timeout,
            kind="Pod",
            name=pod.name,
        )

    async def patch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], *, resource_version: str = ""
    ) -> str:
        """Merge-patch ``status`` into the status subresource of the custom object ``ref``
        (a PodGroup or Queue of any API, a Topology; ValueError for another kind), or
        into the object itself for a kind without one (Volcano's PodGroup, whose own
        scheduler writes it so); returns its new resourceVersion. ``resource_version``
        goes in the patch's metadata, where the API server takes it as a precondition
        (409 Conflict when the object is at another). Idempotent."""
        resource = STATUS_RESOURCES.get(ref.kind_key)
        if resource is None:
            raise ValueError(f"no status subresource known for kind {ref.kind_key!r}")
        body: dict[str, Any] = {"status": dict(status)}
        meta: dict[str, Any] = {}
        if ref.uid:
            meta["uid"] = ref.uid
        if resource_version:
            meta["resourceVersion"] = resource_version
        if meta:
            body["metadata"] = meta
        sub = "status" if resource.status_subresource else ""
        reply = await self.client.request(
            "PATCH",
            resource.path(ref.namespace or None, ref.name, sub),
            body=body,
            content_type=MERGE_PATCH,
            timeout=self.timeout,
            kind=ref.kind,
            name=ref.name,
        )
        return str((reply.get("metadata") or {}).get("resourceVersion") or "")

    # ----------------------------------------------------------------- PodReader

    async def read_pod(self, pod: ObjectRef) -> PodState | None:
        """GET ``pod``: where it is bound and whether it is being deleted; None when it is
        gone or another pod (another uid) has its name. One attempt."""
        try:
            obj = await self.client.request(
                "GET",
                PODS.path(pod.namespace, pod.name),
                timeout=self.timeout,
                kind="Pod",
                name=pod.name,
            )
        except NotFoundError:
            return None
        return pod_state(obj, pod.uid)

    # ----------------------------------------------------------------- EventRecorder

    def record(self, event: Event) -> None:
        """Queue ``event`` (see :meth:`KubeEventRecorder.record`). Never blocks or raises."""
        self.events.record(event)


def pod_state(obj: Mapping[str, Any], uid: str = "") -> PodState | None:
    """The :class:`PodState` of the pod object ``obj``; None if ``uid`` is given and is not
    its uid (the pod read is another pod of the same name)."""
    meta = obj.get("metadata") or {}
    if uid and meta.get("uid") and meta.get("uid") != uid:
        return None
    spec = obj.get("spec") or {}
    return PodState(str(spec.get("nodeName") or ""), bool(meta.get("deletionTimestamp")))
