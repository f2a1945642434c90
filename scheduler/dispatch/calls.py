"""The typed API calls of the dispatcher (layer 2): one small class per kind of write.

Each call names its object (``key``: one line per object, :mod:`scheduler.dispatch.line`),
says how it combines with an earlier call of the same object (:meth:`ApiCall.combine`:
by default, a call of the same type merges or replaces, and of two types the more
relevant one wins, as kube-scheduler's API dispatcher does), and makes its write in
:meth:`ApiCall.execute` under the one policy for lost replies: a write that raised
:class:`~scheduler.api.errors.AmbiguousError` is not a failure until its outcome is known
(:class:`~scheduler.dispatch.outcomes.OutcomeResolver`: read back, or written again when
idempotent); ``execute`` returns when it took effect and raises the ApiError otherwise.

Adding a kind of write is one class here: its key, its relevance and rule, and its
``execute`` (the volume writes of VolumeBinding's PreBind are :class:`BindVolume` and
:class:`SelectNode`).
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import (
    AmbiguousError,
    ApiError,
    ConflictError,
    InvariantError,
    assigned_node,
)
from scheduler.api.volumes.prebind import ClaimTarget, StaticBinding
from scheduler.api.volumes.volume_patches import VolumeState
from scheduler.dispatch.line import Combine
from scheduler.dispatch.outcomes import Outcome, OutcomeResolver
from scheduler.ports import ClaimWriter, ClusterPorts, ObjectRef, VolumeWriter

VERSIONS_KEPT = 10_000
"""How many objects' last written resourceVersions :class:`CallContext` remembers."""


@dataclass(slots=True)
class CallContext:
    """What a call executes with: the ports, the resolver of lost replies, and what the
    dispatcher remembers of the status it wrote."""

    ports: ClusterPorts
    outcomes: OutcomeResolver
    superseded: Callable[[], bool]
    """Whether a newer call of the same object waits (an idempotent write being written
    again stops: the newer one carries its content)."""
    versions: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)
    """Per object key, the resourceVersion the last status write was made against, and
    the one its reply gave (:class:`ObjectStatusPatch`)."""


class ApiCall(abc.ABC):
    """One write to the API server, made through the dispatcher."""

    relevance: ClassVar[int] = 0
    """Of two calls of different types for one object, the more relevant one makes the
    other needless (a binding makes a pending status patch of the pod needless)."""

    @property
    @abc.abstractmethod
    def key(self) -> str:
        """The object written (kind, namespace, name): calls of one key run in order."""

    @abc.abstractmethod
    async def execute(self, ctx: CallContext) -> Any:
        """Make the write (learning the outcome of a lost reply); raise the ApiError of a
        write that did not take effect (or whose outcome is unknown)."""

    def combine(self, older: ApiCall, *, running: bool) -> Combine:
        """How this call combines with ``older``, of the same object, queued before it (or
        ``running``: already being sent). By default: the less relevant of two types is
        skipped (or, when older and not running yet, replaced); two calls of one type
        merge (:meth:`merge`); otherwise the newer queues behind."""
        if type(older) is type(self):
            self.merge(older)
            return Combine.MERGE
        if self.relevance < older.relevance:
            return Combine.SKIP
        if self.relevance > older.relevance and not running:
            return Combine.REPLACE
        return Combine.QUEUE

    def merge(self, older: ApiCall) -> None:  # noqa: B027 (a default, not abstract)
        """Take in what ``older`` (same type, same object) writes that this call does not
        write over. By default nothing: the newer write is whole."""


def _pod_key(pod: ObjectRef) -> str:
    return f"Pod/{pod.namespace}/{pod.name}"


def merge_pod_status(older: Mapping[str, Any], newer: Mapping[str, Any]) -> dict[str, Any]:
    """One strategic-merge status patch for both: conditions merged by type (the newer
    one of each type wins), every other field the newer's when it has one."""
    out: dict[str, Any] = {**older, **newer}
    if "conditions" in older and "conditions" in newer:
        by_type = {c.get("type"): c for c in older["conditions"]}
        by_type.update({c.get("type"): c for c in newer["conditions"]})
        out["conditions"] = list(by_type.values())
    return out


