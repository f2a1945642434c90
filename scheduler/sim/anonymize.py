"""A snapshot without what identifies the workloads and the machines (layer 4, sim):
``sluice snapshot --anonymize``.

Renamed, consistently wherever the name is used (references, labels that name groups,
``kubernetes.io/hostname``, DRA pools named after their node, claims' reservations):

* namespaces to ``ns-0001``... (the ``kube-*`` ones keep their names: the scheduler
  protects ``kube-system``), in the Namespace objects, their ``kubernetes.io/metadata.name``
  label and the namespaces pod affinity terms name; nodes to ``node-0001``...,
  ResourceSlices to ``slice-0001``...;
* every namespaced object (pods, PodGroups of every API, Workloads, ResourceClaims and
  their templates, PodDisruptionBudgets, PersistentVolumeClaims, CSIStorageCapacities,
  Services and the controllers whose selectors default topology spreading reads) and
  every owner named by one, to ``n0001``..., one numbering per namespace; a pod's
  volumes to ``v0``... and the claim of a generic ephemeral volume to
  ``<pod's new name>-v<i>``, as the API names it;
* PersistentVolumes to ``pv-0001``..., the disks pods name inline to ``disk-0001``...,
  a CSI volume's handle to its PV's new name (CSINodes take their node's new name).

Each numbering follows the order of the names it replaces (namespaces in the order of
``namespace/``, as the scheduler compares ``namespace/name`` keys), so every tie the
scheduler breaks by name (jobs and pods of one priority and creation second, nodes,
devices) is broken the same way in the replay; only a renamed namespace and a ``kube-*``
one may compare otherwise. Queues, PriorityClasses, Topologies and DeviceClasses keep
their names: they are the configuration, which the replay is about; so do StorageClasses
and CSIDrivers (a class's parameters and mount options go: they may name secrets).

Dropped, as the scheduler does not read them: labels and annotations other than the
schedulers' own (``scheduling.sluice.dev/``, Volcano's, scheduler-plugins', the Workload
API's, ``sim.sluice.dev/``) and those some selector of the snapshot reads (node labels
read by node selectors, affinities, spread constraints, topology levels and DRA node
selectors; pod labels read by PodDisruptionBudgets, pod affinities, spread constraints,
Services and controllers; namespace labels read by pod affinities' namespace selectors;
PVs' labels that claims' selectors or VolumeZone read): their values stay, as selectors
match them; containers' images, commands, environment, probes and volume mounts, the
pod's volumes other than claims and the inline disks VolumeRestrictions reads, and its
service account; everything of a Service or a controller but its selector; a PV's source
but for a CSI driver (another becomes ``hostPath: /``, which no plugin reads); the
messages of conditions (they name pods and nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.api.group_apis import APIS, KUBERNETES, PodField
from scheduler.api.volumes.model import SELECTED_NODE
from scheduler.sim.anonymize_storage import (
    STORAGE_ANNOTATIONS,
    ZONE_LABELS,
    capacity,
    csi_node,
    disk_numbering,
    ephemeral_names,
    pod_volumes,
    storage_class,
    volume,
    volume_claim,
)
from scheduler.sim.renaming import HOSTNAME, node_terms, numbering, selector_keys, walk
from scheduler.sim.scenario import CLUSTER_SCOPED
from scheduler.sim.scenario_writer import Obj, Snapshot

SCHEDULER_PREFIXES = (
    "scheduling.sluice.dev/",
    "sim.sluice.dev/",
    "scheduling.volcano.sh/",
    "volcano.sh/",
    "scheduling.x-k8s.io/",
    "scheduling.k8s.io/",
)
"""Label and annotation keys the schedulers read, kept whatever their name."""

ZONE = "topology.kubernetes.io/zone"
NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""The label the API server gives every Namespace: its name."""
SELECTING_KINDS = ("Service", "ReplicaSet", "StatefulSet", "ReplicationController")
"""Objects read only for their pod selector (default topology spreading)."""

