"""Sluice against kube-scheduler on the same worlds (issue 37, point 5): the pods each
leaves pending are the same, and every binding Sluice makes passes kube-scheduler's
filters (checked by :mod:`kube_filters`, the test's own, not Sluice's code). How often
the two choose different nodes is reported, not judged (scores may differ, and
kube-scheduler breaks ties at random).

A pod left pending by one scheduler and placed by the other is a mismatch. It is
*explained* when the scheduler that left it pending was right to, in the state it ended
in: the pod fits on no node there by kube's filters (:func:`kube_filters.fits_somewhere`),
so only an earlier choice made it unplaceable (the two chose differently among nodes both
allowed, kube-scheduler at random among equal scores) and the other's binding of it
passes kube's filters. Every mismatch is reported; an unexplained one (a pod left
pending that could go) fails the test, as does any binding kube's filters refuse.

Each world (:mod:`placement_worlds`) runs once per scheduler, one at a time, on the same
nodes and bound pods: the stock kube-scheduler (a subprocess under a scheduler name of
its own) places the world's pods; they are deleted; ``sluice run`` places the same pods.
A run is over when every pod is bound or refused and nothing has changed for a while.

Some worlds carry volumes: StorageClasses, PersistentVolumes (local ones pinned to a
node, zonal ones) and claims (pre-bound, waiting for their first consumer, missing,
unbound Immediate, ReadWriteOncePod shared by two pods), made afresh for each run (a run
binds them; the real PV controller of ``up --controller-manager`` does, with no
provisioner and no kubelet needed) and deleted after it. The checker reads the claims
and PVs as the run left them: a pod bound has every claim bound, to a PV whose node
affinity and zone allow its node, and holds no ReadWriteOncePod claim another pod holds;
a pod left pending is explained when no node has the volumes it asks for.

A few worlds in the e2e suite against a real server (``e2e/run-real-server -k
differential``); more with ``SLUICE_DIFF_WORLDS`` (and ``SLUICE_DIFF_SEED``, the first
world's seed); ``SLUICE_DIFF_REPORT`` names a JSON file for the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import RUN_LABEL, ApiFailure, Cluster, NodeSpec, core_path, node_of
from kube_filters import Storage, claim_names, fits_somewhere, violations
from kube_scheduler import KubeScheduler, kube_scheduler_binary
from placement_worlds import FOR_CLAIM, HOSTNAME, World, generate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster_only]

WORLDS = int(os.environ.get("SLUICE_DIFF_WORLDS", "3"))
SEED = int(os.environ.get("SLUICE_DIFF_SEED", "3700"))
REPORT = os.environ.get("SLUICE_DIFF_REPORT", "")
WORLD_LABEL = "diff.sluice.dev/world"
QUIET = 12.0
"""Seconds without a change after which a run is over (kube-scheduler retries a refused
pod within 10 s of an event that may help it)."""
SETTLE_TIMEOUT = 180.0

Obj = dict[str, Any]


def _world_label(index: int) -> str:
    return f"w{index}"


async def _create_nodes(cluster: Cluster, world: World, index: int) -> dict[str, Obj]:
    """The world's nodes, as created (by short name)."""
    made: dict[str, Obj] = {}
    for n in world.nodes:
        short = n["metadata"]["name"]
        alloc = n["allocatable"]
        labels = {**n["metadata"]["labels"], WORLD_LABEL: _world_label(index)}
        name = await cluster.create_node(
            f"{_world_label(index)}-{short}",
            NodeSpec(cpu=alloc["cpu"], memory=alloc["memory"], pods=int(alloc["pods"])),
            labels=labels,
        )
        if n["spec"]:
            await cluster.api.request(
                "PATCH",
                core_path("nodes", None, name),
                body={"spec": n["spec"]},
                content_type="application/merge-patch+json",
            )
        made[short] = await cluster.api.request("GET", core_path("nodes", None, name))
    return made


@dataclass
class RunStorage:
    """One run's copy of a world's storage objects: real names by short name."""

    classes: dict[str, str]
    volumes: dict[str, str]
    claims: dict[str, str]


STORAGE = "storage.k8s.io/v1"


def _storage_names(cluster: Cluster, world: World, index: int, tag: str) -> RunStorage:
    run = RunStorage({}, {}, {})
    for obj in world.objects:
        short = obj["metadata"]["name"]
        unique = f"{_world_label(index)}-{tag}-{short}"
        if obj["kind"] == "StorageClass":
            run.classes[short] = cluster.name(unique)
        elif obj["kind"] == "PersistentVolume":
            run.volumes[short] = cluster.name(unique)
        else:
            run.claims[short] = unique
    for pod in world.pending:  # a claim no one made keeps a name of this run too
        for claim in claim_names(pod):
            run.claims.setdefault(claim, f"{_world_label(index)}-{tag}-{claim}")
    return run


