"""scheduler/kube/decode.py: what the API server sends, decoded as ``json.loads`` would,
without what no scheduler reads of pods and nodes (managedFields, container images,
statuses, addresses...)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.api.errors import ServerError
from scheduler.kube.decode import decode_event, decode_list, list_continue
from tests.builders import node, pod

Obj = dict[str, Any]
MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]


def served(obj: Obj) -> Obj:
    """``obj`` as the API server sends it: managedFields, and every ObjectMeta field."""
    out = json.loads(json.dumps(obj))
    meta = out["metadata"]
    meta.update(
        uid="u1",
        resourceVersion="7",
        generation=1,
        creationTimestamp="2026-11-26T00:00:00Z",
        ownerReferences=[{"kind": "Job", "name": "j", "uid": "j1", "controller": True}],
        finalizers=["f"],
        generateName="p-",
        managedFields=MANAGED,
    )
    return out


def without_managed(obj: Obj) -> Obj:
    out = json.loads(json.dumps(obj))
    out["metadata"].pop("managedFields", None)
    return out


POD = served(pod("p", node="n1", labels={"a": "b"}, annotations={"c": "d"}))
NODE = served(node("n1"))
CONTAINER_READ = {"name", "resources", "ports", "restartPolicy"}
POD_STATUS_READ = {"phase", "conditions", "startTime", "nominatedNodeName", "message", "reason"}


def kubelet_pod() -> Obj:
    """A running pod as a kubelet leaves it: a container with an image, a command, an
    environment and probes, its status, the pod's addresses."""
    obj = served(pod("k", node="n1"))
    obj["spec"]["containers"][0].update(
        image="registry.example.com/app:v1",
        command=["/app"],
        env=[{"name": "A", "value": "1"}],
        ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
        livenessProbe={"httpGet": {"path": "/", "port": 80}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]
    obj["spec"]["dnsPolicy"] = "ClusterFirst"
    obj["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t"}],
        "startTime": "2026-11-26T00:00:00Z",
        "podIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
        "containerStatuses": [{"name": "main", "ready": True, "image": "x"}],
    }
    return obj


def kubelet_node() -> Obj:
    obj = served(node("k"))
    obj["spec"]["taints"] = [{"key": "a", "effect": "NoSchedule"}]
    obj["status"].update(
        images=[{"names": ["x"], "sizeBytes": 1}],
        addresses=[{"type": "InternalIP", "address": "10.0.0.1"}],
        nodeInfo={"kubeletVersion": "v1.36.2"},
        daemonEndpoints={"kubeletEndpoint": {"Port": 10250}},
    )
    return obj


def trimmed(obj: Obj) -> Obj:
    """``obj`` as the typed decoder keeps it: no managedFields; a pod's containers and
    status, a node's status, trimmed to what the scheduler reads."""
    out = without_managed(obj)
    if out["kind"] == "Pod":
        for c in out["spec"].get("containers", []):
            for key in set(c) - CONTAINER_READ:
                del c[key]
        for key in set(out.get("status", {})) - POD_STATUS_READ:
            del out["status"][key]
    else:
        for key in set(out.get("status", {})) - {"capacity", "allocatable", "conditions"}:
            del out["status"][key]
    return out


QUEUE = served(
    {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"weight": 2},
    }
)


@pytest.mark.parametrize(
    ("kind", "obj", "expected"),
    [
        pytest.param("Pod", POD, trimmed(POD), id="pod: what is read"),
        pytest.param("Node", NODE, trimmed(NODE), id="node: what is read"),
        pytest.param("Pod", kubelet_pod(), trimmed(kubelet_pod()), id="running pod"),
        pytest.param("Node", kubelet_node(), trimmed(kubelet_node()), id="kubelet's node"),
        pytest.param("Queue", QUEUE, QUEUE, id="other kinds: whole"),
    ],
)
def test_lists_and_events_decode_as_json_loads_would(kind: str, obj: Obj, expected: Obj) -> None:
    page = {
        "kind": f"{kind}List",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9", "continue": "tok"},
        "items": [obj],
    }
    items, meta = decode_list(json.dumps(page, separators=(",", ":")).encode(), kind)
    assert items == [expected]
    assert meta == {"resourceVersion": "9", "continue": "tok"}
    line = json.dumps({"type": "MODIFIED", "object": obj}).encode()
    assert decode_event(line, kind) == {"type": "MODIFIED", "object": expected}


