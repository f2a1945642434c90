"""The resource table (layer 4, kube): where each kind the scheduler uses lives on the
API server, and the content types of requests.

:class:`Resource` builds URL paths; the constants name every resource ``scheduler.kube``
reads or writes. The custom resources' group and version come from
:mod:`scheduler.api.labels`, the one place they are written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from scheduler.api import labels as L
from scheduler.api.group_apis import (
    APIS,
    KUBERNETES,
    SCHEDULER_PLUGINS,
    VOLCANO,
    GroupApi,
    kind_key,
)

__all__ = [
    "API_SERVICES",
    "COSCHEDULING_POD_GROUPS",
    "CRD_GROUP",
    "CRD_VERSION",
    "CSI_DRIVERS",
    "CSI_NODES",
    "CSI_STORAGE_CAPACITIES",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "DEVICE_CLASSES",
    "EVENTS",
    "GANG_RESOURCES",
    "JSON",
    "KUBERNETES_POD_GROUPS",
    "LEASES",
    "MERGE_PATCH",
    "NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "POD_GROUPS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "STORAGE_CLASSES",
    "STRATEGIC_MERGE_PATCH",
    "TOPOLOGIES",
    "VOLCANO_POD_GROUPS",
    "VOLCANO_QUEUES",
    "WORKLOADS",
    "Resource",
    "pod_groups_of",
    "queues_of",
]

JSON: Final[str] = "application/json"
MERGE_PATCH: Final[str] = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final[str] = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where its objects live on the API server.

    ``group`` is empty for the core group. ``path`` builds the URL path of the
    collection (all namespaces when ``namespace`` is None), of one object (``name``), or
    of one of its subresources (``subresource``).
    """

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    status_subresource: bool = True
    """Whether its status is written through ``/status`` (Volcano's PodGroup: with the
    object)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The kind key its objects are handed to the cache under
        (:func:`~scheduler.api.group_apis.kind_key`: ``PodGroup.scheduling.volcano.sh``)."""
        return kind_key(self.api_version, self.kind)

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return base


CRD_GROUP: Final[str] = L.GROUP
CRD_VERSION: Final[str] = L.VERSION

PODS: Final = Resource("Pod", "", "v1", "pods", True)
NODES: Final = Resource("Node", "", "v1", "nodes", False)
POD_GROUPS: Final = Resource("PodGroup", CRD_GROUP, CRD_VERSION, "podgroups", True)
QUEUES: Final = Resource("Queue", CRD_GROUP, CRD_VERSION, "queues", False)
TOPOLOGIES: Final = Resource("Topology", CRD_GROUP, CRD_VERSION, "topologies", False)
PRIORITY_CLASSES: Final = Resource(
    "PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False
)
POD_DISRUPTION_BUDGETS: Final = Resource(
    "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True
)
EVENTS: Final = Resource("Event", "events.k8s.io", "v1", "events", True)


def pod_groups_of(api: GroupApi) -> Resource:
    """Where the PodGroups of gang API ``api`` live."""
    return Resource(
        api.pod_group_kind,
        api.group,
        api.version,
        "podgroups",
        True,
        status_subresource=api.status_subresource,
    )


def queues_of(api: GroupApi) -> Resource:
    """Where the Queues of gang API ``api`` (one with queues) live."""
    return Resource(api.queue_kind, api.group, api.version, "queues", False)


GANG_RESOURCES: Final[tuple[Resource, ...]] = tuple(pod_groups_of(api) for api in APIS) + tuple(
    queues_of(api) for api in APIS if api.queue_kind
)
"""The PodGroups and Queues of every gang API (:data:`~scheduler.api.group_apis.APIS`)."""
VOLCANO_POD_GROUPS: Final = pod_groups_of(VOLCANO)
VOLCANO_QUEUES: Final = queues_of(VOLCANO)
COSCHEDULING_POD_GROUPS: Final = pod_groups_of(SCHEDULER_PLUGINS)
KUBERNETES_POD_GROUPS: Final = pod_groups_of(KUBERNETES)
WORKLOADS: Final = Resource("Workload", KUBERNETES.group, KUBERNETES.version, "workloads", True)
"""The Workloads of the Workload API (read by ``sluice snapshot``: the scheduling.k8s.io
PodGroups of a snapshot name theirs)."""
CUSTOM_RESOURCE_DEFINITIONS: Final = Resource(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)
API_SERVICES: Final = Resource("APIService", "apiregistration.k8s.io", "v1", "apiservices", False)
RESOURCE_SLICES: Final = Resource("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", False)
DEVICE_CLASSES: Final = Resource("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", False)
RESOURCE_CLAIMS: Final = Resource("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATES: Final = Resource(
    "ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", True
)
LEASES: Final = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)
PERSISTENT_VOLUME_CLAIMS: Final = Resource(
    "PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True
)
PERSISTENT_VOLUMES: Final = Resource("PersistentVolume", "", "v1", "persistentvolumes", False)
STORAGE_CLASSES: Final = Resource(
    "StorageClass", "storage.k8s.io", "v1", "storageclasses", False, status_subresource=False
)
CSI_NODES: Final = Resource(
    "CSINode", "storage.k8s.io", "v1", "csinodes", False, status_subresource=False
)
CSI_DRIVERS: Final = Resource(
    "CSIDriver", "storage.k8s.io", "v1", "csidrivers", False, status_subresource=False
)
CSI_STORAGE_CAPACITIES: Final = Resource(
    "CSIStorageCapacity",
    "storage.k8s.io",
    "v1",
    "csistoragecapacities",
    True,
    status_subresource=False,
)
NAMESPACES: Final = Resource("Namespace", "", "v1", "namespaces", False)
"""Namespaces' labels: what pod affinity terms' namespace selectors match."""
SERVICES: Final = Resource("Service", "", "v1", "services", True)
REPLICATION_CONTROLLERS: Final = Resource(
    "ReplicationController", "", "v1", "replicationcontrollers", True
)
REPLICA_SETS: Final = Resource("ReplicaSet", "apps", "v1", "replicasets", True)
STATEFUL_SETS: Final = Resource("StatefulSet", "apps", "v1", "statefulsets", True)
"""Services and these controllers: their selectors spread the pods they select (kube's
default topology spread constraints)."""