def _storage_object(cluster: Cluster, raw: Obj, run: RunStorage, nodes: Mapping[str, Obj]) -> Obj:
    """``raw`` (placement_worlds' short names) with this run's names and nodes."""
    obj: Obj = json.loads(json.dumps(raw))
    meta, spec = obj["metadata"], obj.get("spec") or {}
    kind = obj["kind"]
    table = {"StorageClass": run.classes, "PersistentVolume": run.volumes}.get(kind, run.claims)
    meta["name"] = table[meta["name"]]
    if kind == "PersistentVolumeClaim":
        meta["namespace"] = cluster.namespace
    if "storageClassName" in spec:
        spec["storageClassName"] = run.classes[spec["storageClassName"]]
    if "volumeName" in spec:
        spec["volumeName"] = run.volumes[spec["volumeName"]]
    if "claimRef" in spec:
        spec["claimRef"]["name"] = run.claims[spec["claimRef"]["name"]]
        spec["claimRef"]["namespace"] = cluster.namespace
    for labels in (meta.get("labels") or {}, (spec.get("selector") or {}).get("matchLabels") or {}):
        if FOR_CLAIM in labels:
            labels[FOR_CLAIM] = run.claims[labels[FOR_CLAIM]]
    required = (spec.get("nodeAffinity") or {}).get("required") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for e in term.get("matchExpressions") or ():
            if e["key"] == HOSTNAME:
                e["values"] = [nodes[v]["metadata"]["name"] for v in e["values"]]
    return obj


def _storage_path(kind: str, cluster: Cluster, name: str = "") -> str:
    if kind == "StorageClass":
        return core_path("storageclasses", None, name, group=STORAGE)
    if kind == "PersistentVolume":
        return core_path("persistentvolumes", None, name)
    return core_path("persistentvolumeclaims", cluster.namespace, name)


async def _create_storage(
    cluster: Cluster, world: World, index: int, tag: str, nodes: Mapping[str, Obj]
) -> RunStorage:
    """This run's copy of ``world.objects``, once every pre-bound claim is Bound by the
    PV controller (a pod whose claim is not bound yet would wait on the controller, not
    on the scheduler's decision)."""
    run = _storage_names(cluster, world, index, tag)
    prebound = []
    for raw in world.objects:
        obj = _storage_object(cluster, raw, run, nodes)
        await cluster.api.request("POST", _storage_path(obj["kind"], cluster), body=obj)
        if obj["kind"] == "PersistentVolumeClaim" and obj["spec"].get("volumeName"):
            prebound.append(obj["metadata"]["name"])
    deadline = time.monotonic() + 60
    while prebound:
        claims = await _claims(cluster, prebound)
        prebound = [n for n in prebound if _phase(claims.get(n)) != "Bound"]
        if prebound and time.monotonic() > deadline:
            raise AssertionError(f"pre-bound claims not Bound by the PV controller: {prebound}")
        await anyio.sleep(0.2)
    return run


def _phase(obj: Obj | None) -> str:
    return str(((obj or {}).get("status") or {}).get("phase") or "")


async def _claims(cluster: Cluster, names: list[str]) -> dict[str, Obj]:
    doc = await cluster.api.request("GET", core_path("persistentvolumeclaims", cluster.namespace))
    wanted = set(names)
    return {
        c["metadata"]["name"]: c for c in doc.get("items") or () if c["metadata"]["name"] in wanted
    }


async def _read_storage(cluster: Cluster, run: RunStorage) -> Storage:
    """The run's claims, PVs and classes as they are now (by their real names)."""
    claims = await _claims(cluster, list(run.claims.values()))
    doc = await cluster.api.request("GET", core_path("persistentvolumes"))
    wanted = set(run.volumes.values())
    volumes = {
        v["metadata"]["name"]: v for v in doc.get("items") or () if v["metadata"]["name"] in wanted
    }
    classes = {}
    for name in run.classes.values():
        classes[name] = await cluster.api.request(
            "GET", _storage_path("StorageClass", cluster, name)
        )
    return Storage(claims=claims, volumes=volumes, classes=classes)


