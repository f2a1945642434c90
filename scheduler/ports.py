"""Layer 0: the ports between the scheduler and a cluster backend.

The loop and the preemption executor talk to the cluster only through these Protocols.
``scheduler.kube`` implements them against a real API server, ``scheduler.sim`` against
the embedded cluster, so the loop cannot tell them apart.

Every method that touches the cluster is a coroutine and raises only
:class:`scheduler.api.errors.ApiError` subclasses (backends translate their library's
errors). Callers own retries: a port makes one attempt. A write that raises
:class:`~scheduler.api.errors.AmbiguousError` may have taken effect; its caller learns
the outcome from the events or by a read (:class:`PodReader`) before undoing anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.group_apis import SLUICE, GroupApi, api_of_job, kind_key
from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo
from scheduler.api.volumes.prebind import ClaimTarget
from scheduler.api.volumes.volume_patches import VolumeState


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Which object an effect or event is about."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = ""
    """``group/version`` of the kind; "" for a pod, a node, or Sluice's own kinds."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def kind_key(self) -> str:
        """Which kind it is, as both backends key kinds
        (:func:`~scheduler.api.group_apis.kind_key`)."""
        return kind_key(self.api_version, self.kind) if self.api_version else self.kind

    @staticmethod
    def of_pod(task: TaskInfo) -> ObjectRef:
        """The pod of ``task``, guarded by its uid."""
        return ObjectRef("Pod", task.namespace, task.name, task.uid)

    @staticmethod
    def of_pod_group(job: JobInfo) -> ObjectRef:
        """The PodGroup of ``job`` (a gang with a PodGroup), of whichever API."""
        api = api_of_job(job.uid)
        version = "" if api is SLUICE else api.api_version
        return ObjectRef(api.pod_group_kind, job.namespace, job.name, job.pod_group_uid, version)

    @staticmethod
    def of_queue(queue: QueueInfo, api: GroupApi = SLUICE) -> ObjectRef:
        """The Queue of ``queue``, of ``api``."""
        version = "" if api is SLUICE else api.api_version
        return ObjectRef(api.queue_kind, "", queue.name, queue.uid, version)


EvictionMode = Literal["delete", "evict"]
"""How an Evictor removes a victim: a DELETE of the pod guarded by its uid, or a POST to
its ``eviction`` subresource (the Eviction API, which honours PodDisruptionBudgets)."""


class Clock(Protocol):
    """Time as the scheduler sees it: virtual in simulations, real in a cluster."""

    def now(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...

    def wall(self) -> float:
        """Seconds since the Unix epoch, for timestamps written to objects."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of this clock's time."""
        ...


class Binder(Protocol):
    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        """Bind ``pod`` to ``node``; first write ``annotations`` onto the pod if any.

        Not idempotent: a pod that is already bound raises ConflictError. Called by the
        bind executor, one task per pod.
        """
        ...


class Evictor(Protocol):
    async def evict(self, pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        """Delete (or evict through the Eviction API) ``pod``, guarded by its uid.

        NotFoundError means the pod is already gone; callers treat it as success.
        TooManyRequestsError means a PodDisruptionBudget refused the eviction.
        """
        ...


class StatusWriter(Protocol):
    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        """Strategic-merge ``patch`` into the pod's status (conditions merge by type)."""
        ...

    async def patch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], *, resource_version: str = ""
    ) -> str:
        """Merge-patch ``status`` into a custom object's status subresource. With
        ``resource_version`` the write is refused (ConflictError) unless the object is at
        that version, as the API server does for a ``metadata.resourceVersion`` in a patch.
        Returns the object's resourceVersion after the write ("" if the reply had none)."""
        ...


@dataclass(frozen=True, slots=True)
class PodState:
    """A pod as one read of the API server shows it."""

    node_name: str
    """The node it is bound to; "" while unbound."""
    terminating: bool
    """Its deletion has begun (``metadata.deletionTimestamp`` is set)."""


