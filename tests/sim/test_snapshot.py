"""``sluice snapshot`` (issue 27 point 3): the objects a cluster serves written as a
scenario, with ``--anonymize``; a snapshot replays to the decisions its cluster would get.

The round trip: a scenario's objects are put in an embedded cluster served over HTTP (as
``sluice simulate`` creates them at time 0, claims made from templates), ``sluice
snapshot`` reads them back through the API, and ``sluice simulate`` of the snapshot must
decide what ``sluice simulate`` of the scenario decides, anonymized too (under other
names: as many binds, victims and pending pods, with the same reasons)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
import yaml

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.group_apis import APIS, GroupApi, PodField
from scheduler.cli.main import main
from scheduler.config import SchedulerConfiguration
from scheduler.logging import quiet
from scheduler.schema import load_crds
from scheduler.sim.anonymize import anonymize
from scheduler.sim.api_conventions import parse_rfc3339, rfc3339
from scheduler.sim.claim_controller import SimClaimController
from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import load_scenario
from scheduler.sim.scenario_writer import scenario_of
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import api_pod_group

SCENARIOS = Path(__file__).parents[1] / "scenarios"
TAKEN = 1_790_000_000.0  # 2026-09-21T...


def pod(name: str, ns: str = "team", **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, **extra.pop("metadata", {})}
    spec = {
        "schedulerName": "sluice",
        "containers": [
            {
                "name": "main",
                "image": "registry/app:1",
                "env": [{"name": "SECRET", "value": "x"}],
                "resources": {"requests": {"cpu": "1"}},
            }
        ],
        **extra.pop("spec", {}),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, **extra}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"providerID": "cloud://x"},
        "status": {
            "allocatable": {"cpu": "4"},
            "images": [{"names": ["big"]}],
            "conditions": [{"type": "Ready", "status": "True", "message": f"{name} is ready"}],
        },
    }


# ------------------------------------------------------------------ what a snapshot keeps


def test_objects_keep_what_the_scheduler_reads() -> None:
    p = pod(
        "p",
        metadata={
            "uid": "u-1",
            "resourceVersion": "42",
            "creationTimestamp": "2026-09-21T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        spec={"nodeName": "n1"},
        status={
            "phase": "Running",
            "startTime": "2026-09-21T00:00:01Z",
            "podIP": "10.0.0.1",
            "containerStatuses": [{"name": "main"}],
        },
    )
    snap = scenario_of({"Node": [node("n1")], "Pod": [p]}, TAKEN)
    [kept] = snap.objects["Pod"]
    assert kept["metadata"] == {
        "name": "p",
        "namespace": "team",
        "uid": "u-1",
        "creationTimestamp": "2026-09-21T00:00:00Z",
    }
    assert kept["status"] == {"phase": "Running", "startTime": "2026-09-21T00:00:01Z"}
    [n] = snap.objects["Node"]
    assert set(n["status"]) == {"allocatable", "conditions"}
    assert list(kept)[:3] == ["apiVersion", "kind", "metadata"]


def test_a_pod_being_deleted_keeps_what_is_left_of_its_grace() -> None:
    ends = rfc3339(TAKEN + 20)
    p = pod(
        "p",
        metadata={"deletionTimestamp": ends, "deletionGracePeriodSeconds": 30},
        spec={"nodeName": "n1"},
    )
    [kept] = scenario_of({"Node": [node("n1")], "Pod": [p]}, TAKEN - 0.5).objects["Pod"]
    assert kept["metadata"]["deletionTimestamp"] == ends
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 21  # 20.5 s left


@pytest.mark.parametrize(
    ("objects", "left_out"),
    [
        (
            {"Pod": [pod("p", spec={"nodeName": "gone"})]},
            "Pod team/p: it is bound to node 'gone', which does not exist",
        ),
        (
            {"Pod": [pod("p", metadata={"labels": {L.POD_GROUP_LABEL: "pg"}})]},
            "Pod team/p: it names PodGroup 'pg' "
            "(metadata.labels[scheduling.sluice.dev/pod-group]), which does not exist",
        ),
        (
            {"Pod": [pod("p", metadata={"labels": {L.QUEUE_LABEL: "nope"}})]},
            "Pod team/p: it names queue 'nope', which does not exist",
        ),
        (
            {
                "PodGroup": [
                    {
                        "apiVersion": L.API_VERSION,
                        "kind": "PodGroup",
                        "metadata": {"name": "pg", "namespace": "team"},
                        "spec": {"minMember": 1, "queue": "nope"},
                    }
                ]
            },
            "PodGroup team/pg: its queue 'nope' does not exist",
        ),
    ],
    ids=[
        "pod-on-a-missing-node",
        "pod-of-a-missing-group",
        "pod-of-a-missing-queue",
        "group-of-a-missing-queue",
    ],
)
def test_what_a_scenario_cannot_hold_is_left_out_and_named(
    objects: dict[str, list[dict[str, Any]]], left_out: str
) -> None:
    snap = scenario_of(objects, TAKEN)
    assert snap.left_out == [left_out]
    assert not snap.objects.get("Pod") and not snap.objects.get("PodGroup")


# ------------------------------------------------------------------ anonymized


@pytest.mark.parametrize(
    "namespaces",
    [["b", "a", "c"], ["team", "team-a", "teamb"], ["x1", "x10", "x2", "x9"]],
    ids=["plain", "prefixes", "digits"],
)
def test_renaming_keeps_the_order_of_namespace_slash_name_keys(namespaces: list[str]) -> None:
    pods = [pod(n, ns) for ns in namespaces for n in ("zeta", "alpha", "alpha-1", "beta")]
    snap = scenario_of({"Pod": pods}, TAKEN)
    before = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in snap.objects["Pod"]]
    anonymize(snap)
    after = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in snap.objects["Pod"]]
    assert sorted(range(len(before)), key=before.__getitem__) == sorted(
        range(len(after)), key=after.__getitem__
    )
    assert not {k.split("/")[1] for k in after} & {"zeta", "alpha", "beta"}


def test_anonymized_references_stay_consistent_and_unread_labels_go() -> None:
    pg = {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"owner": "alice"}},
        "spec": {"minMember": 2},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
    }
    members = [
        pod(
            f"train-{i}",
            "ml",
            metadata={
                "labels": {L.POD_GROUP_LABEL: "train", "app": "trainer", "team": "x"},
                "annotations": {"note": "secret"},
            },
            spec={
                "nodeName": "gpu-a",
                "nodeSelector": {"accelerator": "h100", "kubernetes.io/hostname": "gpu-a"},
            },
            status={
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True", "message": "on gpu-a"}],
            },
        )
        for i in range(2)
    ]
    nodes = [node("gpu-a", accelerator="h100", rack="r1"), node("gpu-b", accelerator="a100")]
    snap = scenario_of(
        {"Node": nodes, "PodGroup": [pg], "PodDisruptionBudget": [pdb], "Pod": members}, TAKEN
    )
    anonymize(snap)
    [group] = snap.objects["PodGroup"]
    first = snap.objects["Pod"][0]
    gpu_a = snap.objects["Node"][0]
    assert first["metadata"]["labels"] == {
        L.POD_GROUP_LABEL: group["metadata"]["name"],
        "app": "trainer",
    }
    assert "annotations" not in first["metadata"] and "labels" not in group["metadata"]
    assert first["spec"]["nodeName"] == gpu_a["metadata"]["name"] == "node-0001"
    assert first["spec"]["nodeSelector"] == {
        "accelerator": "h100",
        "kubernetes.io/hostname": "node-0001",
    }
    assert gpu_a["metadata"]["labels"] == {
        "kubernetes.io/hostname": "node-0001",
        "accelerator": "h100",
    }
    assert first["spec"]["containers"] == [
        {"name": "c0", "image": "image", "resources": {"requests": {"cpu": "1"}}}
    ]
    assert first["status"]["conditions"] == [{"type": "PodScheduled", "status": "True"}]
    assert gpu_a["spec"] == {}
    text = yaml.safe_dump_all(list(snap.documents()))
    for word in ("alice", "secret", "gpu-a", "train-0", "registry/app", "SECRET", " ml/"):
        assert word not in text


def _naming(member: dict[str, Any], field: PodField, group: str) -> dict[str, Any]:
    """``member`` naming ``group`` where ``field`` says."""
    if field.place == "spec":
        *path, last = field.key.split(".")
        where = member["spec"]
        for part in path:
            where = where.setdefault(part, {})
        where[last] = group
    else:
        member["metadata"].setdefault(f"{field.place}s", {})[field.key] = group
    return member


@pytest.mark.parametrize("api", APIS, ids=[api.name for api in APIS])
def test_anonymized_pods_name_their_renamed_group_in_every_api(api: GroupApi) -> None:
    """Where a pod names its group (each API's row: a label, an annotation, a field of
    its spec) is kept and renamed as the group is: the replay keeps the gang."""
    group = api_pod_group(api, "train", {"minMember": 2}, ns="ml")
    members = [_naming(pod(f"train-{i}", "ml"), api.member_field, "train") for i in range(2)]
    snap = scenario_of({api.pod_group_key: [group], "Pod": members}, TAKEN)
    assert snap.left_out == []
    anonymize(snap)
    [renamed] = snap.objects[api.pod_group_key]
    assert renamed["metadata"]["name"] != "train"
    assert [api.member_field.read(p) for p in snap.objects["Pod"]] == [
        renamed["metadata"]["name"]
    ] * 2


def test_anonymized_volumes_keep_their_references() -> None:
    """Claims, PVs, classes and CSI objects renamed consistently: a pod's claim, an
    ephemeral volume's claim (named after its new pod), a PV's claimRef and node affinity,
    a claim's volumeName and selected node, a CSINode, a capacity's topology; what names
    the workloads and machines goes."""
    host = "kubernetes.io/hostname"
    data = pod(
        "trainer",
        "ml",
        spec={
            "volumes": [
                {"name": "config", "configMap": {"name": "secret-config"}},
                {"name": "dataset", "persistentVolumeClaim": {"claimName": "imagenet"}},
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "storageClassName": "nvme",
                                "resources": {"requests": {"storage": "1Gi"}},
                            }
                        }
                    },
                },
                {"name": "legacy", "gcePersistentDisk": {"pdName": "prod-disk", "readOnly": True}},
            ]
        },
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "imagenet",
            "namespace": "ml",
            "annotations": {
                "volume.kubernetes.io/selected-node": "gpu-a",
                "pv.kubernetes.io/bind-completed": "yes",
                "owner": "alice",
            },
        },
        "spec": {
            "volumeName": "pv-imagenet",
            "storageClassName": "local",
            "selector": {"matchLabels": {"tier": "fast"}},
        },
        "status": {"phase": "Bound"},
    }
    scratch = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "trainer-scratch",
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "trainer",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {"storageClassName": "nvme"},
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": "pv-imagenet",
            "labels": {"tier": "fast", "topology.kubernetes.io/zone": "z1", "owner": "alice"},
        },
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "local": {"path": "/mnt/imagenet"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ml", "name": "imagenet"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": host, "operator": "In", "values": ["gpu-a"]}]}
                    ]
                }
            },
        },
    }
    klass = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "nvme"},
        "provisioner": "csi.example.com",
        "parameters": {"secret": "x"},
        "allowedTopologies": [{"matchLabelExpressions": [{"key": host, "values": ["gpu-a"]}]}],
    }
    csi_node = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": "gpu-a"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "gpu-a"}]},
    }
    capacity = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": "cap-gpu-a", "namespace": "kube-system"},
        "storageClassName": "nvme",
        "capacity": "1Ti",
        "nodeTopology": {"matchLabels": {host: "gpu-a"}},
    }
    snap = scenario_of(
        {
            "Node": [node("gpu-a", **{"topology.kubernetes.io/zone": "z1"})],
            "StorageClass": [klass],
            "CSINode": [csi_node],
            "CSIStorageCapacity": [capacity],
            "PersistentVolume": [volume],
            "PersistentVolumeClaim": [claim, scratch],
            "Pod": [data],
        },
        TAKEN,
    )
    anonymize(snap)
    [p] = snap.objects["Pod"]
    [c, e] = snap.objects["PersistentVolumeClaim"]
    [v] = snap.objects["PersistentVolume"]
    [n] = snap.objects["Node"]
    new_node = n["metadata"]["name"]
    assert [x["name"] for x in p["spec"]["volumes"]] == ["v1", "v2", "v3"]
    assert p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == c["metadata"]["name"]
    assert e["metadata"]["name"] == f"{p['metadata']['name']}-v2"
    assert p["spec"]["volumes"][2] == {
        "name": "v3",
        "gcePersistentDisk": {"pdName": "disk-0001", "readOnly": True},
    }
    assert c["spec"]["volumeName"] == v["metadata"]["name"] == "pv-0001"
    assert c["metadata"]["annotations"] == {
        "volume.kubernetes.io/selected-node": new_node,
        "pv.kubernetes.io/bind-completed": "yes",
    }
    assert v["spec"]["claimRef"]["name"] == c["metadata"]["name"]
    assert v["spec"]["claimRef"]["namespace"] == c["metadata"]["namespace"]
    assert v["spec"]["hostPath"] == {"path": "/"} and "local" not in v["spec"]
    assert v["metadata"]["labels"] == {"tier": "fast", "topology.kubernetes.io/zone": "z1"}
    terms = v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [new_node]
    assert snap.objects["CSINode"][0]["metadata"]["name"] == new_node
    [cap] = snap.objects["CSIStorageCapacity"]
    assert cap["nodeTopology"]["matchLabels"] == {host: new_node}
    [sc] = snap.objects["StorageClass"]
    assert "parameters" not in sc
    assert sc["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] == [new_node]
    text = yaml.safe_dump_all(list(snap.documents()))
    for word in ("imagenet", "gpu-a", "alice", "prod-disk", "secret", "trainer", "/mnt"):
        assert word not in text, word


def test_anonymized_placement_objects_keep_only_what_spreading_and_affinity_read() -> None:
    """Namespaces, Services and controllers (which placement reads, issue 37): renamed
    with the names that refer to them, stripped to the labels and selectors read."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "ml",
            "labels": {"kubernetes.io/metadata.name": "ml", "team": "x", "owner": "alice"},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "checkout", "namespace": "ml"},
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.0.0.7"},
    }
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "checkout-5d8f", "namespace": "ml"},
        "spec": {
            "selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
            "template": pod("t", "ml")["spec"],
        },
    }
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
        "namespaces": ["ml"],
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}
            ]
        },
    }
    spread = {
        "maxSkew": 1,
        "topologyKey": "rack",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"shard": "a"}},
    }
    web = pod(
        "web-0",
        "ml",
        metadata={"labels": {"app": "web", "tier": "f", "shard": "a", "team": "y"}},
        spec={
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
            "topologySpreadConstraints": [spread],
        },
    )
    nodes = [node("gpu-a", rack="r1", **{"topology.kubernetes.io/zone": "z1", "pool": "p"})]
    snap = scenario_of(
        {
            "Namespace": [namespace],
            "Service": [service],
            "ReplicaSet": [replica_set],
            "Pod": [web],
            "Node": nodes,
        },
        TAKEN,
    )
    anonymize(snap)
    [ns] = snap.objects["Namespace"]
    name = ns["metadata"]["name"]
    assert name == "ns-0001"
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    assert "spec" not in ns and ns["status"] == {"phase": "Active"}
    [svc], [rs], [p] = snap.objects["Service"], snap.objects["ReplicaSet"], snap.objects["Pod"]
    assert svc["spec"] == {"selector": {"app": "web"}} and svc["metadata"]["namespace"] == name
    assert rs["spec"] == {"selector": replica_set["spec"]["selector"]}
    assert p["metadata"]["labels"] == {"app": "web", "tier": "f", "shard": "a"}
    [kept] = p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert kept["namespaces"] == [name]
    assert kept["namespaceSelector"]["matchExpressions"][0]["values"] == [name]
    assert snap.objects["Node"][0]["metadata"]["labels"] == {
        "kubernetes.io/hostname": "node-0001",
        "rack": "r1",
        "topology.kubernetes.io/zone": "z1",
    }
    text = yaml.safe_dump_all(list(snap.documents()))
    for word in ("alice", "checkout", "10.0.0.7", "registry/app", "SECRET", " ml", "[ml]"):
        assert word not in text


