"""A cluster's objects as a scenario: what ``sluice snapshot`` writes (layer 4, sim).

:func:`scenario_of` turns what the scheduler reads from a cluster (listed by
:func:`scheduler.kube.listing.list_view`) into the documents of a scenario that ``sluice
simulate`` replays on the embedded cluster, so that an operator can ask what another
configuration, more nodes or a change of weights would have decided:

* every object keeps what the scheduler reads: its spec (pods: with their status'
  ``phase``, ``conditions``, ``startTime``, ``nominatedNodeName`` and
  ``resourceClaimStatuses``; nodes: ``capacity``, ``allocatable`` and ``conditions``; the
  PodGroups', Queues' and ResourceClaims' status as they are), and its identity
  (``uid``, ``creationTimestamp``, which the replay keeps: jobs are ordered by creation,
  DRA claims name their pods by uid). ``resourceVersion``, ``managedFields``,
  ``generation`` and kubectl's ``last-applied-configuration`` go;
* a pod being deleted keeps its ``deletionTimestamp``, with what is left of its grace
  period as ``deletionGracePeriodSeconds`` (at least 1 s): the replay's kubelet removes it
  then;
* objects a scenario cannot hold (the scenario loader refuses them, where a running
  scheduler only leaves them pending) are left out and named in
  :attr:`Snapshot.left_out`: a pod on a node that does not exist, a pod naming a PodGroup
  or a Queue that does not exist, a PodGroup naming a Queue that does not exist.

``anonymize`` (:func:`anonymize`) renames what identifies the workloads and the
machines and drops what the scheduler does not read; see its docstring.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.api import labels as L
from scheduler.api.group_apis import APIS, api_named, kind_key
from scheduler.api.group_apis.table import BY_GROUP_KIND
from scheduler.api.membership import VOLCANO_QUEUE_ANNOTATION, pod_group_ref
from scheduler.sim.api_conventions import parse_rfc3339, rfc3339
from scheduler.sim.devices import DEVICES_ANNOTATION
from scheduler.sim.scenario import (
    ARRIVAL_ANNOTATION,
    DEPARTURE_ANNOTATION,
    OBJECT_KINDS,
    SIMULATION_KIND,
    UNGATE_ANNOTATION,
)

Obj = dict[str, Any]

KEPT_METADATA = (
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "finalizers",
)
"""What of ``metadata`` a snapshot keeps (the rest is the API server's bookkeeping)."""

DROPPED_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    DEVICES_ANNOTATION,
    ARRIVAL_ANNOTATION,
    DEPARTURE_ANNOTATION,
    UNGATE_ANNOTATION,
)
"""kubectl's copy of the object; what a scenario served by ``sluice simulate --serve`` had
its objects do (make a node's ResourceSlices, which the snapshot holds; arrive, leave and
be ungated at times that have passed)."""

POD_STATUS = ("phase", "conditions", "startTime", "nominatedNodeName", "resourceClaimStatuses")
"""What of a pod's status the scheduler reads."""

NODE_STATUS = ("capacity", "allocatable", "conditions")
"""What of a node's status the scheduler reads."""