@dataclass(eq=False)
class PodStatusPatch(ApiCall):
    """A strategic-merge patch of a pod's status (conditions, ``nominatedNodeName``,
    ``extendedResourceClaimStatus``). Idempotent: a lost reply is written again until
    known, unless a newer patch of the pod waits, which carries this one's content."""

    pod: ObjectRef
    patch: Mapping[str, Any]
    relevance: ClassVar[int] = 1

    @property
    def key(self) -> str:
        return _pod_key(self.pod)

    def merge(self, older: ApiCall) -> None:
        assert isinstance(older, PodStatusPatch)
        self.patch = merge_pod_status(older.patch, self.patch)

    async def execute(self, ctx: CallContext) -> bool:
        """True when the patch took effect; False when superseded while its lost reply
        was being resolved."""
        patch = dict(self.patch)

        async def write() -> None:
            await ctx.ports.status.patch_pod_status(self.pod, patch)

        try:
            await write()
        except AmbiguousError as exc:
            return await ctx.outcomes.patch(self.pod, exc, write, superseded=ctx.superseded)
        return True


@dataclass(eq=False)
class BindPod(ApiCall):
    """The binding of a pod to a node (after writing ``annotations`` onto it). A lost
    reply is read back: the events (``shown()``) or a read showing the pod on the node
    mean it took effect. Not idempotent: a second binding is a 409, which names the node
    the pod is on.

    :meth:`execute` returns the node the pod is bound to: ``node``, or another one the
    API server names (a 409, or a lost reply's read, showing the pod bound there
    already: another replica's bind); raises when it is bound nowhere known."""

    pod: ObjectRef
    node: str
    annotations: Mapping[str, str]
    shown: Callable[[], bool]
    relevance: ClassVar[int] = 2

    @property
    def key(self) -> str:
        return _pod_key(self.pod)

    def combine(self, older: ApiCall, *, running: bool) -> Combine:
        if type(older) is BindPod:
            return Combine.QUEUE  # never merged: the second is refused by the server
        return super().combine(older, running=running)

    async def execute(self, ctx: CallContext) -> str:
        try:
            await ctx.ports.binder.bind(self.pod, self.node, self.annotations)
        except AmbiguousError as exc:
            outcome, where = await ctx.outcomes.bind(self.pod, self.node, exc, shown=self.shown)
            if outcome is Outcome.TOOK_EFFECT:
                return self.node
            if where:
                return where
            raise
        except ConflictError as exc:
            where = assigned_node(exc)
            if where:
                return where  # this node (an earlier attempt's reply was lost) or another
            raise
        return self.node


@dataclass(eq=False)
class EvictPod(ApiCall):
    """The deletion (or eviction) of a pod, guarded by its uid. A lost reply is read
    back: the events (``shown()``) or a read showing it gone or terminating mean it took
    effect. NotFoundError (already gone) is raised for the caller to count as done."""

    pod: ObjectRef
    shown: Callable[[], bool]
    relevance: ClassVar[int] = 3

    @property
    def key(self) -> str:
        return _pod_key(self.pod)

    async def execute(self, ctx: CallContext) -> None:
        try:
            await ctx.ports.evictor.evict(self.pod)
        except AmbiguousError as exc:
            outcome = await ctx.outcomes.eviction(self.pod, exc, shown=self.shown)
            if outcome is not Outcome.TOOK_EFFECT:
                raise