# ------------------------------------------------------------------ the round trip


def _store_of(scenario_path: Path) -> ObjectStore:
    """The scenario's objects at time 0 in an embedded cluster, as ``sluice simulate``
    creates them (the default queue, claims made from templates)."""
    scenario = load_scenario([str(scenario_path)])
    catalog = load_crds()
    store = ObjectStore(
        store_wall,
        validator=lambda o: catalog.check(o) if catalog.covers(o) else o,
    )
    SimClaimController(store).attach()
    if not any(
        a.obj["kind"] == "Queue" and a.obj["metadata"]["name"] == "default"
        for a in scenario.arrivals
    ):
        store.create(
            {
                "apiVersion": L.API_VERSION,
                "kind": "Queue",
                "metadata": {"name": "default"},
                "spec": {"weight": 1},
            }
        )
    for a in scenario.arrivals:
        store.create(a.obj, restore=True)
    return store


def _served_snapshot(store: ObjectStore, tmp_path: Path, *flags: str) -> Path:
    """``sluice snapshot`` of ``store`` served over HTTP (in a thread of its own)."""
    out = tmp_path / f"snapshot{''.join(flags)}.yaml"
    with anyio.from_thread.start_blocking_portal() as portal:
        emulator = portal.call(lambda: ApiEmulator(store, port=0, wall=store_wall))
        url = portal.call(emulator.start)
        try:
            kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
            assert main(["snapshot", "--kubeconfig", str(kubeconfig), "-o", str(out), *flags]) == 0
        finally:
            portal.call(emulator.stop)
    return out


def store_wall() -> float:
    return TAKEN


def _run(path: Path, config: SchedulerConfiguration | None) -> SimulationResult:
    quiet()
    scenario = load_scenario([str(path)])
    resolved = app.resolve(config or scenario.config or SchedulerConfiguration())
    sim = Simulation(scenario, lambda cache, ports: app.build_loop(resolved, cache, ports))
    return anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})


def _without_expectation(path: Path, tmp_path: Path) -> Path:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") != "Expectation"]
    out = tmp_path / path.name
    out.write_text(yaml.safe_dump_all(docs))
    return out


def _decisions(result: SimulationResult) -> dict[str, Any]:
    return {
        "bindings": result.bindings,
        "evictions": sorted(result.evictions),
        "pending": result.pending,
        "podGroups": result.pod_groups,
    }


def _renaming(plain: Path, anonymous: Path) -> Callable[[str], str]:
    """The renaming ``--anonymize`` made, read off the two snapshots (each kind's objects
    are in the same order in both, the renaming keeping the order of names): a function
    rewriting a text's ``namespace/name`` keys and node names."""
    table: dict[str, str] = {}
    lists = [[d for d in _documents(path) if d["kind"] == "List"] for path in (plain, anonymous)]
    for before, after in zip(*lists, strict=True):
        for a, b in zip(before["items"], after["items"], strict=True):
            ma, mb = a["metadata"], b["metadata"]
            if "namespace" in ma:
                table[f"{ma['namespace']}/{ma['name']}"] = f"{mb['namespace']}/{mb['name']}"
            elif a["kind"] == "Node":
                table[ma["name"]] = mb["name"]
    pattern = re.compile(
        r"(?<![\w.-])("
        + "|".join(map(re.escape, sorted(table, key=len, reverse=True)))
        + r")(?![\w.-])"
    )
    return lambda text: pattern.sub(lambda m: table[m.group(1)], text)


