"""DRA objects as the scheduler reads them (layer 0).

Frozen values built by :mod:`scheduler.api.dra.codec` from ``resource.k8s.io/v1`` JSON.
Names follow the API: a device is ``driver/pool/device``; an attribute or capacity name
is fully qualified (``domain/id``; an unqualified name gets the driver as its domain, as
the API defines); quantities are exact Fractions.

What is read and what is not (docs/devices.md says the same for users):
devices with ``attributes`` and ``capacity``; slices bound to a node by ``nodeName``, to
nodes by ``nodeSelector``, or to every node by ``allNodes``; pools with generations
(only the newest counts) and ``resourceSliceCount`` (an incomplete pool is not used);
DeviceClass ``selectors``, ``config`` and ``extendedResourceName``; claim requests
``exactly`` (``ExactCount`` with ``count``, ``All``, ``selectors``) and
``firstAvailable``; claim ``constraints`` with ``matchAttribute``; claim ``config``.
Not supported: admin access, device taints and tolerations, partitionable devices
(shared counters, per-device node selection), consumable capacity, binding conditions,
``distinctAttribute`` constraints. A request or constraint that needs one of them makes
its claim unschedulable with a reason saying so (:attr:`ClaimInfo.unsupported`); a
device that needs one (a slice with shared counters, a device consuming counters or
with taints) is not offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduler.api.pod import NodeSelectorTerm, PodClaim

__all__ = [  # PodClaim is parsed with the pod's spec (scheduler.api.pod)
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT",
    "EXTENDED_CLAIM_ANNOTATION",
    "EXTENDED_SESSION_NAME",
    "FINALIZER",
    "MAX_ALLOCATION_RESULTS",
    "MAX_RESERVED_FOR",
    "POD_CLAIM_ANNOTATION",
    "Allocation",
    "AttributeValue",
    "ClaimBinding",
    "ClaimInfo",
    "ClaimTemplateInfo",
    "Constraint",
    "Consumer",
    "Device",
    "DeviceClassInfo",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "ExtendedClaim",
    "PodClaim",
    "RequestMapping",
    "SliceInfo",
    "Subrequest",
    "Version",
]

ALLOCATION_MODE_EXACT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
FINALIZER = "resource.kubernetes.io/delete-protection"
"""The finalizer the scheduler puts on a claim it allocates: the claim controller then
deallocates the claim once nobody holds it, and removes the finalizer."""
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""On a claim made from a template: the name of the pod's claim entry it is for."""
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""On the claim the scheduler makes for a pod's extended resources served by DRA
(KEP-5004), with the value ``"true"``; the pod owns (controls) the claim."""
MAX_RESERVED_FOR = 256
"""At most this many consumers in ``status.reservedFor`` (the API's limit)."""
MAX_ALLOCATION_RESULTS = 32
EXTENDED_SESSION_NAME = "<extended-resources>"
"""The name a pod's extended-resource claim goes by until it is created (not a valid
object name, as in kube-scheduler); its key is ``ns/<extended-resources>/<pod uid>``."""
"""At most this many devices in one claim's allocation (the API's limit)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version attribute value (``1.2.3-rc.1``), compared as semver does."""

    text: str


AttributeValue = bool | int | str | Version | tuple[Any, ...]
"""A device attribute: a bool, int, string or version (a tuple for the list types)."""


@dataclass(frozen=True, slots=True)
class DeviceID:
    """A device's identity: its driver, pool and name."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice. ``attributes`` and ``capacity`` are keyed by fully
    qualified name (``domain/id``)."""

    id: DeviceID
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)
    unsupported: str = ""
    """Why the device is not offered (it needs a feature Sluice leaves out); "" if it is."""


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """A ResourceSlice. Exactly one of ``node_name``, ``node_selector`` (terms ORed) and
    ``all_nodes`` says which nodes reach its devices."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[Device, ...]
    node_name: str = ""
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False
    unsupported: str = ""
    """Why no device of the slice is offered ("" if they are)."""

    def reaches(self, node: str, labels: Mapping[str, str]) -> bool:
        """Are this slice's devices available on node ``node`` with ``labels``?"""
        if self.node_name:
            return self.node_name == node
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return any(t.matches(labels, node) for t in self.node_selector)
        return False


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    """A DeviceClass: CEL ``selectors`` every device of the class matches, ``config`` (raw
    JSON, copied into allocations), and the extended resource it stands for (KEP-5004)."""

    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    extended_resource_name: str = ""
    created: float = 0.0
    """``metadata.creationTimestamp`` (seconds since the epoch; 0 when unset): of two
    classes naming one extended resource, the newer serves it."""


