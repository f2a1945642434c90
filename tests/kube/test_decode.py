"""scheduler/kube/decode.py: what the API server sends, decoded as ``json.loads`` would,
without the managedFields of pods and nodes."""

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
        pytest.param("Pod", POD, without_managed(POD), id="pod: all but managedFields"),
        pytest.param("Node", NODE, without_managed(NODE), id="node: all but managedFields"),
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