POD_SPEC = (
    "schedulerName",
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "containers",
    "initContainers",
    "overhead",
    "resources",
    "resourceClaims",
    "schedulingGates",
    "terminationGracePeriodSeconds",
    "topologySpreadConstraints",
    "hostNetwork",
)
"""What of a pod's spec a snapshot anonymized keeps (and the fields of :data:`MEMBER_FIELDS`
in it)."""

MEMBER_FIELDS: tuple[PodField, ...] = tuple(api.member_field for api in APIS)
"""Where a pod names a group of each gang API: kept, and renamed as the group is."""
_MEMBER_LABELS = frozenset(f.key for f in MEMBER_FIELDS if f.place == "label")
_MEMBER_ANNOTATIONS = frozenset(f.key for f in MEMBER_FIELDS if f.place == "annotation")
_KEPT_SPEC = frozenset(POD_SPEC) | {f.key.split(".")[0] for f in MEMBER_FIELDS if f.place == "spec"}

CONTAINER = ("resources", "ports", "restartPolicy")
"""What of a container it keeps (and a name of its own)."""


class _Names:
    """The renamings of one snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        objects = snap.objects
        namespaced: dict[str, set[str]] = {}
        for kind, items in objects.items():
            if kind in CLUSTER_SCOPED:
                continue
            for obj in items:
                ns = obj["metadata"]["namespace"]
                names = namespaced.setdefault(ns, set())
                names.add(obj["metadata"]["name"])
                names.update(_referenced_names(obj))
        spaces = set(namespaced) | {o["metadata"]["name"] for o in objects.get("Namespace", ())}
        renamed = [ns for ns in spaces if not ns.startswith("kube-")]
        self.namespaces = numbering(renamed, "ns-", order=lambda ns: f"{ns}/")
        self.local = {ns: numbering(names, "n") for ns, names in namespaced.items()}
        self.nodes = numbering((o["metadata"]["name"] for o in objects.get("Node", ())), "node-")
        self.slices = numbering(
            (o["metadata"]["name"] for o in objects.get("ResourceSlice", ())), "slice-"
        )
        self.volumes = numbering(
            (o["metadata"]["name"] for o in objects.get("PersistentVolume", ())), "pv-"
        )
        self.disks = disk_numbering(objects.get("Pod", ()))
        self.ephemeral = ephemeral_names(objects.get("Pod", ()), self.local)
        """(namespace, claim) -> the new name of a generic ephemeral volume's claim."""

    def ns(self, namespace: str) -> str:
        return self.namespaces.get(namespace, namespace)

    def name(self, namespace: str, name: str) -> str:
        made = self.ephemeral.get((namespace, name))
        if made is not None:
            return made
        return self.local.get(namespace, {}).get(name, name)

    def volume(self, name: str) -> str:
        return self.volumes.get(name, name)

    def node(self, name: str) -> str:
        return self.nodes.get(name, name)


def _referenced_names(obj: Mapping[str, Any]) -> set[str]:
    """Names of objects of its namespace that ``obj`` names."""
    meta = obj["metadata"]
    names = {str(o["name"]) for o in meta.get("ownerReferences") or () if o.get("name")}
    names.update(group for field in MEMBER_FIELDS if (group := field.read(obj)))
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    for c in spec.get("resourceClaims") or ():
        for key in ("resourceClaimName", "resourceClaimTemplateName"):
            if c.get(key):
                names.add(str(c[key]))
    for v in spec.get("volumes") or ():
        claim = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(claim, Mapping) and claim.get("claimName"):
            names.add(str(claim["claimName"]))
    for c in status.get("resourceClaimStatuses") or ():
        if c.get("resourceClaimName"):
            names.add(str(c["resourceClaimName"]))
    for c in status.get("reservedFor") or ():
        if c.get("name"):
            names.add(str(c["name"]))
    workload = (spec.get("podGroupTemplateRef") or {}).get("workload") or {}
    if workload.get("workloadName"):
        names.add(str(workload["workloadName"]))
    if (spec.get("controllerRef") or {}).get("name"):
        names.add(str(spec["controllerRef"]["name"]))
    return names