async def _delete_storage(cluster: Cluster, run: RunStorage) -> None:
    """Claims, then PVs (their protection finalizer dropped: no claim holds them now),
    then classes; the run's pods are gone."""
    for name in run.claims.values():
        with contextlib.suppress(ApiFailure):
            await cluster.api.request(
                "DELETE", _storage_path("PersistentVolumeClaim", cluster, name)
            )
    for name in run.volumes.values():
        with contextlib.suppress(ApiFailure):
            await cluster.api.request("DELETE", _storage_path("PersistentVolume", cluster, name))
            await cluster.api.request(
                "PATCH",
                _storage_path("PersistentVolume", cluster, name),
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
    for name in run.classes.values():
        with contextlib.suppress(ApiFailure):
            await cluster.api.request("DELETE", _storage_path("StorageClass", cluster, name))


def _pod(
    cluster: Cluster,
    raw: Obj,
    index: int,
    nodes: Mapping[str, Obj],
    *,
    scheduler: str,
    priority: str | None,
    claims: Mapping[str, str] | None = None,
) -> Obj:
    meta = raw["metadata"]
    spec = json.loads(json.dumps(raw["spec"]))
    for volume in spec.get("volumes") or ():
        if "persistentVolumeClaim" in volume and claims is not None:
            source = volume["persistentVolumeClaim"]
            source["claimName"] = claims[source["claimName"]]
    spec["schedulerName"] = scheduler
    spec["automountServiceAccountToken"] = False
    spec["terminationGracePeriodSeconds"] = 0
    selector = spec.setdefault("nodeSelector", {})
    selector.update({RUN_LABEL: cluster.run_id, WORLD_LABEL: _world_label(index)})
    if "nodeName" in spec:
        spec["nodeName"] = nodes[spec["nodeName"]]["metadata"]["name"]
    if priority is not None:
        spec["priorityClassName"] = priority  # its class never preempts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{_world_label(index)}-{meta['name']}",
            "namespace": cluster.namespace,
            "labels": {**meta["labels"], RUN_LABEL: cluster.run_id},
        },
        "spec": spec,
    }


def _decided(pod: Obj | None) -> bool:
    if pod is None:
        return False
    if node_of(pod):
        return True
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason") not in (None, "", "SchedulingGated")
    return False