@dataclass(eq=False)
class ObjectStatusPatch(ApiCall):
    """A merge patch of a custom object's status (a PodGroup's or a Queue's, of any API),
    made against the resourceVersion the writer's view had (``resource_version``): the
    API server refuses it (409) if the object changed since, so a write computed from an
    older view, or sent before a newer one and arriving after it (its client gave up on
    it; another replica's), never lands over a newer status. When the dispatcher's own
    last write of the object is newer than that view (its event not seen yet), it is
    made against the version that write's reply gave. A conflict or a lost reply is not
    retried: the writer learns it failed, and its next cycle compares again what it
    wants with what the events show."""

    ref: ObjectRef
    status: Mapping[str, Any]
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.ref.kind_key}/{self.ref.namespace}/{self.ref.name}"

    async def execute(self, ctx: CallContext) -> str:
        versions = ctx.versions
        version = self.resource_version
        known = versions.get(self.key)
        if known is not None and version in known:
            version = known[1]  # our own last write: its reply is the newer version
        try:
            new = await ctx.ports.status.patch_status(
                self.ref, self.status, resource_version=version
            )
        except ApiError:
            versions.pop(self.key, None)  # landed or not, someone may have written since
            raise
        if new:
            versions[self.key] = (version, new)
            versions.move_to_end(self.key)
            while len(versions) > VERSIONS_KEPT:
                versions.popitem(last=False)
        else:
            versions.pop(self.key, None)
        return new


def _claims(ctx: CallContext) -> ClaimWriter:
    claims = ctx.ports.claims
    if claims is None:
        raise InvariantError("no ClaimWriter: cannot write DRA claims")
    return claims


def _claim_key(namespace: str, name: str) -> str:
    return f"ResourceClaim/{namespace}/{name}"


class ClaimCall(ApiCall):
    """A write of one ResourceClaim. Writes of one claim for several pods never replace
    one another: they queue. A second call of a type that a waiting or running one of
    the same type makes needless (:attr:`once`) is skipped."""

    once: ClassVar[bool] = False

    def combine(self, older: ApiCall, *, running: bool) -> Combine:
        if self.once and type(older) is type(self):
            return Combine.SKIP
        return Combine.QUEUE


@dataclass(eq=False)
class CreateClaim(ClaimCall):
    """Create the claim of a pod's extended resources (kube-scheduler's PreBind); returns
    the binding naming the claim made. Not idempotent; a lost reply fails (a claim it
    made is found and deleted by a later cycle)."""

    binding: ClaimBinding

    @property
    def key(self) -> str:
        return _claim_key(self.binding.namespace, f"extended-for-{self.binding.pod_uid}")

    async def execute(self, ctx: CallContext) -> ClaimBinding:
        return await _claims(ctx).create_claim(self.binding)


@dataclass(eq=False)
class ReserveClaim(ClaimCall):
    """Write a claim's allocation and the pod's reservation (PreBind). A lost reply is
    read back: the claim allocated and reserved for the pod means it took effect."""

    binding: ClaimBinding

    @property
    def key(self) -> str:
        return _claim_key(self.binding.namespace, self.binding.name)

    async def execute(self, ctx: CallContext) -> None:
        claims = _claims(ctx)
        try:
            await claims.reserve_claim(self.binding)
        except AmbiguousError as exc:
            outcome = await ctx.outcomes.claim(self.binding, exc, read=claims.read_claim)
            if outcome is not Outcome.TOOK_EFFECT:
                raise


@dataclass(eq=False)
class UnreserveClaim(ClaimCall):
    """Remove a pod from a claim's ``reservedFor`` (its bind failed after the claim was
    written: kube-scheduler's Unreserve)."""

    binding: ClaimBinding

    @property
    def key(self) -> str:
        return _claim_key(self.binding.namespace, self.binding.name)

    async def execute(self, ctx: CallContext) -> None:
        await _claims(ctx).unreserve_claim(self.binding)


@dataclass(eq=False)
class DeleteClaim(ClaimCall):
    """Delete a claim made for a pod's extended resources (finalizer first)."""

    namespace: str
    name: str
    uid: str
    once: ClassVar[bool] = True

    @property
    def key(self) -> str:
        return _claim_key(self.namespace, self.name)

    async def execute(self, ctx: CallContext) -> None:
        await _claims(ctx).delete_claim(self.namespace, self.name, self.uid)


