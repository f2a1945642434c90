"""The resource catalog of the Kubernetes API emulator (layer 4).

:class:`ResourceInfo` describes one served resource (a plural name in a group/version)
and how it maps to the :class:`~scheduler.sim.store.ObjectStore`: the kind the store keeps
its objects under, the view that converts between the stored and the served shape, the
verbs and discovery names. :data:`BUILTIN_RESOURCES` lists the built-in resources the
emulator serves and :func:`custom_resources` the kinds of a CRD catalog (validated and
defaulted by their schema on every write); :data:`ACTION_SUBRESOURCES` the subresources
served besides ``status``. Pure data, shared by the request handlers
(:mod:`.emulator`), discovery (:mod:`.emulator_discovery`), Status bodies
(:mod:`.emulator_http`), views (:mod:`.emulator_views`) and tables
(:mod:`.emulator_tables`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from scheduler.schema import CrdCatalog, CrdInfo

__all__ = [
    "ACTION_SUBRESOURCES",
    "BUILTIN_RESOURCES",
    "ResourceInfo",
    "View",
    "custom_resources",
]

_ALL_VERBS: Final = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)

View = Literal["plain", "core-event", "namespace"]


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """One served resource (a plural name in a group/version) and how it maps to the store.

    ``store_kind`` is the kind the store keeps the objects under (``Event`` for both event
    APIs). ``view`` names a conversion between the stored and the served shape.
    ``return_deleted``: DELETE answers with the deleted object (pods and custom objects)
    rather than a success Status, as the API server does. ``crd`` is set for custom kinds,
    which are validated and defaulted by their schema on every write.
    """

    group: str
    version: str
    name: str
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = _ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    store_kind: str = ""
    view: View = "plain"
    return_deleted: bool = False
    crd: CrdInfo | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kind_in_store(self) -> str:
        return self.store_kind or self.kind


#: The built-in resources the emulator serves, besides the CRD catalog's kinds.
BUILTIN_RESOURCES: Final[tuple[ResourceInfo, ...]] = (
    ResourceInfo(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        short_names=("po",),
        categories=("all",),
        return_deleted=True,
    ),
    ResourceInfo("", "v1", "nodes", "node", "Node", False, short_names=("no",)),
    ResourceInfo(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        verbs=("create", "delete", "get", "list", "watch"),
        short_names=("ns",),
        view="namespace",
    ),
    ResourceInfo(
        "", "v1", "events", "event", "Event", True, short_names=("ev",), view="core-event"
    ),
    ResourceInfo("", "v1", "bindings", "binding", "Binding", True, verbs=("create",)),
    ResourceInfo("events.k8s.io", "v1", "events", "event", "Event", True, short_names=("ev",)),
    ResourceInfo(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        False,
        short_names=("pc",),
    ),
    ResourceInfo(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
    ),
    ResourceInfo("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    # Workload objects that own pods, stored as they are written: no controller runs here
    # (a Job makes no pods), but the pod grouper of `sluice controller` reads them.
    ResourceInfo("batch", "v1", "jobs", "job", "Job", True, categories=("all",)),
    ResourceInfo(
        "apps", "v1", "deployments", "deployment", "Deployment", True, short_names=("deploy",)
    ),
    ResourceInfo(
        "apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, short_names=("rs",)
    ),
    ResourceInfo(
        "apps", "v1", "statefulsets", "statefulset", "StatefulSet", True, short_names=("sts",)
    ),
    # Stored as written (no endpoints, no pods): their selectors spread the pods they
    # select (kube's default topology spread constraints).
    ResourceInfo("", "v1", "services", "service", "Service", True, short_names=("svc",)),
    ResourceInfo(
        "",
        "v1",
        "replicationcontrollers",
        "replicationcontroller",
        "ReplicationController",
        True,
        short_names=("rc",),
    ),
    ResourceInfo(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
    ),
    ResourceInfo("apiregistration.k8s.io", "v1", "apiservices", "apiservice", "APIService", False),
    ResourceInfo(
        "resource.k8s.io", "v1", "resourceslices", "resourceslice", "ResourceSlice", False
    ),
    ResourceInfo("resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", False),
    ResourceInfo(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        True,
        short_names=("pvc",),
    ),
    ResourceInfo(
        "",
        "v1",
        "persistentvolumes",
        "persistentvolume",
        "PersistentVolume",
        False,
        short_names=("pv",),
    ),
    ResourceInfo(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "storageclass",
        "StorageClass",
        False,
        short_names=("sc",),
    ),
    ResourceInfo("storage.k8s.io", "v1", "csinodes", "csinode", "CSINode", False),
    ResourceInfo("storage.k8s.io", "v1", "csidrivers", "csidriver", "CSIDriver", False),
    ResourceInfo(
        "storage.k8s.io",
        "v1",
        "csistoragecapacities",
        "csistoragecapacity",
        "CSIStorageCapacity",
        True,
    ),
    ResourceInfo("resource.k8s.io", "v1", "resourceclaims", "resourceclaim", "ResourceClaim", True),
    ResourceInfo(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        "ResourceClaimTemplate",
        True,
    ),
)

#: Subresources served besides ``status``: (resource, subresource) -> (group, version, kind).
ACTION_SUBRESOURCES: Final[Mapping[tuple[str, str], tuple[str, str, str]]] = {
    ("pods", "binding"): ("", "v1", "Binding"),
    ("pods", "eviction"): ("policy", "v1", "Eviction"),
}


def custom_resources(catalog: CrdCatalog) -> list[ResourceInfo]:
    """The resources of the catalog's custom kinds, each checked by its CRD schema."""
    return [
        ResourceInfo(
            info.group,
            info.version,
            info.plural,
            info.singular,
            info.kind,
            info.namespaced,
            short_names=info.short_names,
            store_kind=info.key,
            return_deleted=True,
            crd=info,
        )
        for kind in catalog.kinds()
        if (info := catalog.get(kind)) is not None
    ]