def anonymize(snap: Snapshot) -> None:
    """Rename and strip ``snap`` in place (see the module docstring)."""
    names = _Names(snap)
    objects = snap.objects
    node_keys = {HOSTNAME}
    pod_keys: set[str] = set()
    for t in objects.get("Topology", ()):
        node_keys.update(
            str(lv.get("nodeLabel")) for lv in (t.get("spec") or {}).get("levels") or ()
        )
    for pdb in objects.get("PodDisruptionBudget", ()):
        pod_keys |= selector_keys((pdb.get("spec") or {}).get("selector"))
    namespace_keys: set[str] = set()
    for kind in SELECTING_KINDS:
        for obj in objects.get(kind, ()):
            selector = (obj.get("spec") or {}).get("selector") or {}
            plain = kind in ("Service", "ReplicationController")  # a map, not a LabelSelector
            pod_keys |= set(map(str, selector)) if plain else selector_keys(selector)
            node_keys |= {HOSTNAME, ZONE}  # kube's default spreading constraints' keys
    for pod in objects.get("Pod", ()):
        spec = pod.get("spec") or {}
        node_keys.update(spec.get("nodeSelector") or {})
        affinity = spec.get("affinity") or {}
        node_keys |= selector_keys(affinity.get("nodeAffinity"))
        for kind in ("podAffinity", "podAntiAffinity"):
            pod_keys |= selector_keys(affinity.get(kind))
            for term in walk(affinity.get(kind)):
                if term.get("topologyKey"):
                    node_keys.add(str(term["topologyKey"]))
                namespace_keys |= selector_keys(term.get("namespaceSelector"))
        for constraint in spec.get("topologySpreadConstraints") or ():
            pod_keys |= selector_keys(constraint.get("labelSelector"))
            pod_keys.update(str(k) for k in constraint.get("matchLabelKeys") or ())
            if constraint.get("topologyKey"):
                node_keys.add(str(constraint["topologyKey"]))
    for kind in ("ResourceSlice", "ResourceClaim"):
        for obj in objects.get(kind, ()):
            node_keys |= selector_keys(obj.get("spec", {}).get("nodeSelector"))
            node_keys |= selector_keys((obj.get("status") or {}).get("allocation"))
    pv_keys = set(ZONE_LABELS)
    for obj in objects.get("PersistentVolume", ()):
        node_keys |= selector_keys((obj.get("spec") or {}).get("nodeAffinity"))
        if set(obj["metadata"].get("labels") or {}) & ZONE_LABELS:
            node_keys |= ZONE_LABELS
    for obj in objects.get("StorageClass", ()):
        node_keys |= selector_keys(obj.get("allowedTopologies"))
        node_keys |= {
            str(e.get("key"))
            for t in obj.get("allowedTopologies") or ()
            for e in (t.get("matchLabelExpressions") or ())
        }
    for obj in objects.get("CSIStorageCapacity", ()):
        node_keys |= selector_keys(obj.get("nodeTopology"))
    for obj in objects.get("PersistentVolumeClaim", ()):
        pv_keys |= selector_keys((obj.get("spec") or {}).get("selector"))
    for kind, items in objects.items():
        for obj in items:
            fix = _FIXES.get(kind)
            if fix is not None:  # first: it reads the namespace before it is renamed
                fix(obj, names)
            needed = {
                "Node": node_keys,
                "PersistentVolume": pv_keys,
                "Namespace": namespace_keys,
            }.get(kind, pod_keys)
            _metadata(obj, names, needed)
            if kind in _GROUP_KINDS or kind == "ResourceClaim":
                _forget_messages(obj.get("status") or {})
    snap.left_out = [_rename_label(line, names) for line in snap.left_out]


