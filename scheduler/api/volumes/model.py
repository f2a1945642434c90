"""Storage objects as the scheduler reads them (layer 0).

Frozen values built by :mod:`scheduler.api.volumes.storage_objects` from ``v1``
PersistentVolumeClaims and PersistentVolumes and ``storage.k8s.io/v1`` StorageClasses,
CSINodes, CSIDrivers and CSIStorageCapacities: only what kube-scheduler's VolumeBinding,
VolumeZone, VolumeRestrictions and NodeVolumeLimits read. Sizes are bytes (a quantity's
``Value()``, rounded up); a claim's or volume's storage class is its beta annotation when
set, else its ``storageClassName``, as kube's helpers read it.

What is not read (docs/concepts/volumes.md says the same for users): in-tree volume
plugins migrated to CSI (a PV of an in-tree type counts against no CSI limit, and its
node affinity is the PV's own), VolumeAttachments (the attach limit counts the volumes of
the pods on a node), VolumeAttributesClasses (a claim or PV naming one never matches),
and the alpha storage capacity score.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.label_selectors import LabelSelector
from scheduler.api.pod import NodeSelectorTerm

__all__ = [
    "ACCESS_MODES",
    "BETA_STORAGE_CLASS",
    "BIND_COMPLETED",
    "BOUND_BY_CONTROLLER",
    "IMMEDIATE",
    "NO_PROVISIONER",
    "PROVISIONED_BY",
    "READ_WRITE_ONCE_POD",
    "SELECTED_NODE",
    "STORAGE_PROVISIONER",
    "WAIT_FOR_FIRST_CONSUMER",
    "CapacityInfo",
    "ClaimRef",
    "CsiDriverInfo",
    "CsiNodeInfo",
    "CsiSource",
    "PvInfo",
    "PvcInfo",
    "StorageClassInfo",
]

SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""A claim's annotation naming the node the scheduler chose for its provisioning."""
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
"""A claim's annotation: the PV controller finished binding it (with ``volumeName``)."""
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
"""A PV's or claim's annotation: the binding was made by a controller (or the
scheduler), not pre-bound by a user."""
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
"""A PV's annotation naming the provisioner that made it."""
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
"""A claim's annotation naming the provisioner asked to make its PV."""
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
"""The beta annotation naming a storage class; read before ``storageClassName``."""
NO_PROVISIONER = "kubernetes.io/no-provisioner"
"""The provisioner of a class whose PVs are made by hand (local volumes)."""

IMMEDIATE = "Immediate"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", READ_WRITE_ONCE_POD})


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A PV's ``spec.claimRef``: the claim it is bound (or pre-bound) to."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PvcInfo:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    storage_class: str = ""
    """Its class ("" when it names none)."""
    has_class: bool = False
    """It names a class (possibly "", which asks for a PV without a class)."""
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    """``spec.resources.requests.storage`` in bytes (0 when unset)."""
    selector: LabelSelector | None = None
    """``spec.selector`` (None: every PV)."""
    volume_mode: str = "Filesystem"
    volume_name: str = ""
    """``spec.volumeName``: the PV it is bound, or pre-bound, to."""
    attributes_class: str = ""
    """``spec.volumeAttributesClassName`` (matched only against a PV naming the same)."""
    phase: str = "Pending"
    annotations: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set."""
    controller_uid: str = ""
    """The uid of its controlling owner (an ephemeral volume's pod), "" if none."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def selected_node(self) -> str:
        """The node the scheduler chose for its provisioning ("" when none)."""
        return self.annotations.get(SELECTED_NODE, "")

    @property
    def provisioning(self) -> bool:
        """Has a node been chosen for its provisioning (the annotation is there)?"""
        return SELECTED_NODE in self.annotations

    @property
    def fully_bound(self) -> bool:
        """Bound to a PV and its binding finished (kube's isPVCFullyBound)."""
        return bool(self.volume_name) and BIND_COMPLETED in self.annotations


@dataclass(frozen=True, slots=True)
class CsiSource:
    """A PV's ``spec.csi``: the driver and the volume's handle in it."""

    driver: str
    handle: str


@dataclass(frozen=True, slots=True)
class PvInfo:
    """A PersistentVolume."""

    name: str
    uid: str
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    storage_class: str = ""
    capacity: int = 0
    """``spec.capacity.storage`` in bytes."""
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = "Filesystem"
    attributes_class: str = ""
    claim_ref: ClaimRef | None = None
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    """``spec.nodeAffinity.required`` terms (ORed); None when the PV has none."""
    phase: str = "Pending"
    deleting: bool = False
    csi: CsiSource | None = None

    def bound_to(self, claim: PvcInfo) -> bool:
        """Is this PV bound, or pre-bound, to ``claim`` (kube's IsVolumeBoundToClaim: the
        name and namespace agree, and the uid too when the claimRef has one)?"""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Does the node affinity admit a node with ``labels`` (kube's CheckNodeAffinity,
        which knows the node's labels only: ``matchFields`` match no node)?"""
        terms = self.node_affinity
        return terms is None or any(t.matches(labels, "") for t in terms)


@dataclass(frozen=True, slots=True)
class StorageClassInfo:
    """A StorageClass."""

    name: str
    provisioner: str = ""
    binding_mode: str = IMMEDIATE
    """``volumeBindingMode`` (the API server defaults it to Immediate)."""
    allowed_topologies: tuple[NodeSelectorTerm, ...] = ()
    """``allowedTopologies`` as label terms (ORed; empty: every node)."""

    @property
    def provisions(self) -> bool:
        """Can a PV of this class be provisioned at all (a provisioner other than
        ``kubernetes.io/no-provisioner``)?"""
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER

    @property
    def delays_binding(self) -> bool:
        """Are its claims bound when their first pod is scheduled (WaitForFirstConsumer)?"""
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Does ``allowedTopologies`` admit a node with ``labels``?"""
        return not self.allowed_topologies or any(
            t.matches(labels, "") for t in self.allowed_topologies
        )


@dataclass(frozen=True, slots=True)
class CsiNodeInfo:
    """A CSINode: per driver installed on the node, its attach limit (None: no limit)."""

    name: str
    drivers: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CsiDriverInfo:
    """A CSIDriver: whether it publishes storage capacity (``spec.storageCapacity``)."""

    name: str
    storage_capacity: bool = False


@dataclass(frozen=True, slots=True)
class CapacityInfo:
    """A CSIStorageCapacity: how large a volume of ``storage_class`` may be made on the
    nodes ``node_topology`` selects (None: no node)."""

    namespace: str
    name: str
    storage_class: str
    node_topology: LabelSelector | None
    capacity: int | None = None
    maximum_volume_size: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def limit(self) -> int | None:
        """The largest volume it allows: ``maximumVolumeSize`` when set, else
        ``capacity`` (kube's volumeLimit); None when neither is."""
        return self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity
