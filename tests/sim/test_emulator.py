"""The Kubernetes API emulator, driven by the real kubernetes-asyncio client over HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.sim.emulator import (
    ApiEmulator,
    JsonPatchError,
    apply_json_patch,
    parse_label_selector_string,
)
from scheduler.sim.emulator.params import int_param
from scheduler.sim.emulator.responses import HttpError
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.store import ObjectStore

pytestmark = pytest.mark.anyio

GROUP = "scheduling.sluice.dev"
VERSION = "v1alpha1"
TIMEOUT = 10  # _request_timeout of every call: nothing here may hang


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Cluster:
    store: ObjectStore
    emulator: ApiEmulator
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


@pytest.fixture
def history() -> int:
    return 100_000


@pytest.fixture
async def cluster(history: int) -> AsyncIterator[Cluster]:
    # no validator in the store: the emulator itself must validate custom objects
    store = ObjectStore(time.time, history=history)
    async with (
        ApiEmulator(store, bookmark_interval=0.2) as emulator,
        client.ApiClient(client.Configuration(host=emulator.url)) as api,
    ):
        yield Cluster(store, emulator, api)


def pod(name: str, ns: str = "default", *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"schedulerName": "sluice", "containers": [{"name": "main", "image": "x"}]},
    }


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def body_of(exc: ApiException) -> dict[str, Any]:
    data = json.loads(exc.body)
    assert data["kind"] == "Status"
    assert data["apiVersion"] == "v1"
    assert data["status"] == "Failure"
    assert data["code"] == exc.status
    return data


# --------------------------------------------------------------------------- discovery


async def test_discovery_lists_groups_resources_and_subresources(cluster: Cluster) -> None:
    versions = await client.CoreApi(cluster.api).get_api_versions(_request_timeout=TIMEOUT)
    assert versions.versions == ["v1"]
    groups = await client.ApisApi(cluster.api).get_api_versions(_request_timeout=TIMEOUT)
    names = {g.name for g in groups.groups}
    assert {GROUP, "policy", "coordination.k8s.io", "events.k8s.io", "scheduling.k8s.io"} <= names
    core = await cluster.core.get_api_resources(_request_timeout=TIMEOUT)
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].short_names == ["po"] and by_name["pods"].namespaced
    assert "watch" in by_name["pods"].verbs and by_name["pods"].categories == ["all"]
    assert by_name["pods/status"].verbs == ["get", "patch", "update"]
    assert by_name["pods/binding"].verbs == ["create"]
    assert (by_name["pods/eviction"].group, by_name["pods/eviction"].kind) == ("policy", "Eviction")
    assert not by_name["nodes"].namespaced and "nodes/status" in by_name
    version = await client.VersionApi(cluster.api).get_code(_request_timeout=TIMEOUT)
    assert version.major == "1"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{cluster.emulator.url}/apis/{GROUP}/{VERSION}") as resp:
            custom = await resp.json()
        async with http.get(f"{cluster.emulator.url}/openapi/v2") as resp:
            assert resp.status == 404
    crds = {r["name"]: r for r in custom["resources"]}
    assert crds["podgroups"]["namespaced"] and crds["podgroups"]["shortNames"] == ["pg"]
    assert not crds["queues"]["namespaced"] and crds["queues"]["kind"] == "Queue"
    assert "topologies/status" in crds


async def test_pods_get_their_priority_from_the_priority_class(cluster: Cluster) -> None:
    cluster.store.create(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        }
    )
    core = cluster.core
    created = await core.create_namespaced_pod(
        "default",
        {**pod("a"), "spec": {**pod("a")["spec"], "priorityClassName": "high"}},
        _request_timeout=TIMEOUT,
    )
    assert created.spec.priority == 1000
    plain = await core.create_namespaced_pod("default", pod("b"), _request_timeout=TIMEOUT)
    assert plain.spec.priority == 0
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod(
            "default",
            {**pod("c"), "spec": {**pod("c")["spec"], "priorityClassName": "nope"}},
            _request_timeout=TIMEOUT,
        )
    status = body_of(err.value)
    assert (err.value.status, status["reason"]) == (403, "Forbidden")
    assert status["message"] == 'pods "c" is forbidden: no PriorityClass with name nope was found'


# --------------------------------------------------------------------------- reads


async def test_create_get_and_list_pods_and_nodes(cluster: Cluster) -> None:
    core = cluster.core
    created = await core.create_node(node("n1"), _request_timeout=TIMEOUT)
    assert created.metadata.uid and created.metadata.resource_version
    await core.create_namespaced_pod(
        "default", pod("a", labels={"app": "x"}), _request_timeout=TIMEOUT
    )
    await core.create_namespaced_pod(
        "default", pod("b", labels={"app": "y"}), _request_timeout=TIMEOUT
    )
    await core.create_namespaced_pod(
        "team", pod("c", "team", labels={"app": "x"}), _request_timeout=TIMEOUT
    )

    got = await core.read_namespaced_pod("a", "default", _request_timeout=TIMEOUT)
    assert got.status.phase == "Pending" and got.spec.scheduler_name == "sluice"
    nodes = await core.list_node(_request_timeout=TIMEOUT)
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    everywhere = await core.list_pod_for_all_namespaces(_request_timeout=TIMEOUT)
    assert [p.metadata.name for p in everywhere.items] == ["a", "b", "c"]
    assert everywhere.metadata.resource_version == str(cluster.store.resource_version)
    in_default = await core.list_namespaced_pod("default", _request_timeout=TIMEOUT)
    assert [p.metadata.name for p in in_default.items] == ["a", "b"]
    selected = await core.list_pod_for_all_namespaces(
        label_selector="app in (x),app!=z", _request_timeout=TIMEOUT
    )
    assert [p.metadata.name for p in selected.items] == ["a", "c"]
    cluster.store.bind("default", "b", "n1")
    on_n1 = await core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=n1", _request_timeout=TIMEOUT
    )
    assert [p.metadata.name for p in on_n1.items] == ["b"]
    unbound = await core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=", _request_timeout=TIMEOUT
    )
    assert [p.metadata.name for p in unbound.items] == ["a", "c"]
    page = await core.list_pod_for_all_namespaces(limit=2, _request_timeout=TIMEOUT)
    assert len(page.items) == 2 and page.metadata._continue
    rest = await core.list_pod_for_all_namespaces(
        limit=2, _continue=page.metadata._continue, _request_timeout=TIMEOUT
    )
    assert [p.metadata.name for p in rest.items] == ["c"] and not rest.metadata._continue
    namespaces = await core.list_namespace(_request_timeout=TIMEOUT)
    assert {"default", "kube-system", "team"} <= {n.metadata.name for n in namespaces.items}

    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("nope", "default", _request_timeout=TIMEOUT)
    status = body_of(missing.value)
    assert (missing.value.status, status["reason"]) == (404, "NotFound")
    assert status["details"] == {"name": "nope", "kind": "pods"}
    with pytest.raises(ApiException) as duplicate:
        await core.create_namespaced_pod("default", pod("a"), _request_timeout=TIMEOUT)
    assert (duplicate.value.status, body_of(duplicate.value)["reason"]) == (409, "AlreadyExists")


# --------------------------------------------------------------------------- watch


async def test_watch_from_the_lists_resource_version_sees_every_change(cluster: Cluster) -> None:
    core, store = cluster.core, cluster.store
    store.create(pod("old"))
    listed = await core.list_namespaced_pod("default", _request_timeout=TIMEOUT)
    store.create(pod("a"))  # before the watch connects: served from history
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    async with w:
        stream = w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 1:  # live from now on
                store.patch("Pod", "default", "a", {"metadata": {"labels": {"x": "1"}}})
                store.delete("Pod", "default", "a")
            if len(seen) == 3:
                w.stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert w.resource_version == str(store.resource_version)


async def test_watch_without_resource_version_starts_with_the_current_objects(
    cluster: Cluster,
) -> None:
    cluster.store.create(node("n1"))
    w = watch.Watch(return_type="object")  # raw dicts, as the informers use
    async with w:
        events = [e async for e in w.stream(cluster.core.list_node, timeout_seconds=1)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "n1")]


async def test_watch_with_a_selector_turns_leaving_it_into_deleted(cluster: Cluster) -> None:
    store = cluster.store
    store.create(node("n1"))
    store.create(pod("a"))
    listed = await cluster.core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=", _request_timeout=TIMEOUT
    )
    store.bind("default", "a", "n1")
    store.create(pod("b"))
    w = watch.Watch()
    async with w:
        events = [
            (e["type"], e["object"].metadata.name)
            async for e in w.stream(
                cluster.core.list_pod_for_all_namespaces,
                field_selector="spec.nodeName=",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
            )
        ]
    assert events == [("DELETED", "a"), ("ADDED", "b")]


async def test_bookmarks_carry_the_current_resource_version(cluster: Cluster) -> None:
    cluster.store.create(pod("a"))
    rv = str(cluster.store.resource_version)
    w = watch.Watch()
    async with w:
        types = []
        async for event in w.stream(
            cluster.core.list_namespaced_pod,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=3,
        ):
            types.append(event["type"])
            current = str(cluster.store.resource_version)
            assert event["raw_object"]["metadata"]["resourceVersion"] == current
            assert event["raw_object"]["kind"] == "Pod"
            cluster.store.create(node(f"n{len(types)}"))  # other kinds move the revision on
            if len(types) == 2:
                w.stop()
    assert types == ["BOOKMARK", "BOOKMARK"]
    assert int(w.resource_version) > int(rv)


@pytest.mark.parametrize("history", [2])
async def test_a_too_old_resource_version_gives_410(cluster: Cluster) -> None:
    for name in "abcde":
        cluster.store.create(pod(name))
    for timeout in ({"timeout_seconds": 5}, {}):  # with and without the client's own retry
        w = watch.Watch()
        async with w:
            with pytest.raises(ApiException) as gone:
                async for _ in w.stream(
                    cluster.core.list_namespaced_pod, "default", resource_version="1", **timeout
                ):
                    pass
        assert gone.value.status == 410
        assert "Expired" in str(gone.value.reason)
    async with aiohttp.ClientSession() as http:
        url = f"{cluster.emulator.url}/api/v1/pods?watch=1&resourceVersion=1"
        async with http.get(url) as resp:
            assert resp.status == 200
            event = json.loads(await resp.content.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


# --------------------------------------------------------------------------- binding and eviction


def binding(name: str, node_name: str) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name=node_name),
    )


async def test_binding_is_201_with_a_status_and_409_on_a_rebind(cluster: Cluster) -> None:
    cluster.store.create(pod("a"))
    core = cluster.core
    resp = await core.create_namespaced_pod_binding(
        "a", "default", binding("a", "n1"), _preload_content=False, _request_timeout=TIMEOUT
    )
    try:
        assert resp.status == 201
        assert await resp.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
    finally:
        resp.release()
    bound = await core.read_namespaced_pod("a", "default", _request_timeout=TIMEOUT)
    assert bound.spec.node_name == "n1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    again = await core.create_namespaced_pod_binding(
        "a", "default", binding("a", "n2"), _preload_content=False, _request_timeout=TIMEOUT
    )
    try:
        assert again.status == 409
        status = await again.json()
        assert status["reason"] == "Conflict" and "already assigned" in status["message"]
    finally:
        again.release()
    # without _preload_content the client fails to read the Status as a V1Binding
    cluster.store.create(pod("b"))
    with pytest.raises(ValueError):
        await core.create_namespaced_pod_binding(
            "b", "default", binding("b", "n1"), _request_timeout=TIMEOUT
        )
    assert cluster.store.get("Pod", "default", "b")["spec"]["nodeName"] == "n1"


def running(store: ObjectStore, name: str, labels: dict[str, str]) -> None:
    store.create(pod(name, labels=labels))
    store.bind("default", name, "n1")
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    store.patch(
        "Pod", "default", name, {"status": ready}, patch_type="strategic", subresource="status"
    )


async def test_eviction_is_201_and_429_under_a_disruption_budget(cluster: Cluster) -> None:
    store = cluster.store
    running(store, "guarded-1", {"app": "db"})
    running(store, "guarded-2", {"app": "db"})
    running(store, "free", {"app": "web"})
    await client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
        },
        _request_timeout=TIMEOUT,
    )
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded-1"))
    with pytest.raises(ApiException) as refused:
        await cluster.core.create_namespaced_pod_eviction(
            "guarded-1", "default", eviction, _request_timeout=TIMEOUT
        )
    status = body_of(refused.value)
    assert (refused.value.status, status["reason"]) == (429, "TooManyRequests")
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "db needs 2 healthy pods" in status["details"]["causes"][0]["message"]

    resp = await cluster.core.create_namespaced_pod_eviction(
        "free",
        "default",
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name="free"),
            delete_options=client.V1DeleteOptions(grace_period_seconds=0),
        ),
        _preload_content=False,
        _request_timeout=TIMEOUT,
    )
    try:
        assert resp.status == 201
        assert (await resp.json())["status"] == "Success"
    finally:
        resp.release()
    assert store.try_get("Pod", "default", "free") is None


# --------------------------------------------------------------------------- patches


async def test_strategic_merge_patch_of_pod_status_keeps_the_other_conditions(
    cluster: Cluster,
) -> None:
    running(cluster.store, "a", {})
    patched = await cluster.core.patch_namespaced_pod_status(
        "a",
        "default",
        {
            "status": {
                "nominatedNodeName": "n2",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                    }
                ],
            }
        },
        _request_timeout=TIMEOUT,
    )
    assert patched.status.nominated_node_name == "n2"
    assert [c.type for c in patched.status.conditions] == [
        "PodScheduled",
        "Ready",
        "DisruptionTarget",
    ]
    # the same through a merge patch replaces the whole list
    merged = await cluster.core.patch_namespaced_pod_status(
        "a",
        "default",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        _content_type="application/merge-patch+json",
        _request_timeout=TIMEOUT,
    )
    assert [(c.type, c.status) for c in merged.status.conditions] == [("Ready", "False")]
    # status is written only through the status subresource
    spec_patch = await cluster.core.patch_namespaced_pod(
        "a", "default", {"status": {"phase": "Failed"}}, _request_timeout=TIMEOUT
    )
    assert spec_patch.status.phase == "Running"


async def test_json_patch_add_remove_replace_and_test(cluster: Cluster) -> None:
    cluster.store.create(pod("a", labels={"keep": "1", "drop": "1"}))
    patched = await cluster.core.patch_namespaced_pod(
        "a",
        "default",
        [
            {"op": "test", "path": "/metadata/labels/keep", "value": "1"},
            {"op": "add", "path": "/metadata/labels/new", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/drop"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "y"},
        ],
        _request_timeout=TIMEOUT,
    )
    assert patched.metadata.labels == {"keep": "1", "new": "2"}
    assert patched.spec.containers[0].image == "y"
    with pytest.raises(ApiException) as failed:
        await cluster.core.patch_namespaced_pod(
            "a",
            "default",
            [{"op": "test", "path": "/metadata/labels/keep", "value": "2"}],
            _request_timeout=TIMEOUT,
        )
    assert (failed.value.status, body_of(failed.value)["reason"]) == (422, "Invalid")


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        ([{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3], "b": {"c": 1}}),
        ([{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2], "b": {"c": 1}}),
        ([{"op": "remove", "path": "/a/1"}], {"a": [1], "b": {"c": 1}}),
        ([{"op": "replace", "path": "/b/c", "value": 2}], {"a": [1, 2], "b": {"c": 2}}),
        ([{"op": "move", "from": "/b/c", "path": "/d"}], {"a": [1, 2], "b": {}, "d": 1}),
        ([{"op": "copy", "from": "/a", "path": "/e"}], {"a": [1, 2], "b": {"c": 1}, "e": [1, 2]}),
        ([{"op": "add", "path": "/b/x~1y", "value": 1}], {"a": [1, 2], "b": {"c": 1, "x/y": 1}}),
    ],
    ids=["append", "insert", "remove-item", "replace", "move", "copy", "escaped-key"],
)
def test_apply_json_patch(operations: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    original = {"a": [1, 2], "b": {"c": 1}}
    assert apply_json_patch(original, operations) == expected
    assert original == {"a": [1, 2], "b": {"c": 1}}


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/a/5", "value": 1}],
        [{"op": "test", "path": "/b/c", "value": 2}],
    ],
    ids=["remove-missing", "replace-out-of-range", "test-fails"],
)
def test_apply_json_patch_refuses(operations: list[dict[str, Any]]) -> None:
    with pytest.raises(JsonPatchError):
        apply_json_patch({"a": [1, 2], "b": {"c": 1}}, operations)


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1,b", {"a": "1"}, False),
        ("a!=1", {}, True),
        ("a in (1, 2),!b", {"a": "2"}, True),
        ("a notin (1,2)", {"a": "2"}, False),
        ("a>3", {"a": "4"}, True),
    ],
)
def test_label_selector_strings(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector_string(text).matches(labels) is matches


# --------------------------------------------------------------------------- custom objects


def pod_group(name: str, min_member: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


async def test_custom_objects_are_served_validated_and_defaulted(cluster: Cluster) -> None:
    custom = cluster.custom
    queue = await custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "queues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Queue",
            "metadata": {"name": "q"},
            "spec": {},
        },
        _request_timeout=TIMEOUT,
    )
    assert queue["spec"] == {"weight": 1, "reclaimable": True}  # schema defaults
    created = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "podgroups", pod_group("g"), _request_timeout=TIMEOUT
    )
    assert created["spec"]["queue"] == "default"
    listed = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", "podgroups", _request_timeout=TIMEOUT
    )
    assert [o["metadata"]["name"] for o in listed["items"]] == ["g"]
    assert listed["kind"] == "PodGroupList"
    queues = await custom.list_cluster_custom_object(
        GROUP, VERSION, "queues", _request_timeout=TIMEOUT
    )
    assert [o["metadata"]["name"] for o in queues["items"]] == ["q"]
    got = await custom.get_namespaced_custom_object(
        GROUP, VERSION, "default", "podgroups", "g", _request_timeout=TIMEOUT
    )
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    deleted = await custom.delete_cluster_custom_object(
        GROUP, VERSION, "queues", "q", _request_timeout=TIMEOUT
    )
    assert deleted["metadata"]["name"] == "q"  # custom objects come back on delete
    assert cluster.store.try_get("Queue", "", "q") is None


async def test_an_invalid_pod_group_is_422_naming_the_field(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as invalid:
        await cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "podgroups", pod_group("bad", -1), _request_timeout=TIMEOUT
        )
    status = body_of(invalid.value)
    assert (invalid.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(f'PodGroup.{GROUP} "bad" is invalid: spec.minMember')
    assert status["details"]["kind"] == "PodGroup" and status["details"]["group"] == GROUP
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.minMember"]
    assert status["details"]["causes"][0]["reason"] == "FieldValueInvalid"
    # updates are validated too, patches included
    await cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "podgroups", pod_group("g"), _request_timeout=TIMEOUT
    )
    with pytest.raises(ApiException) as patched:
        await cluster.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "podgroups",
            "g",
            {"spec": {"minMember": "many"}},
            _content_type="application/merge-patch+json",
            _request_timeout=TIMEOUT,
        )
    assert [c["field"] for c in body_of(patched.value)["details"]["causes"]] == ["spec.minMember"]


async def test_merge_patch_of_pod_group_status(cluster: Cluster) -> None:
    custom = cluster.custom
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "podgroups", pod_group("g"), _request_timeout=TIMEOUT
    )
    patched = await custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        "podgroups",
        "g",
        {"status": {"phase": "Running", "running": 2}, "spec": {"minMember": 9}},
        _content_type="application/merge-patch+json",
        _request_timeout=TIMEOUT,
    )
    assert patched["status"] == {"phase": "Running", "running": 2}
    assert patched["spec"]["minMember"] == 2  # the status subresource writes status only
    with pytest.raises(ApiException) as bad_status:
        await custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "podgroups",
            "g",
            {"status": {"phase": "Sleeping"}},
            _content_type="application/merge-patch+json",
            _request_timeout=TIMEOUT,
        )
    assert body_of(bad_status.value)["details"]["causes"][0]["field"] == "status.phase"
    # the client's default for a dict is json-patch, which a dict is not
    with pytest.raises(ApiException) as wrong_type:
        await custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "podgroups", "g", {"status": {}}, _request_timeout=TIMEOUT
        )
    assert wrong_type.value.status == 400
    # and, as on a real server, no strategic merge patch for custom objects
    with pytest.raises(ApiException) as strategic:
        await custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "podgroups",
            "g",
            {"spec": {"minMember": 3}},
            _content_type="application/strategic-merge-patch+json",
            _request_timeout=TIMEOUT,
        )
    assert strategic.value.status == 415


# --------------------------------------------------------------------------- concurrency


async def test_lease_updates_use_optimistic_concurrency(cluster: Cluster) -> None:
    leases = client.CoordinationV1Api(cluster.api)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="sluice", namespace="kube-system"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await leases.create_namespaced_lease("kube-system", lease, _request_timeout=TIMEOUT)
    rv = created.metadata.resource_version
    first = client.V1Lease(
        metadata=client.V1ObjectMeta(name="sluice", resource_version=rv),
        spec=client.V1LeaseSpec(holder_identity="a", lease_transitions=0),
    )
    updated = await leases.replace_namespaced_lease(
        "sluice", "kube-system", first, _request_timeout=TIMEOUT
    )
    assert int(updated.metadata.resource_version) > int(rv)
    second = client.V1Lease(
        metadata=client.V1ObjectMeta(name="sluice", resource_version=rv),
        spec=client.V1LeaseSpec(holder_identity="b", lease_transitions=1),
    )
    with pytest.raises(ApiException) as conflict:
        await leases.replace_namespaced_lease(
            "sluice", "kube-system", second, _request_timeout=TIMEOUT
        )
    status = body_of(conflict.value)
    assert (conflict.value.status, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]
    current = await leases.read_namespaced_lease("sluice", "kube-system", _request_timeout=TIMEOUT)
    assert current.spec.holder_identity == "a"


async def test_a_deleted_namespace_takes_no_new_objects_until_created_again(
    cluster: Cluster,
) -> None:
    """As on the API server once its namespace controller has emptied one: the objects
    are gone, and a create in it meets 404 ``namespaces "x" not found``."""
    core = cluster.core
    cluster.store.create(pod("a", "team"))
    await core.delete_namespace("team", _request_timeout=TIMEOUT)
    assert cluster.store.try_get("Pod", "team", "a") is None
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "a"}}
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_event("team", event, _request_timeout=TIMEOUT)
    status = body_of(refused.value)
    assert (refused.value.status, status["message"]) == (404, 'namespaces "team" not found')
    await core.create_namespace({"metadata": {"name": "team"}}, _request_timeout=TIMEOUT)
    created = await core.create_namespaced_event("team", event, _request_timeout=TIMEOUT)
    assert created.metadata.namespace == "team"


async def test_delete_with_preconditions_and_grace(cluster: Cluster) -> None:
    core, store = cluster.core, cluster.store
    running(store, "a", {})
    with pytest.raises(ApiException) as conflict:
        await core.delete_namespaced_pod(
            "a",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other")),
            _request_timeout=TIMEOUT,
        )
    assert (conflict.value.status, body_of(conflict.value)["reason"]) == (409, "Conflict")
    uid = store.get("Pod", "default", "a")["metadata"]["uid"]
    terminating = await core.delete_namespaced_pod(
        "a",
        "default",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        _request_timeout=TIMEOUT,
    )
    assert terminating.metadata.deletion_timestamp is not None  # bound: graceful
    gone = await core.delete_namespaced_pod(
        "a", "default", grace_period_seconds=0, _request_timeout=TIMEOUT
    )
    assert gone.metadata.name == "a" and store.try_get("Pod", "default", "a") is None
    store.create(node("n1"))
    status = await core.delete_node("n1", _request_timeout=TIMEOUT)
    assert status.status == "Success" and status.details.name == "n1"


# --------------------------------------------------------------------------- events, tables


async def test_events_are_served_in_both_apis(cluster: Cluster) -> None:
    events = client.EventsV1Api(cluster.api)
    await events.create_namespaced_event(
        "default",
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "a.1"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "sluice",
            "reportingInstance": "sluice-0",
            "action": "Scheduling",
            "reason": "FailedScheduling",
            "note": "0/1 nodes are available",
            "type": "Warning",
            "regarding": {"kind": "Pod", "name": "a", "namespace": "default"},
        },
        _request_timeout=TIMEOUT,
    )
    core_events = await cluster.core.list_namespaced_event("default", _request_timeout=TIMEOUT)
    [event] = core_events.items
    assert event.message == "0/1 nodes are available"
    assert event.involved_object.name == "a" and event.source.component == "sluice"
    assert cluster.store.get("Event", "default", "a.1")["note"] == event.message


async def test_tables_for_kubectl(cluster: Cluster) -> None:
    cluster.store.create(pod("a"))
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    url = f"{cluster.emulator.url}/api/v1/pods"
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        table = await resp.json()
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["a", "0/1", "Pending", "0"]
    assert table["rows"][0]["object"]["metadata"]["name"] == "a"


# --------------------------------------------------------------------------- kubeconfig


async def test_kubeconfig_is_accepted_by_the_client(cluster: Cluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kube" / "config", cluster.emulator.url)
    assert path.stat().st_mode & 0o777 == 0o600
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == cluster.emulator.url
    async with client.ApiClient(configuration) as api:
        namespaces = await client.CoreV1Api(api).list_namespace(_request_timeout=TIMEOUT)
    assert {"default", "kube-system"} <= {n.metadata.name for n in namespaces.items}


async def test_stop_ends_open_watches(cluster: Cluster) -> None:
    emulator = ApiEmulator(cluster.store, port=0)
    url = await emulator.start()
    assert emulator.served_port > 0 and url.endswith(str(emulator.served_port))
    async with aiohttp.ClientSession() as http, http.get(f"{url}/api/v1/pods?watch=true") as resp:
        started = time.monotonic()
        await emulator.stop()
        assert await resp.content.read() == b""
    assert time.monotonic() - started < 5
    await emulator.stop()  # idempotent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("540", 540, id="integer"),
        pytest.param("-1", -1, id="signed"),
        pytest.param("", None, id="empty-is-absent"),
        pytest.param("540.0", 'strconv.ParseInt: parsing "540.0": invalid syntax', id="float"),
        pytest.param("1e3", 'strconv.ParseInt: parsing "1e3": invalid syntax', id="exponent"),
        pytest.param(" 5", 'strconv.ParseInt: parsing " 5": invalid syntax', id="space"),
        pytest.param(
            "9223372036854775808",
            'strconv.ParseInt: parsing "9223372036854775808": value out of range',
            id="beyond-int64",
        ),
    ],
)
def test_integer_query_parameters_parse_as_the_api_server_does(
    text: str, expected: int | str | None
) -> None:
    if isinstance(expected, str):
        with pytest.raises(HttpError) as caught:
            int_param({"limit": text}, "limit")
        assert (caught.value.code, caught.value.message) == (400, expected)
    else:
        assert int_param({"limit": text}, "limit") == expected