def test_what_the_typed_decoder_skips() -> None:
    """The bytes no scheduler reads are left out (the point of the typed decoder)."""
    page = {"metadata": {}, "items": [kubelet_pod()]}
    [item], _ = decode_list(json.dumps(page).encode(), "Pod")
    assert item["spec"]["containers"][0] == {
        "name": "main",
        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
        "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
    }
    assert "containerStatuses" not in item["status"] and "podIP" not in item["status"]
    assert item["spec"]["volumes"] == kubelet_pod()["spec"]["volumes"]  # spec: all of it
    assert "managedFields" not in item["metadata"]


def test_an_object_the_api_server_would_refuse_is_decoded_whole() -> None:
    """A container that is not an object fails the typed decoder: the page is decoded as
    before (whole but for managedFields), so the cache sets that one pod aside with its
    reason and takes the others."""
    bad = served(pod("bad"))
    bad["spec"]["containers"] = ["not a container"]
    page = {"metadata": {"resourceVersion": "3"}, "items": [POD, bad]}
    items, meta = decode_list(json.dumps(page).encode(), "Pod")
    assert items == [without_managed(POD), without_managed(bad)] and meta["resourceVersion"] == "3"
    line = json.dumps({"type": "ADDED", "object": bad}).encode()
    assert decode_event(line, "Pod")["object"]["spec"]["containers"] == ["not a container"]


def test_an_error_event_is_decoded_whole() -> None:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version",
        "reason": "Expired",
        "code": 410,
    }
    line = json.dumps({"type": "ERROR", "object": status}).encode()
    assert decode_event(line, "Pod") == {"type": "ERROR", "object": status}


def test_a_bookmark_keeps_its_resource_version() -> None:
    meta = {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}
    line = json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": meta}}).encode()
    event = decode_event(line, "Pod")
    assert event["object"]["metadata"]["resourceVersion"] == "12"


@pytest.mark.parametrize("kind", ["Pod", "Queue"])
@pytest.mark.parametrize("data", [b'{"items": [', b"[1, 2]", b"not json"])
def test_malformed_input_is_a_server_error(kind: str, data: bytes) -> None:
    with pytest.raises(ServerError):
        decode_list(data, kind)


@pytest.mark.parametrize(
    ("head", "token"),
    [
        pytest.param(
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5",'
            b'"continue":"abc"},"items":[',
            "abc",
            id="a next page",
        ),
        pytest.param(
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[',
            "",
            id="the last page",
        ),
        pytest.param(
            b'{"kind":"PodList","items":[' + b"x" * 3000, None, id="not at the start: unknown"
        ),
    ],
)
def test_the_continue_token_is_read_from_the_first_bytes(head: bytes, token: str | None) -> None:
    assert list_continue(head) == token


# What the branches landing after the typed decoder read of pods and nodes (issue 36:
# volumes; issue 37: placement), each set on a kubelet-like object: it must survive decode.
# A new reader of a pod's or node's field adds its row here (and to the decoder).
_SPREAD = {
    "maxSkew": 1,
    "topologyKey": "zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "a"}},
    "matchLabelKeys": ["pod-template-hash"],
    "minDomains": 2,
    "nodeAffinityPolicy": "Honor",
    "nodeTaintsPolicy": "Ignore",
}
_AFFINITY_TERM = {
    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]},
    "namespaces": ["other"],
    "namespaceSelector": {"matchLabels": {"team": "t"}},
    "topologyKey": "kubernetes.io/hostname",
    "matchLabelKeys": ["pod-template-hash"],
    "mismatchLabelKeys": ["tenant"],
}
_VOLUMES = [
    {"name": "c", "persistentVolumeClaim": {"claimName": "claim", "readOnly": True}},
    {
        "name": "e",
        "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "accessModes": ["ReadWriteOncePod"],
                    "storageClassName": "fast",
                    "volumeMode": "Filesystem",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        },
    },
    {"name": "i", "csi": {"driver": "ebs.csi.aws.com", "readOnly": False}},
    {"name": "g", "gcePersistentDisk": {"pdName": "disk", "readOnly": True}},
    {"name": "a", "awsElasticBlockStore": {"volumeID": "vol-1"}},
    {"name": "r", "rbd": {"monitors": ["m1"], "pool": "p", "image": "img"}},
    {"name": "s", "iscsi": {"iqn": "iqn.x", "targetPortal": "t:3260", "lun": 0}},
    {"name": "h", "hostPath": {"path": "/data", "type": "Directory"}},
]
FIELDS_READ_ELSEWHERE = [
    ("volumes", "Pod", ("spec", "volumes"), _VOLUMES),
    ("volumes", "Pod", ("status", "phase"), "Running"),
    ("volumes", "Pod", ("metadata", "deletionTimestamp"), "2026-11-26T01:00:00Z"),
    ("volumes", "Node", ("metadata", "labels"), {"topology.kubernetes.io/zone": "z1"}),
    ("volumes", "Node", ("status", "allocatable"), {"attachable-volumes-aws-ebs": "25"}),
    ("placement", "Pod", ("spec", "topologySpreadConstraints"), [_SPREAD]),
    (
        "placement",
        "Pod",
        ("spec", "affinity"),
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_AFFINITY_TERM],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": _AFFINITY_TERM}
                ],
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": _AFFINITY_TERM}
                ],
            },
        },
    ),
    (
        "placement",
        "Pod",
        ("spec", "resources"),
        {"requests": {"cpu": "2", "hugepages-2Mi": "4Mi"}, "limits": {"memory": "1Gi"}},
    ),
    ("placement", "Pod", ("spec", "overhead"), {"cpu": "250m"}),
    (
        "placement",
        "Pod",
        ("spec", "initContainers"),
        [{"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}],
    ),
    ("placement", "Pod", ("metadata", "labels"), {"app": "a", "pod-template-hash": "h"}),
    (
        "placement",
        "Pod",
        ("metadata", "ownerReferences"),
        [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "r1",
                "controller": True,
            }
        ],
    ),
    ("placement", "Node", ("metadata", "labels"), {"zone": "z1", "kubernetes.io/hostname": "k"}),
    (
        "placement",
        "Node",
        ("spec", "taints"),
        [{"key": "a", "value": "b", "effect": "NoExecute", "timeAdded": "2026-11-26T00:00:00Z"}],
    ),
    ("placement", "Node", ("spec", "unschedulable"), True),
    ("placement", "Node", ("status", "capacity"), {"cpu": "8", "pods": "110"}),
]


