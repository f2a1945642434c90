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