@dataclass
class Snapshot:
    """The scenario's objects by kind key, in the order a scenario creates them, and what
    was left out (``Kind ns/name: why``)."""

    objects: dict[str, list[Obj]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    taken: float = 0.0
    """When it was taken (Unix time): the replay's virtual clock starts there."""

    def documents(self) -> Iterator[Obj]:
        """A Simulation document starting the replay's clock when the snapshot was taken,
        then one ``List`` per kind, in :data:`~scheduler.sim.scenario.OBJECT_KINDS` order."""
        yield {
            "apiVersion": L.API_VERSION,
            "kind": SIMULATION_KIND,
            "start": rfc3339(self.taken),
        }
        for kind in OBJECT_KINDS:
            items = self.objects.get(kind)
            if items:
                yield {"apiVersion": "v1", "kind": "List", "items": items}


def scenario_of(listed: Mapping[str, Iterable[Mapping[str, Any]]], taken: float) -> Snapshot:
    """The scenario of ``listed`` (objects by kind key, each with its ``apiVersion`` and
    ``kind``) as it stood at ``taken`` (Unix time)."""
    out = Snapshot(taken=taken)
    for kind in OBJECT_KINDS:
        items = sorted((_clean(o, taken) for o in listed.get(kind, ())), key=_sort_key)
        if items:
            out.objects[kind] = items
    _leave_out_dangling(out)
    return out


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (str(meta.get("namespace", "")), str(meta["name"]))


def _clean(obj: Mapping[str, Any], taken: float) -> Obj:
    meta = obj.get("metadata") or {}
    kept = {k: copy.deepcopy(meta[k]) for k in KEPT_METADATA if meta.get(k) not in (None, {}, [])}
    annotations = kept.get("annotations")
    if annotations:
        for key in DROPPED_ANNOTATIONS:
            annotations.pop(key, None)
        if not annotations:
            del kept["annotations"]
    out: Obj = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}
    out.update(
        (k, copy.deepcopy(v)) for k, v in obj.items() if k not in ("metadata", "status", *out)
    )
    status = obj.get("status")
    kind = str(obj.get("kind"))
    if isinstance(status, Mapping):
        if kind == "Pod":
            status = {k: status[k] for k in POD_STATUS if k in status}
        elif kind == "Node":
            status = {k: status[k] for k in NODE_STATUS if k in status}
        if status:
            out["status"] = copy.deepcopy(dict(status))
    if kind == "Pod" and kept.get("deletionTimestamp"):
        left = parse_rfc3339(str(kept["deletionTimestamp"])) - taken
        kept["deletionGracePeriodSeconds"] = max(1, math.ceil(left))
    return out


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _leave_out_dangling(snap: Snapshot) -> None:
    """Leave out the objects whose references a scenario must resolve and cannot."""
    objects = snap.objects
    nodes = {o["metadata"]["name"] for o in objects.get("Node", ())}
    queues = {L.DEFAULT_QUEUE} | {
        o["metadata"]["name"]
        for api in APIS
        if api.queue_kind
        for o in objects.get(api.queue_key, ())
    }
    groups = {kind: {_name(o) for o in objects.get(kind, ())} for kind in _GROUP_KINDS}

    def keep_group(pg: Obj) -> str:
        group_api = BY_GROUP_KIND[kind_key(pg["apiVersion"], pg["kind"])]
        queue = group_api.queue_of(pg)
        if group_api.api.queue_kind and queue not in queues:
            return f"its queue {queue!r} does not exist"
        return ""

    def keep_pod(pod: Obj) -> str:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        node = spec.get("nodeName")
        if node and node not in nodes:
            return f"it is bound to node {node!r}, which does not exist"
        ref = pod_group_ref(pod)
        if ref is not None:
            name = f"{meta['namespace']}/{ref.name}"
            fallback = ref.api.falls_back_to
            found = name in groups[ref.api.pod_group_key] or bool(
                fallback and name in groups[api_named(fallback).pod_group_key]
            )
            if not found:
                return f"it names PodGroup {ref.name!r} ({ref.field}), which does not exist"
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        for queue in (labels.get(L.QUEUE_LABEL), annotations.get(VOLCANO_QUEUE_ANNOTATION)):
            if queue and queue not in queues:
                return f"it names queue {queue!r}, which does not exist"
        return ""

    for kind in _GROUP_KINDS:
        objects[kind] = _kept(snap, kind, objects.get(kind, []), keep_group)
        groups[kind] = {_name(o) for o in objects[kind]}
    objects["Pod"] = _kept(snap, "Pod", objects.get("Pod", []), keep_pod)
    for kind in [k for k, v in objects.items() if not v]:
        del objects[kind]


_GROUP_KINDS = tuple(api.pod_group_key for api in APIS)


def _kept(snap: Snapshot, kind: str, items: list[Obj], why_not: Any) -> list[Obj]:
    kept: list[Obj] = []
    for obj in items:
        problem = why_not(obj)
        if problem:
            snap.left_out.append(f"{obj['kind']} {_name(obj)}: {problem}")
        else:
            kept.append(obj)
    return kept