def _with(obj: Obj, path: tuple[str, ...], value: Any) -> Obj:
    out = json.loads(json.dumps(obj))
    where = out
    for key in path[:-1]:
        where = where.setdefault(key, {})
    where[path[-1]] = value
    return out


def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        pytest.param(kind, path, value, id=f"{branch}: {kind} {'.'.join(path)}")
        for branch, kind, path, value in FIELDS_READ_ELSEWHERE
    ],
)
def test_what_volumes_and_placement_read_survives_decode(
    kind: str, path: tuple[str, ...], value: Any
) -> None:
    obj = _with(kubelet_pod() if kind == "Pod" else kubelet_node(), path, value)
    [item], _ = decode_list(json.dumps({"metadata": {}, "items": [obj]}).encode(), kind)
    assert _at(item, path) == value
    event = decode_event(json.dumps({"type": "ADDED", "object": obj}).encode(), kind)
    assert _at(event["object"], path) == value


# The kinds those branches list and watch: the decoder knows none, so each is decoded whole.
OTHER_KINDS = [
    (
        "PersistentVolumeClaim",
        {
            "spec": {"volumeName": "pv", "storageClassName": "fast", "accessModes": ["RWO"]},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
        },
    ),
    (
        "PersistentVolume",
        {
            "spec": {
                "claimRef": {"namespace": "d", "name": "c", "uid": "u"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": []}]}},
                "csi": {"driver": "d", "volumeHandle": "h"},
                "persistentVolumeReclaimPolicy": "Delete",
            },
            "status": {"phase": "Available"},
        },
    ),
    (
        "StorageClass",
        {
            "provisioner": "p",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "z", "values": ["a"]}]}],
        },
    ),
    ("CSINode", {"spec": {"drivers": [{"name": "d", "nodeID": "n", "allocatable": {"count": 3}}]}}),
    ("CSIDriver", {"spec": {"attachRequired": True, "storageCapacity": True}}),
    (
        "CSIStorageCapacity",
        {
            "storageClassName": "fast",
            "nodeTopology": {"matchLabels": {"z": "a"}},
            "capacity": "10Gi",
            "maximumVolumeSize": "5Gi",
        },
    ),
    ("Namespace", {"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
    ("Service", {"spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}}),
    ("ReplicaSet", {"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {}}}),
    ("StatefulSet", {"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {}}}),
    ("ReplicationController", {"spec": {"selector": {"app": "a"}, "template": {}}}),
]


@pytest.mark.parametrize(("kind", "body"), [pytest.param(k, b, id=k) for k, b in OTHER_KINDS])
def test_kinds_the_decoder_does_not_know_are_decoded_whole(kind: str, body: Obj) -> None:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "labels": {"a": "b"}}}
    obj = served({**obj, **body})
    items, _ = decode_list(json.dumps({"metadata": {}, "items": [obj]}).encode(), kind)
    assert items == [obj]
    event = decode_event(json.dumps({"type": "ADDED", "object": obj}).encode(), kind)
    assert event == {"type": "ADDED", "object": obj}
