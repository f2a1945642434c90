"""Decoding what the API server sends, only as far as the scheduler reads it (layer 4).

Job: turn the bytes of a list page or a watch line into the plain dicts the cache reads,
fast. Pods and Nodes are most of the bytes (a SchedulingBasic cluster: 11,000 pods are
38 MB of JSON, 5,000 nodes 15 MB; a restart of 130,000 running pods, 560 MB), and most
of a pod is what no scheduler reads: ``metadata.managedFields`` (server-side apply's
field ownership), its containers' images, commands, environment, mounts and probes, its
containers' statuses and addresses; of a node, its images, addresses and system
information. For those two kinds the decoder is typed (msgspec TypedDicts, straight into
dicts): every field of ``ObjectMeta`` but ``managedFields``, every field of
``PodSpec`` (v1.36) with each container trimmed to its name, resources, ports and
restart policy, the pod status's phase, conditions, times and claims, the node status's
resources, phase and conditions; the rest is skipped without building a Python object.
Every other kind is decoded whole (untyped), as ``json.loads`` would.

Contracts: :func:`decode_list` and :func:`decode_event` return what ``json.loads`` would
return for the same bytes, minus what the typed decoders skip (fields no part of
Sluice reads: a new reader of a pod's or node's field adds it here; the embedded
cluster's objects keep everything, and tests compare the two backends' caches); fields a
server leaves out stay absent. An object of a shape the API server would refuse (a
container that is not an object) is decoded as before, whole but for its metadata's
``managedFields``, so that the cache names what is wrong with it. Malformed JSON raises
:class:`~scheduler.api.errors.ServerError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypedDict

import msgspec

from scheduler.api.errors import ServerError

__all__ = ["decode_event", "decode_list", "list_continue"]


class _LenientMeta(msgspec.Struct, omit_defaults=True):
    """``ObjectMeta`` without ``managedFields``, for a list :func:`decode_list` cannot
    read typed (an object of a shape the API server refuses)."""

    name: Any = msgspec.UNSET
    generateName: Any = msgspec.UNSET
    namespace: Any = msgspec.UNSET
    selfLink: Any = msgspec.UNSET
    uid: Any = msgspec.UNSET
    resourceVersion: Any = msgspec.UNSET
    generation: Any = msgspec.UNSET
    creationTimestamp: Any = msgspec.UNSET
    deletionTimestamp: Any = msgspec.UNSET
    deletionGracePeriodSeconds: Any = msgspec.UNSET
    labels: Any = msgspec.UNSET
    annotations: Any = msgspec.UNSET
    ownerReferences: Any = msgspec.UNSET
    finalizers: Any = msgspec.UNSET


class _LenientObject(msgspec.Struct, omit_defaults=True):
    apiVersion: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    metadata: _LenientMeta | None = None
    spec: Any = msgspec.UNSET
    status: Any = msgspec.UNSET


class _LenientList(msgspec.Struct):
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    items: list[_LenientObject] | None = None


_OBJECT_FIELDS: Final = ("apiVersion", "kind", "spec", "status")


class _Meta(TypedDict, total=False):
    """``ObjectMeta`` without ``managedFields`` (k8s.io/apimachinery, v1.36)."""

    name: Any
    generateName: Any
    namespace: Any
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class _Container(TypedDict, total=False):
    """What the scheduler reads of a container: its name, its resources, its ports (host
    ports), its restart policy (a sidecar's). Not its image, command, environment,
    mounts, probes... (most of a real container's bytes)."""

    name: Any
    resources: Any
    ports: Any
    restartPolicy: Any


class _PodSpec(TypedDict, total=False):
    """Every field of ``PodSpec`` (k8s.io/api/core/v1, v1.36), its containers trimmed."""

    volumes: Any
    initContainers: list[_Container]
    containers: list[_Container]
    ephemeralContainers: list[_Container]
    restartPolicy: Any
    terminationGracePeriodSeconds: Any
    activeDeadlineSeconds: Any
    dnsPolicy: Any
    nodeSelector: Any
    serviceAccountName: Any
    serviceAccount: Any
    automountServiceAccountToken: Any
    nodeName: Any
    hostNetwork: Any
    hostPID: Any
    hostIPC: Any
    shareProcessNamespace: Any
    securityContext: Any
    imagePullSecrets: Any
    hostname: Any
    subdomain: Any
    affinity: Any
    schedulerName: Any
    tolerations: Any
    hostAliases: Any
    priorityClassName: Any
    priority: Any
    dnsConfig: Any
    readinessGates: Any
    runtimeClassName: Any
    enableServiceLinks: Any
    preemptionPolicy: Any
    overhead: Any
    topologySpreadConstraints: Any
    setHostnameAsFQDN: Any
    os: Any
    hostUsers: Any
    schedulingGates: Any
    resourceClaims: Any
    resources: Any
    hostnameOverride: Any
    schedulingGroup: Any
    evictionResponders: Any


class _PodStatus(TypedDict, total=False):
    """What the scheduler reads of a pod's status; not the containers' statuses nor the
    addresses (most of a running pod's status)."""

    observedGeneration: Any
    phase: Any
    conditions: Any
    message: Any
    reason: Any
    nominatedNodeName: Any
    startTime: Any
    qosClass: Any
    resize: Any
    resourceClaimStatuses: Any
    extendedResourceClaimStatus: Any
    allocatedResources: Any
    resources: Any


class _Pod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _NodeStatus(TypedDict, total=False):
    """What the scheduler reads of a node's status: its resources, phase and conditions;
    not its images, addresses, system info or volumes (most of a kubelet's status)."""

    capacity: Any
    allocatable: Any
    phase: Any
    conditions: Any
    config: Any
    features: Any
    declaredFeatures: Any


class _Node(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _Meta
    spec: Any
    status: _NodeStatus


class _PodList(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[_Pod] | None


class _NodeList(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[_Node] | None


class _PodEvent(TypedDict, total=False):
    type: Any
    object: _Pod | None


class _NodeEvent(TypedDict, total=False):
    type: Any
    object: _Node | None


_untyped = msgspec.json.Decoder()
_lenient_list = msgspec.json.Decoder(_LenientList)
_LISTS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "Pod": msgspec.json.Decoder(_PodList),
    "Node": msgspec.json.Decoder(_NodeList),
}
_EVENTS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "Pod": msgspec.json.Decoder(_PodEvent),
    "Node": msgspec.json.Decoder(_NodeEvent),
}


def _lenient(obj: _LenientObject) -> dict[str, Any]:
    """The dict ``json.loads`` would have made of ``obj`` (its managedFields aside)."""
    out: dict[str, Any] = {}
    for name in _OBJECT_FIELDS:
        value = getattr(obj, name)
        if value is not msgspec.UNSET:
            out[name] = value
    meta = obj.metadata
    if meta is not None:
        out["metadata"] = {
            name: value
            for name in _Meta.__annotations__
            if (value := getattr(meta, name, msgspec.UNSET)) is not msgspec.UNSET
        }
    return out


def _decode(decode: Callable[[bytes], Any], data: bytes, what: str, kind: str) -> Any:
    try:
        return decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ServerError(f"malformed {what} of {kind or 'objects'}: {exc}", kind=kind) from exc


def decode_list(data: bytes, kind: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The items (dicts) and the list's ``metadata`` of one list reply of ``kind``."""
    typed = _LISTS.get(kind)
    if typed is not None:
        try:
            doc = typed.decode(data)
            return list(doc.get("items") or ()), doc.get("metadata") or {}
        except msgspec.ValidationError:  # an object of a shape the API server refuses:
            lenient = _decode(_lenient_list.decode, data, "list", kind)  # its reader says so
            return [_lenient(o) for o in lenient.items or ()], lenient.metadata
        except msgspec.DecodeError as exc:
            raise ServerError(f"malformed list of {kind}: {exc}", kind=kind) from exc
    raw = _decode(_untyped.decode, data, "list", kind)
    if not isinstance(raw, dict):
        raise ServerError(f"a list of {kind} is not a JSON object", kind=kind)
    items = [i for i in raw.get("items") or () if isinstance(i, dict)]
    meta = raw.get("metadata")
    return items, meta if isinstance(meta, dict) else {}


def decode_event(data: bytes, kind: str) -> dict[str, Any]:
    """One watch line of ``kind``: ``{"type": ..., "object": {...}}``. An ``ERROR`` (a
    ``Status``) is decoded whole whatever the kind, and so is an object of a shape the
    API server would refuse (its reader names what is wrong)."""
    typed = _EVENTS.get(kind)
    if typed is not None:
        try:
            event = typed.decode(data)
        except msgspec.ValidationError:
            event = {"type": "ERROR"}  # decoded whole below
        except msgspec.DecodeError as exc:
            raise ServerError(f"malformed watch event of {kind}: {exc}", kind=kind) from exc
        if event.get("type") != "ERROR":
            return {"type": event.get("type"), "object": event.get("object")}
    value = _decode(_untyped.decode, data, "watch event", kind)
    if not isinstance(value, dict):
        raise ServerError(f"a watch line is not a JSON object: {data[:200]!r}", kind=kind)
    return value


def list_continue(data: bytes) -> str | None:
    """The ``continue`` token of a list reply read from its first bytes, without decoding
    the rest (so that the next page can be asked for while this one is decoded); None
    when it cannot be read there (then decode the page to know)."""
    head = data[:2048]
    start = head.find(b'"metadata":{')
    if start < 0:
        return None
    end = head.find(b"}", start)
    if end < 0:
        return None
    try:
        meta = _untyped.decode(head[start + 11 : end + 1])
    except msgspec.DecodeError:
        return None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return str(token or "")