@pytest.mark.parametrize(
    "name",
    [
        "kubernetes_workload_gang",
        "coscheduling_gang",
        "topology_no_rack_fits",
        "preempt_pdb_steers_node",
        "dra_preempt_evicts_the_device_holder",
        "dra_gang_claims_all_or_none",
        "volumes_gang_next_to_local_pvs",
    ],
)
def test_a_snapshot_replays_to_the_decisions_of_its_cluster(name: str, tmp_path: Path) -> None:
    scenario = _without_expectation(SCENARIOS / f"{name}.yaml", tmp_path)
    config = load_scenario([str(scenario)]).config
    original = _run(scenario, config)
    store = _store_of(scenario)
    replayed = _run(_served_snapshot(store, tmp_path), config)
    assert _decisions(replayed) == _decisions(original)
    plain = tmp_path / "snapshot.yaml"
    anonymized = _served_snapshot(store, tmp_path, "--anonymize")
    renamed = _renaming(plain, anonymized)
    expected = json.loads(renamed(json.dumps(_decisions(original))))
    expected["evictions"] = sorted(expected["evictions"])
    assert _decisions(_run(anonymized, config)) == expected


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    yield from (d for d in yaml.safe_load_all(path.read_text()) if d)


def test_the_snapshot_starts_the_replay_clock_when_it_was_taken(tmp_path: Path) -> None:
    store = _store_of(_without_expectation(SCENARIOS / "coscheduling_gang.yaml", tmp_path))
    before = time.time()
    path = _served_snapshot(store, tmp_path)
    assert path.read_text().startswith("# sluice snapshot of http://127.0.0.1:")
    [simulation] = [d for d in _documents(path) if d["kind"] == "Simulation"]
    assert before - 1 <= parse_rfc3339(simulation["start"]) <= time.time()
    assert load_scenario([str(path)]).start == parse_rfc3339(simulation["start"])