@dataclass(frozen=True, slots=True)
class Subrequest:
    """What one request (or one alternative of ``firstAvailable``) asks: ``count``
    devices of ``device_class`` (or every matching device, ``mode == "All"``) matching
    every CEL selector of ``selectors`` and of the class."""

    name: str
    device_class: str
    mode: str = ALLOCATION_MODE_EXACT
    count: int = 1
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A claim's request: ``exactly`` one subrequest (named like the request), or the
    first of ``first_available`` that can be met (the result names it ``req/sub``)."""

    name: str
    exactly: Subrequest | None = None
    first_available: tuple[Subrequest, ...] = ()

    @property
    def alternatives(self) -> tuple[Subrequest, ...]:
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class Constraint:
    """``matchAttribute``: every device of ``requests`` (all requests when empty) has the
    same value of the attribute ``attribute``."""

    attribute: str
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One device given to one request of a claim (``request`` is ``req`` or ``req/sub``)."""

    request: str
    id: DeviceID


@dataclass(frozen=True, slots=True)
class Allocation:
    """A claim's ``status.allocation``: the devices and where they can be used
    (``node_selector`` terms ORed; None: on every node)."""

    results: tuple[DeviceResult, ...]
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    config: tuple[Mapping[str, Any], ...] = ()
    node_name: str = ""
    """The node when ``node_selector`` is the single ``metadata.name In [node]`` term
    the allocator writes for node-local devices ("" otherwise)."""
    raw: Mapping[str, Any] | None = None
    """The allocation as read from the API (None for one made by the allocator)."""

    def allows(self, node: str, labels: Mapping[str, str]) -> bool:
        """May a pod of the claim run on ``node``?"""
        if self.node_name:
            return node == self.node_name
        if self.node_selector is None:
            return True
        return any(t.matches(labels, node) for t in self.node_selector)

    @property
    def devices(self) -> tuple[DeviceID, ...]:
        return tuple(r.id for r in self.results)


@dataclass(frozen=True, slots=True)
class Consumer:
    """An entry of ``status.reservedFor`` (a pod, or another resource)."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A ResourceClaim: what it asks and how it stands."""

    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    deleting: bool = False
    owner_pod: str = ""
    """The uid of the pod that owns (controls) it: a claim made from a template."""
    finalizers: tuple[str, ...] = ()
    resource_version: str = ""
    unsupported: str = ""
    """Why the claim cannot be allocated by Sluice (a feature it leaves out); "" if it can."""
    extended: bool = False
    """Made by a scheduler for its pod's extended resources (the annotation
    :data:`EXTENDED_CLAIM_ANNOTATION`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.uid == uid and c.resource == "pods" for c in self.reserved_for)


@dataclass(frozen=True, slots=True)
class ClaimTemplateInfo:
    """A ResourceClaimTemplate: the claim spec it makes (as a claim without identity)."""

    namespace: str
    name: str
    claim: ClaimInfo

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """An entry of ``pod.status.extendedResourceClaimStatus.requestMappings``: which
    request of the claim serves a container's extended resource."""

    container: str
    resource: str
    request: str


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The claim to create for a pod's extended resources served by DRA (KEP-5004), as
    kube-scheduler creates it: ``generateName`` ``<pod>-extended-resources-``, owned by
    the pod, annotated :data:`EXTENDED_CLAIM_ANNOTATION`, with ``requests``; and the
    ``mappings`` written to the pod's ``status.extendedResourceClaimStatus``."""

    requests: tuple[DeviceRequest, ...]
    mappings: tuple[RequestMapping, ...]


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """What is written to one claim before its pod is bound (kube-scheduler's PreBind):
    the ``allocation`` when the scheduler chose it (None when the claim was allocated
    already), the pod added to ``status.reservedFor``, and whether the claim still needs
    the :data:`FINALIZER`."""

    namespace: str
    name: str
    uid: str
    pod_name: str
    pod_uid: str
    allocation: Allocation | None = None
    add_finalizer: bool = False
    extended: ExtendedClaim | None = None
    """Set for a pod's extended-resource claim (KEP-5004) that is still to be created:
    ``name`` and ``uid`` are then "" until the loop created it."""

    @property
    def key(self) -> str:
        if not self.name:
            return f"{self.namespace}/{EXTENDED_SESSION_NAME}/{self.pod_uid}"
        return f"{self.namespace}/{self.name}"