@dataclass(eq=False)
class DeallocateClaim(ClaimCall):
    """Clear the allocation of a claim reserved for nobody, guarded by its
    resourceVersion (kube-scheduler's PostFilter for DRA)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    once: ClassVar[bool] = True

    @property
    def key(self) -> str:
        return _claim_key(self.namespace, self.name)

    async def execute(self, ctx: CallContext) -> None:
        await _claims(ctx).deallocate_claim(
            self.namespace, self.name, self.uid, self.resource_version
        )


def _volumes(ctx: CallContext) -> VolumeWriter:
    volumes = ctx.ports.volumes
    if volumes is None:
        raise InvariantError("no VolumeWriter: cannot write PersistentVolumes or claims")
    return volumes


class VolumeCall(ApiCall):
    """A write of one PV or claim for a pod's volumes, guarded by the resourceVersion the
    scheduler's view had: never merged with another write of the object (it queues
    behind; the binding cycle makes each distinct write once, :mod:`scheduler.loop.
    volume_writes`)."""

    @property
    @abc.abstractmethod
    def identity(self) -> tuple[object, ...]:
        """What the call writes, hashable: two calls of one identity make the same write."""

    def combine(self, older: ApiCall, *, running: bool) -> Combine:
        return Combine.QUEUE


@dataclass(eq=False)
class BindVolume(VolumeCall):
    """Write a claim into a PV's ``claimRef`` (VolumeBinding's PreBind for a claim matched
    to a static PV), guarded by the PV's resourceVersion; returns the PV's resourceVersion
    after the write. A lost reply is read back: the PV naming the claim's uid means it
    took effect."""

    binding: StaticBinding

    @property
    def key(self) -> str:
        return f"PersistentVolume/{self.binding.volume}"

    @property
    def identity(self) -> tuple[object, ...]:
        return ("claimRef", self.binding)

    async def execute(self, ctx: CallContext) -> str:
        volumes = _volumes(ctx)
        b = self.binding
        try:
            return await volumes.bind_volume(
                b.volume, b.claim, b.resource_version, by_controller=b.by_controller
            )
        except AmbiguousError as exc:
            ref = ObjectRef("PersistentVolume", "", b.volume)

            async def read() -> object:
                return await volumes.read_volume(b.volume)

            def took(state: Any) -> bool:
                return isinstance(state, VolumeState) and state.claim_uid == b.claim.uid

            outcome, seen = await ctx.outcomes.volume(ref, exc, read=read, took_effect=took)
            if outcome is not Outcome.TOOK_EFFECT:
                raise
            return seen.resource_version if isinstance(seen, VolumeState) else ""


@dataclass(eq=False)
class SelectNode(VolumeCall):
    """Annotate a claim with the node chosen to provision its PV (VolumeBinding's PreBind),
    guarded by the claim's uid and resourceVersion; returns the claim's resourceVersion
    after the write. A lost reply is read back: the claim naming the node means it took
    effect."""

    claim: ClaimTarget
    node: str
    resource_version: str

    @property
    def key(self) -> str:
        return f"PersistentVolumeClaim/{self.claim.key}"

    @property
    def identity(self) -> tuple[object, ...]:
        return ("selected-node", self.claim, self.node, self.resource_version)

    async def execute(self, ctx: CallContext) -> str:
        volumes = _volumes(ctx)
        try:
            return await volumes.select_node(self.claim, self.node, self.resource_version)
        except AmbiguousError as exc:
            ref = ObjectRef("PersistentVolumeClaim", self.claim.namespace, self.claim.name)

            async def read() -> object:
                return await volumes.read_volume_claim(self.claim.namespace, self.claim.name)

            def took(state: Any) -> bool:
                return (
                    isinstance(state, VolumeState)
                    and state.uid == self.claim.uid
                    and state.selected_node == self.node
                )

            outcome, seen = await ctx.outcomes.volume(ref, exc, read=read, took_effect=took)
            if outcome is not Outcome.TOOK_EFFECT:
                raise
            return seen.resource_version if isinstance(seen, VolumeState) else ""