def _kept_key(key: str, needed: set[str]) -> bool:
    return key in needed or key in _MEMBER_LABELS or key.startswith(SCHEDULER_PREFIXES)


def _metadata(obj: Obj, names: _Names, needed: set[str]) -> None:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    if ns is not None:
        meta["name"] = names.name(ns, meta["name"])
        meta["namespace"] = names.ns(ns)
        for owner in meta.get("ownerReferences") or ():
            owner["name"] = names.name(ns, owner["name"])
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if _kept_key(k, needed)}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(SCHEDULER_PREFIXES) or k in _MEMBER_ANNOTATIONS or k in STORAGE_ANNOTATIONS
    }
    if SELECTED_NODE in annotations:
        annotations[SELECTED_NODE] = names.node(annotations[SELECTED_NODE])
    if ns is not None:
        for field in MEMBER_FIELDS:
            held = {"label": labels, "annotation": annotations}.get(field.place)
            if held is not None and held.get(field.key):
                held[field.key] = names.name(ns, held[field.key])
    if HOSTNAME in labels:
        labels[HOSTNAME] = names.node(labels[HOSTNAME])
    if NAMESPACE_NAME in labels:
        labels[NAMESPACE_NAME] = names.ns(labels[NAMESPACE_NAME])
    for key, value in (("labels", labels), ("annotations", annotations)):
        if value:
            meta[key] = value
        else:
            meta.pop(key, None)


def _pod(pod: Obj, names: _Names) -> None:
    ns = pod["metadata"]["namespace"]
    volumes = pod_volumes(pod, names)
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k in _KEPT_SPEC}
    pod["spec"] = spec
    for kind in ("containers", "initContainers"):
        spec_containers = spec.get(kind)
        if spec_containers:
            prefix = "c" if kind == "containers" else "init"
            spec[kind] = [
                {"name": f"{prefix}{i}", "image": "image", **{k: c[k] for k in CONTAINER if k in c}}
                for i, c in enumerate(spec_containers)
            ]
    if spec.get("nodeName"):
        spec["nodeName"] = names.node(spec["nodeName"])
    selector = spec.get("nodeSelector") or {}
    if HOSTNAME in selector:
        selector[HOSTNAME] = names.node(selector[HOSTNAME])
    node_terms((spec.get("affinity") or {}).get("nodeAffinity"), names.node)
    for field in MEMBER_FIELDS:
        if field.place == "spec":
            *path, last = field.key.split(".")
            where: Any = spec
            for part in path:
                where = where.get(part) if isinstance(where, dict) else None
            if isinstance(where, dict) and where.get(last):
                where[last] = names.name(ns, where[last])
    for kind in ("podAffinity", "podAntiAffinity"):
        for term in walk((spec.get("affinity") or {}).get(kind)):
            _affinity_namespaces(term, names)
    for c in spec.get("resourceClaims") or ():
        for key in ("resourceClaimName", "resourceClaimTemplateName"):
            if c.get(key):
                c[key] = names.name(ns, c[key])
    if volumes:
        spec["volumes"] = volumes
    status = pod.get("status") or {}
    if status.get("nominatedNodeName"):
        status["nominatedNodeName"] = names.node(status["nominatedNodeName"])
    for c in status.get("resourceClaimStatuses") or ():
        if c.get("resourceClaimName"):
            c["resourceClaimName"] = names.name(ns, c["resourceClaimName"])
    _forget_messages(status)


def _node(node: Obj, names: _Names) -> None:
    node["metadata"]["name"] = names.node(node["metadata"]["name"])
    spec = node.get("spec") or {}
    node["spec"] = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
    _forget_messages(node.get("status") or {})