async def _settle(cluster: Cluster, names: list[str]) -> dict[str, str]:
    """Wait until every pod of ``names`` is bound or refused and nothing changed for
    :data:`QUIET` seconds; their nodes ("" for pending)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last: dict[str, str] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        pods = {n: cluster.pod(n) for n in names}
        state = {n: node_of(p) if p is not None else "" for n, p in pods.items()}
        if state != last:
            last, since = state, time.monotonic()
        elif all(_decided(p) for p in pods.values()) and time.monotonic() - since >= QUIET:
            return state
        await anyio.sleep(0.5)
    raise AssertionError(f"the run did not settle: {cluster.describe_pods(names)}")


async def _run(
    cluster: Cluster, pods: list[Obj], storage: RunStorage
) -> tuple[dict[str, str], dict[str, Seen], Storage]:
    """Create ``pods`` and wait until they settle; each one's node ("" pending), when
    the watch first showed it bound (the order binds were written in), and the run's
    storage objects as they ended (then deleted with the pods)."""
    names = [p["metadata"]["name"] for p in pods]
    seen: dict[str, Seen] = {}

    def note(kind: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if kind != "DELETED" and name in names and name not in seen and node_of(pod):
            seen[name] = Seen(len(seen), time.monotonic())

    cluster.informer.listeners.append(note)
    try:
        for p in pods:  # one at a time, in priority order (highest first)
            await cluster.api.request("POST", core_path("pods", cluster.namespace), body=p)
        placed = await _settle(cluster, names)
        ended = await _read_storage(cluster, storage)
    finally:
        cluster.informer.listeners.remove(note)
    for name in names:
        await cluster.delete_pod(name, grace=0)
    await _gone(cluster, names)
    await _delete_storage(cluster, storage)
    return placed, seen, ended


async def _gone(cluster: Cluster, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    while any(cluster.pod(n) is not None for n in names):
        if time.monotonic() > deadline:
            raise AssertionError(f"pods not gone: {[n for n in names if cluster.pod(n)]}")
        await anyio.sleep(0.2)


@dataclass(frozen=True)
class Seen:
    """When the watch first showed a pod bound: its place in that order, and the time."""

    order: int
    at: float


IN_FLIGHT = 2.0
"""Seconds within which two binds may have been decided in one order and written in the
other (both schedulers bind concurrently with deciding)."""


def _check(
    placed: Mapping[str, str],
    seen: Mapping[str, Seen],
    pods: list[Obj],
    bound: list[Obj],
    nodes: Mapping[str, Obj],
    *,
    storage: Storage,
) -> dict[str, list[str]]:
    """kube's filters on each binding of ``placed`` (``pods`` in priority order), against
    the other pods as they ended (resources, ports and anti-affinity hold at the end as at
    each decision; required affinity only grows with more pods) and the claims and PVs as
    they ended (each claim of a pod bound must be bound too). Topology spread, which
    pods placed later may break, is checked against a state the scheduler could have
    decided on: the pods bound before it, less those bound just before it, or with the
    higher-priority pods bound just after it (:data:`IN_FLIGHT`); it fails only if all
    three do."""
    by_name = {n["metadata"]["name"]: n for n in nodes.values()}
    all_nodes = list(nodes.values())
    before: list[tuple[Obj, Obj]] = [(b, by_name[b["spec"]["nodeName"]]) for b in bound]
    at: list[tuple[Obj, Obj]] = []
    for p in pods:
        where = placed.get(p["metadata"]["name"], "")
        if where:
            at.append(({**p, "spec": {**p["spec"], "nodeName": where}}, by_name[where]))
    rank = {p["metadata"]["name"]: i for i, p in enumerate(pods)}
    out: dict[str, list[str]] = {}
    for i, (pod, node) in enumerate(at):
        name = pod["metadata"]["name"]
        found = violations(pod, node, before + at[:i] + at[i + 1 :], all_nodes, storage=storage)
        for claim in claim_names(pod):
            if claim in storage.claims and not storage.claims[claim]["spec"].get("volumeName"):
                found.append("claim left unbound")
        if "topology spread" in found:
            mine = seen.get(name)
            earlier = [
                (o, n)
                for o, n in at
                if mine is not None
                and (s := seen.get(o["metadata"]["name"])) is not None
                and s.order < mine.order
            ]
            states = [earlier]
            if mine is not None:
                states.append(
                    [
                        (o, n)
                        for o, n in earlier
                        if seen[o["metadata"]["name"]].at < mine.at - IN_FLIGHT
                    ]
                )
                states.append(
                    earlier
                    + [
                        (o, n)
                        for o, n in at
                        if rank[o["metadata"]["name"]] < rank[name]
                        and (s := seen.get(o["metadata"]["name"])) is not None
                        and mine.order < s.order
                        and s.at <= mine.at + IN_FLIGHT
                    ]
                )
            if any(
                "topology spread" not in violations(pod, node, before + state, all_nodes)
                for state in states
            ):
                found.remove("topology spread")
        if found:
            out[name] = found
    return out


def _could_go(
    name: str,
    placed: Mapping[str, str],
    pods: list[Obj],
    bound: list[Obj],
    nodes: Mapping[str, Obj],
    *,
    storage: Storage,
) -> bool:
    """Could pod ``name``, left pending by the run that ended as ``placed``, still go on
    some node there by kube's filters (a pending pod that should have been placed)?"""
    by_name = {n["metadata"]["name"]: n for n in nodes.values()}
    others: list[tuple[Obj, Obj]] = [(b, by_name[b["spec"]["nodeName"]]) for b in bound]
    pod: Obj | None = None
    for p in pods:
        where = placed.get(p["metadata"]["name"], "")
        if p["metadata"]["name"] == name:
            pod = p
        elif where:
            others.append(({**p, "spec": {**p["spec"], "nodeName": where}}, by_name[where]))
    assert pod is not None, name
    return bool(fits_somewhere(pod, others, list(nodes.values()), storage=storage))