class PodReader(Protocol):
    async def read_pod(self, pod: ObjectRef) -> PodState | None:
        """The pod as the API server has it now; None when it is gone, or when the pod of
        that name has another uid than ``pod.uid`` (a new pod). One attempt; a failure
        raises an ApiError (a ServerError when the server could not answer). Called to
        learn the outcome of an ambiguous write; reads change nothing."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimState:
    """A ResourceClaim as one read of the API server shows it."""

    uid: str
    allocated: bool
    reserved_for: frozenset[str]
    """The uids of the consumers in ``status.reservedFor``."""


class ClaimWriter(Protocol):
    """The DRA writes of kube-scheduler's PreBind, Unreserve and PostFilter, on
    ResourceClaims."""

    async def create_claim(self, binding: ClaimBinding) -> ClaimBinding:
        """Create the claim of a pod's extended resources (``binding.extended`` set, no
        name yet; :func:`~scheduler.api.dra.codec.extended_claim_object`) and return
        ``binding`` naming the claim created (its name and uid). Not idempotent: each call
        creates a claim. Called by the loop's bind before :meth:`reserve_claim`; one
        attempt."""
        ...

    async def reserve_claim(self, binding: ClaimBinding) -> None:
        """Write ``binding`` (:class:`~scheduler.api.dra.model.ClaimBinding`): the
        finalizer when asked (a patch of the claim), then, through ``resourceclaims/
        status``, the allocation when given and the pod in ``status.reservedFor``
        (strategic merge: entries merge by uid), guarded by the claim's uid. Idempotent:
        the API refuses to change an allocation (422) but accepts the same one again.
        Called by the loop's bind, before the binding; one attempt."""
        ...

    async def unreserve_claim(self, binding: ClaimBinding) -> None:
        """Remove ``binding``'s pod from the claim's ``status.reservedFor`` (its bind
        failed after the claim was written). Idempotent; NotFoundError if the claim is gone."""
        ...

    async def read_claim(self, namespace: str, name: str) -> ClaimState | None:
        """The claim as the API server has it now; None when it is gone. One attempt."""
        ...

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete a claim the scheduler made for a pod's extended resources (its bind
        failed, or an earlier attempt left it), as kube-scheduler does: first its
        ``resource.kubernetes.io/delete-protection`` finalizer is removed, then the claim,
        both guarded by ``uid``. NotFoundError if it is gone; one attempt at each write."""
        ...

    async def deallocate_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        """Clear ``status.allocation`` of a claim reserved for nobody, guarded by its uid
        and ``resource_version`` (ConflictError if it changed since: a pod may have been
        reserved meanwhile), as kube-scheduler's PostFilter does. One attempt."""
        ...


class VolumeWriter(Protocol):
    """The writes of kube-scheduler's VolumeBinding PreBind, on PVs and claims."""

    async def bind_volume(
        self, volume: str, claim: ClaimTarget, resource_version: str, *, by_controller: bool
    ) -> str:
        """Write ``claim`` into PV ``volume``'s ``spec.claimRef`` (and, ``by_controller``,
        the annotation ``pv.kubernetes.io/bound-by-controller: "yes"``), refused
        (ConflictError) unless the PV is at ``resource_version``. Returns the PV's
        resourceVersion after the write. One attempt."""
        ...

    async def select_node(self, claim: ClaimTarget, node: str, resource_version: str) -> str:
        """Annotate ``claim`` with ``volume.kubernetes.io/selected-node: <node>``, refused
        (ConflictError) unless it is at ``resource_version`` and has ``claim.uid``.
        Returns its resourceVersion after the write. One attempt."""
        ...

    async def read_volume(self, name: str) -> VolumeState | None:
        """PV ``name`` as the API server has it now; None when it is gone. One attempt."""
        ...

    async def read_volume_claim(self, namespace: str, name: str) -> VolumeState | None:
        """The claim as the API server has it now; None when it is gone. One attempt."""
        ...


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes event about ``regarding`` (events.k8s.io/v1 shape)."""

    regarding: ObjectRef
    type: str  # "Normal" | "Warning"
    reason: str
    message: str
    action: str = "Scheduling"
    related: ObjectRef | None = field(default=None)


class EventRecorder(Protocol):
    def record(self, event: Event) -> None:
        """Queue ``event`` for delivery. Never blocks and never raises: events are best effort."""
        ...


@dataclass(frozen=True, slots=True)
class ClusterPorts:
    """Everything a backend gives the loop: one object per running scheduler."""

    binder: Binder
    evictor: Evictor
    status: StatusWriter
    events: EventRecorder
    clock: Clock
    reader: PodReader | None = None
    """Reads pods to learn the outcome of ambiguous writes. Without one, outcomes are
    learnt from the events alone (see :mod:`scheduler.dispatch.outcomes`)."""
    claims: ClaimWriter | None = None
    """Writes DRA claims before binds. Without one, a pod whose claims must be written
    is not bound (its bind fails and is retried)."""
    volumes: VolumeWriter | None = None
    """Writes PVs and claims before binds. Without one, a pod whose volumes must be
    written is not bound (its bind fails and is retried)."""