def _affinity_namespaces(term: Mapping[str, Any], names: _Names) -> None:
    """Rename the namespaces a pod affinity term names: its ``namespaces`` and the
    ``kubernetes.io/metadata.name`` values its namespace selector matches."""
    if isinstance(term, dict) and isinstance(term.get("namespaces"), list):
        term["namespaces"] = [names.ns(str(n)) for n in term["namespaces"]]
    for m in walk(term.get("namespaceSelector")):
        if not isinstance(m, dict):
            continue
        if m.get("key") == NAMESPACE_NAME and isinstance(m.get("values"), list):
            m["values"] = [names.ns(str(v)) for v in m["values"]]
        labels = m.get("matchLabels")
        if isinstance(labels, dict) and NAMESPACE_NAME in labels:
            labels[NAMESPACE_NAME] = names.ns(str(labels[NAMESPACE_NAME]))


def _namespace(obj: Obj, names: _Names) -> None:
    obj["metadata"]["name"] = names.ns(obj["metadata"]["name"])
    obj.pop("spec", None)
    phase = (obj.get("status") or {}).get("phase")
    if phase:
        obj["status"] = {"phase": phase}


def _selecting(obj: Obj, names: _Names) -> None:
    selector = (obj.get("spec") or {}).get("selector")
    obj["spec"] = {"selector": selector} if selector else {}
    obj.pop("status", None)


def _slice(obj: Obj, names: _Names) -> None:
    obj["metadata"]["name"] = names.slices.get(obj["metadata"]["name"], obj["metadata"]["name"])
    spec = obj.get("spec") or {}
    if spec.get("nodeName"):
        spec["nodeName"] = names.node(spec["nodeName"])
    pool = spec.get("pool") or {}
    if pool.get("name") in names.nodes:
        pool["name"] = names.node(pool["name"])
    node_terms(spec.get("nodeSelector"), names.node)


def _claim(obj: Obj, names: _Names) -> None:
    ns = obj["metadata"]["namespace"]
    allocation = (obj.get("status") or {}).get("allocation") or {}
    for r in (allocation.get("devices") or {}).get("results") or ():
        if r.get("pool") in names.nodes:
            r["pool"] = names.node(r["pool"])
    node_terms(allocation.get("nodeSelector"), names.node)
    for c in (obj.get("status") or {}).get("reservedFor") or ():
        if c.get("name"):
            c["name"] = names.name(ns, c["name"])


def _kubernetes_group(obj: Obj, names: _Names) -> None:
    ns = obj["metadata"]["namespace"]
    workload = ((obj.get("spec") or {}).get("podGroupTemplateRef") or {}).get("workload") or {}
    if workload.get("workloadName"):
        workload["workloadName"] = names.name(ns, workload["workloadName"])


def _workload(obj: Obj, names: _Names) -> None:
    ref = (obj.get("spec") or {}).get("controllerRef") or {}
    if ref.get("name"):
        ref["name"] = names.name(obj["metadata"]["namespace"], ref["name"])


def _forget_messages(status: Mapping[str, Any]) -> None:
    for c in status.get("conditions") or ():
        if isinstance(c, dict):
            c.pop("message", None)


def _rename_label(line: str, names: _Names) -> str:
    """``Kind ns/name: why`` with the namespace and name renamed (the reason is dropped:
    it names other objects)."""
    head, _, _ = line.partition(": ")
    kind, _, key = head.partition(" ")
    ns, _, name = key.partition("/")
    return f"{kind} {names.ns(ns)}/{names.name(ns, name)}" if name else f"{kind} {key}"


_GROUP_KINDS = frozenset(api.pod_group_key for api in APIS)
_FIXES: dict[str, Callable[[Obj, _Names], None]] = {
    "Pod": _pod,
    "Node": _node,
    "Namespace": _namespace,
    **dict.fromkeys(SELECTING_KINDS, _selecting),
    "ResourceSlice": _slice,
    "ResourceClaim": _claim,
    "PersistentVolumeClaim": volume_claim,
    "PersistentVolume": volume,
    "StorageClass": storage_class,
    "CSINode": csi_node,
    "CSIStorageCapacity": capacity,
    KUBERNETES.pod_group_key: _kubernetes_group,
    f"Workload.{KUBERNETES.group}": _workload,
}