async def _world(
    cluster: Cluster, index: int, seed: int, priorities: list[str], kube_name: str
) -> dict[str, Any]:
    world = generate(seed)
    nodes = await _create_nodes(cluster, world, index)
    bound = [
        _pod(cluster, b, index, nodes, scheduler=kube_name, priority=None) for b in world.bound
    ]
    for b in bound:
        await cluster.api.request("POST", core_path("pods", cluster.namespace), body=b)
    runs: dict[str, tuple[dict[str, str], dict[str, Seen], Storage]] = {}
    pods: dict[str, list[Obj]] = {}
    for scheduler, tag in ((kube_name, "k"), (cluster.scheduler_name, "s")):
        storage = await _create_storage(cluster, world, index, tag, nodes)
        pods[scheduler] = [
            _pod(
                cluster,
                p,
                index,
                nodes,
                scheduler=scheduler,
                priority=priorities[i],
                claims=storage.claims,
            )
            for i, p in enumerate(world.pending)
        ]
        runs[scheduler] = await _run(cluster, pods[scheduler], storage)
    (kube, kube_seen, kube_storage) = runs[kube_name]
    (sluice, sluice_seen, sluice_storage) = runs[cluster.scheduler_name]
    for b in bound:
        await cluster.delete_pod(b["metadata"]["name"], grace=0)
    await _gone(cluster, [b["metadata"]["name"] for b in bound])
    for node in nodes.values():
        await cluster.api.request("DELETE", core_path("nodes", None, node["metadata"]["name"]))
        cluster.nodes.pop(node["metadata"]["name"], None)
    both = [n for n in kube if kube[n] and sluice[n]]
    mismatches = {n for n in kube if bool(kube[n]) != bool(sluice[n])}
    unexplained = sorted(
        n
        for n in mismatches
        if (not kube[n] and _could_go(n, kube, pods[kube_name], bound, nodes, storage=kube_storage))
        or (
            not sluice[n]
            and _could_go(
                n, sluice, pods[cluster.scheduler_name], bound, nodes, storage=sluice_storage
            )
        )
    )
    return {
        "world": index,
        "seed": seed,
        "nodes": len(nodes),
        "pods": len(world.pending),
        "volumeShapes": _shapes(world, index),
        "pendingKube": sorted(n for n, v in kube.items() if not v),
        "pendingSluice": sorted(n for n, v in sluice.items() if not v),
        "boundByBoth": len(both),
        "differentNode": sorted(n for n in both if kube[n] != sluice[n]),
        "mismatches": sorted(mismatches),
        "unexplainedMismatches": unexplained,
        "sluiceViolations": _check(
            sluice, sluice_seen, pods[cluster.scheduler_name], bound, nodes, storage=sluice_storage
        ),
        "kubeViolations": _check(
            kube, kube_seen, pods[kube_name], bound, nodes, storage=kube_storage
        ),
        "kube": kube,
        "sluice": sluice,
    }


@pytest.mark.skipif(kube_scheduler_binary() is None, reason="no kube-scheduler binary")
async def test_sluice_and_kube_scheduler_leave_the_same_pods_pending(
    cluster: Cluster, start_scheduler: Any, tmp_path: Path
) -> None:
    kube_name = f"kube-diff-{cluster.run_id}"
    priorities = [
        (await cluster.create_priority_class(f"diff-{i}", 1000 - i, preemption_policy="Never"))[0]
        for i in range(20)
    ]
    await start_scheduler()
    results: list[dict[str, Any]] = []
    with KubeScheduler(cluster.kubeconfig or "", tmp_path, kube_name) as kube:
        for index in range(WORLDS):
            assert kube.running(), kube.tail()
            results.append(await _world(cluster, index, SEED + index, priorities, kube_name))
            _report(results)
    print(json.dumps(_report(results)))
    keys = ("seed", "pendingKube", "pendingSluice", "unexplainedMismatches")
    keys += ("sluiceViolations", "kubeViolations")
    bad = [
        {k: r[k] for k in keys}
        for r in results
        if r["unexplainedMismatches"] or r["sluiceViolations"] or r["kubeViolations"]
    ]
    assert not bad, json.dumps(bad, indent=1)


def _shapes(world: World, index: int) -> dict[str, str]:
    """Each pod with a volume (its name in the runs) → its volume shape."""
    return {f"{_world_label(index)}-{p}": s for p, s in sorted(world.volume_shapes.items())}


def _report(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of ``results``, written with them to ``SLUICE_DIFF_REPORT`` when set
    (after every world, so that a run cut short keeps what it did)."""
    both = sum(r["boundByBoth"] for r in results)
    differ = sum(len(r["differentNode"]) for r in results)
    summary = {
        "worlds": len(results),
        "pods": sum(r["pods"] for r in results),
        "volumeWorlds": sum(1 for r in results if r["volumeShapes"]),
        "volumePods": sum(len(r["volumeShapes"]) for r in results),
        "volumeShapes": dict(
            sorted(Counter(s for r in results for s in r["volumeShapes"].values()).items())
        ),
        "volumePodsPending": {
            who: sum(
                1 for r in results for n in r["volumeShapes"] if n in r[f"pending{who.title()}"]
            )
            for who in ("kube", "sluice")
        },
        "pendingMismatches": sum(len(r["mismatches"]) for r in results),
        "unexplainedMismatches": sum(len(r["unexplainedMismatches"]) for r in results),
        "sluiceViolations": sum(len(r["sluiceViolations"]) for r in results),
        "kubeViolations": sum(len(r["kubeViolations"]) for r in results),
        "boundByBoth": both,
        "differentNode": differ,
        "differentNodeShare": round(differ / both, 3) if both else 0.0,
    }
    if REPORT:
        report = {"summary": summary, "worlds": results}
        Path(REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return summary
