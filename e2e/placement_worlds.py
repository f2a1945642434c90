"""Ordinary worlds for the differential test against kube-scheduler (issue 37).

:func:`generate` makes one world from a seed: nodes with zones, labels, taints and sizes;
a few pods already bound; and the pods to place, in order, each with what an ordinary
workload asks: requests (or none, or pod-level ones), node selectors and affinity,
tolerations, host ports, required and preferred pod (anti-)affinity, topology spread.
Manifests are plain JSON without what a run adds (namespace, names' prefix, scheduler
name, its nodes' selector): :mod:`test_placement_differential` fills those in.

The worlds are made so that which pods stay pending does not depend on a scheduler's
choice among equally good nodes: capacity is ample beside what the pods ask, the pods
come with distinct priorities (both schedulers take them in that order) and never
preempt, and what makes a pod unschedulable is a rule of its own (a selector no node
matches, a taint it does not tolerate, an affinity no pod satisfies, a spread it cannot
keep) or a port, anti-affinity or spread it shares with pods placed before it.

Some worlds carry volumes (:class:`Volumes`, with a random source of its own, so that
the worlds of a seed without them are the worlds earlier runs saw): StorageClasses (a
local one that waits for the first consumer, an Immediate one, a zonal CSI one, all
without a provisioner), PersistentVolumes (local disks pinned to a node by their node
affinity, zonal CSI disks pinned to a zone, a CSI disk anywhere) and claims, as a user
writes them for static volumes: a claim pre-bound to its PV, an unbound
WaitForFirstConsumer claim whose static PVs (selected by a label of its own, on one or
two nodes; now and then too small) wait for the scheduler's choice, a claim that does
not exist, an unbound claim of the Immediate class with no PV, and a ReadWriteOncePod
claim two pods mount (the next pod with a volume after the one that made it). Nothing
needs a provisioner or a kubelet: the PV controller of the controller manager binds the
pre-bound pairs before the pods come and the claims the scheduler chose a PV for. Each
claim has PVs of its own, so which pods stay pending does not depend on which PV a
scheduler took for another pod. The objects are in ``world.objects`` with short names
(classes first, then PVs, then claims; node names in a PV's hostname affinity are the
world's short ones): the runner makes a fresh copy per scheduler, since a run binds them.

Adding to the worlds: a :data:`Feature` is a function given the random source, the
world so far and one pending pod's manifest; it may change the pod and add objects to
``world.objects``. Append it to :data:`FEATURES` (its draws change every later pod of
the seed's world) and put the matching filter in the checker (:mod:`kube_filters`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ZONES = ("z1", "z2", "z3")
APPS = ("web", "db", "cache", "batch")


@dataclass
class World:
    """One world: nodes (by short name), pods already bound, pods to place in order,
    and other objects created before the pods."""

    seed: int
    nodes: list[Obj] = field(default_factory=list)
    bound: list[Obj] = field(default_factory=list)
    pending: list[Obj] = field(default_factory=list)
    objects: list[Obj] = field(default_factory=list)
    volume_shapes: dict[str, str] = field(default_factory=dict)
    """Pod short name → the volume shape :class:`Volumes` gave it."""


Feature = Callable[[random.Random, World, Obj], None]


def _node(rng: random.Random, i: int) -> Obj:
    name = f"n{i}"
    labels = {"disktype": rng.choice(("ssd", "hdd")), "tier": rng.choice(("a", "b"))}
    if rng.random() < 0.9:
        labels[ZONE] = ZONES[i % len(ZONES)] if i < len(ZONES) else rng.choice(ZONES)
    taints = []
    if rng.random() < 0.15:
        taints.append({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    if rng.random() < 0.15:
        taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
    spec: Obj = {"taints": taints} if taints else {}
    if rng.random() < 0.05:
        spec["unschedulable"] = True
    cpu = rng.choice(("4", "8", "16"))
    memory = rng.choice(("8Gi", "16Gi", "32Gi"))
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
    }


def _container(rng: random.Random, *, asks: bool = True) -> Obj:
    c: Obj = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if asks:
        cpu = rng.choice(("100m", "250m", "500m"))
        memory = rng.choice(("64Mi", "256Mi", "512Mi"))
        c["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return c


def _term(app: str, key: str) -> Obj:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def requests(rng: random.Random, world: World, pod: Obj) -> None:
    """Requests: per container (most pods), none, pod level, with an init container."""
    del world
    spec = pod["spec"]
    roll = rng.random()
    if roll < 0.12:
        spec["containers"] = [_container(rng, asks=False)]
    elif roll < 0.27:
        spec["containers"] = [_container(rng, asks=False), {**_container(rng), "name": "side"}]
        spec["resources"] = {"requests": {"cpu": rng.choice(("500m", "1")), "memory": "512Mi"}}
    elif roll < 0.35:
        spec["containers"] = [_container(rng)]
        spec["initContainers"] = [{**_container(rng), "name": "init"}]
    else:
        spec["containers"] = [_container(rng)]


def node_rules(rng: random.Random, world: World, pod: Obj) -> None:
    """nodeSelector, required and preferred node affinity, tolerations."""
    del world
    spec = pod["spec"]
    if rng.random() < 0.15:
        spec.setdefault("nodeSelector", {})["disktype"] = "ssd"
    if rng.random() < 0.03:
        spec.setdefault("nodeSelector", {})["disktype"] = "nvme"  # no node has it
    affinity = spec.setdefault("affinity", {})
    if rng.random() < 0.1:
        affinity["nodeAffinity"] = {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1", "z2"]}]}
                ]
            }
        }
    elif rng.random() < 0.1:
        affinity["nodeAffinity"] = {
            PREFERRED: [
                {
                    "weight": rng.choice((10, 50)),
                    "preference": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b"]}]
                    },
                }
            ]
        }
    if rng.random() < 0.2:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ]


def host_ports(rng: random.Random, world: World, pod: Obj) -> None:
    del world
    if rng.random() < 0.1:
        main = pod["spec"]["containers"][0]
        main["ports"] = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]


def pod_affinity(rng: random.Random, world: World, pod: Obj) -> None:
    """Required and preferred pod affinity and anti-affinity."""
    del world
    app = pod["metadata"]["labels"]["app"]
    affinity = pod["spec"].setdefault("affinity", {})
    roll = rng.random()
    if roll < 0.08:
        affinity["podAffinity"] = {REQUIRED: [_term(rng.choice(APPS), ZONE)]}
    elif roll < 0.2:
        key = rng.choice((HOSTNAME, ZONE))
        affinity["podAntiAffinity"] = {REQUIRED: [_term(app, key)]}
    elif roll < 0.35:
        kind = rng.choice(("podAffinity", "podAntiAffinity"))
        affinity[kind] = {
            PREFERRED: [
                {
                    "weight": rng.choice((10, 50, 100)),
                    "podAffinityTerm": _term(rng.choice(APPS), rng.choice((HOSTNAME, ZONE))),
                }
            ]
        }


def spread(rng: random.Random, world: World, pod: Obj) -> None:
    """Topology spread over zones or hosts, DoNotSchedule or ScheduleAnyway."""
    del world
    if rng.random() >= 0.3:
        return
    app = pod["metadata"]["labels"]["app"]
    hard = rng.random() < 0.6
    constraint: Obj = {
        "maxSkew": rng.choice((1, 1, 2)),
        "topologyKey": rng.choice((ZONE, ZONE, HOSTNAME)),
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": app}},
    }
    if hard and rng.random() < 0.2:
        constraint["minDomains"] = rng.choice((2, 4))
    if rng.random() < 0.15:
        constraint["nodeTaintsPolicy"] = "Honor"
    pod["spec"]["topologySpreadConstraints"] = [constraint]


def too_big(rng: random.Random, world: World, pod: Obj) -> None:
    """Now and then a pod no node can hold (at the pod level when it asks there: the API
    server refuses pod-level requests below the containers')."""
    del world
    if rng.random() < 0.04:
        if "resources" in pod["spec"]:
            pod["spec"]["resources"]["requests"]["cpu"] = "64"
        else:
            pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "64"}}


FEATURES: list[Feature] = [requests, node_rules, host_ports, pod_affinity, spread, too_big]
"""What a pending pod may ask, applied in order (module docstring: adding to them)."""


LOCAL_CLASS = "local"
"""WaitForFirstConsumer, no provisioner: local disks."""
MANUAL_CLASS = "manual"
"""Immediate, no provisioner: claims bound as soon as a PV fits."""
ZONAL_CLASS = "zonal"
"""Immediate, no provisioner: CSI disks of one zone, pre-bound."""
NO_PROVISIONER = "kubernetes.io/no-provisioner"
ZONAL_DRIVER = "zonal.diff.sluice.dev"
FOR_CLAIM = "diff.sluice.dev/for-claim"
VOLUME_SHAPES = (
    ("bound-local", 0.25),
    ("bound-zonal", 0.15),
    ("wait-for-consumer", 0.3),
    ("missing-claim", 0.08),
    ("unbound-immediate", 0.07),
    ("read-write-once-pod", 0.15),
)


def _class(name: str, mode: str) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": NO_PROVISIONER,
        "volumeBindingMode": mode,
        "reclaimPolicy": "Retain",
    }


def _affinity(key: str, value: str) -> Obj:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


class Volumes:
    """The volumes of one world: :meth:`apply` gives a pending pod one volume shape (or
    none) and adds what it mounts to ``world.objects``; :meth:`finish` puts the classes
    first. Its draws come from a random source of its own."""

    def __init__(self, seed: int, world: World) -> None:
        self.rng = random.Random(f"volumes-{seed}")
        self.world = world
        self.on = self.rng.random() < 0.6
        self.volumes: list[Obj] = []
        self.claims: list[Obj] = []
        self.open_rwop: str | None = None

    def apply(self, pod: Obj) -> None:
        if not self.on or self.rng.random() >= 0.45:
            return
        rng = self.rng
        name = pod["metadata"]["name"]
        roll, shape = rng.random(), VOLUME_SHAPES[-1][0]
        for candidate, weight in VOLUME_SHAPES:
            if roll < weight:
                shape = candidate
                break
            roll -= weight
        if self.open_rwop is not None:  # the next pod with a volume shares it
            claim, self.open_rwop = self.open_rwop, None
            shape = "read-write-once-pod-shared"
        else:
            claim = f"data-{name}"
            self._make(shape, claim, node=rng.choice(self.world.nodes)["metadata"]["name"])
            if shape == "read-write-once-pod":
                self.open_rwop = claim
        self.world.volume_shapes[name] = shape
        spec = pod["spec"]
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]

    def _make(self, shape: str, claim: str, *, node: str) -> None:
        rng = self.rng
        if shape == "bound-local":
            self._pv(f"pv-{claim}", LOCAL_CLASS, local=node, claim=claim)
            self._claim(claim, LOCAL_CLASS, volume=f"pv-{claim}")
        elif shape == "bound-zonal":
            zone = rng.choice(ZONES)
            self._pv(f"pv-{claim}", ZONAL_CLASS, zone=zone, claim=claim)
            self._claim(claim, ZONAL_CLASS, volume=f"pv-{claim}")
        elif shape == "wait-for-consumer":
            small = rng.random() < 0.2  # no PV fits: pending
            names = rng.sample(
                [n["metadata"]["name"] for n in self.world.nodes], rng.choice((1, 2))
            )
            for i, on in enumerate(names):
                size = "512Mi" if small else rng.choice(("1Gi", "2Gi"))
                self._pv(f"pv-{claim}-{i}", LOCAL_CLASS, local=on, size=size, label=claim)
            self._claim(claim, LOCAL_CLASS, select=claim)
        elif shape == "unbound-immediate":
            self._claim(claim, MANUAL_CLASS)
        elif shape == "read-write-once-pod":
            mode = ["ReadWriteOncePod"]
            self._pv(f"pv-{claim}", MANUAL_CLASS, claim=claim, modes=mode)
            self._claim(claim, MANUAL_CLASS, volume=f"pv-{claim}", modes=mode)
        # missing-claim: nothing is made

    def _pv(
        self,
        name: str,
        storage_class: str,
        *,
        local: str | None = None,
        zone: str | None = None,
        claim: str | None = None,
        size: str = "1Gi",
        label: str | None = None,
        modes: list[str] | None = None,
    ) -> None:
        spec: Obj = {
            "capacity": {"storage": size},
            "accessModes": modes or ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
        }
        labels: dict[str, str] = {}
        if local is not None:
            spec["local"] = {"path": f"/mnt/disks/{name}"}
            spec["nodeAffinity"] = _affinity(HOSTNAME, local)
        else:
            spec["csi"] = {"driver": ZONAL_DRIVER, "volumeHandle": name}
            if zone is not None:
                spec["nodeAffinity"] = _affinity(ZONE, zone)
                labels[ZONE] = zone
        if claim is not None:
            spec["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim}
        if label is not None:
            labels[FOR_CLAIM] = label
        meta: Obj = {"name": name, "labels": labels} if labels else {"name": name}
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}
        self.volumes.append(pv)

    def _claim(
        self,
        name: str,
        storage_class: str,
        *,
        volume: str | None = None,
        select: str | None = None,
        modes: list[str] | None = None,
    ) -> None:
        spec: Obj = {
            "accessModes": modes or ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        }
        if volume is not None:
            spec["volumeName"] = volume
        if select is not None:
            spec["selector"] = {"matchLabels": {FOR_CLAIM: select}}
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.claims.append(claim)

    def finish(self) -> None:
        """Classes, then PVs, then claims into ``world.objects`` (nothing without volumes)."""
        if not self.world.volume_shapes:
            return
        self.world.objects += [
            _class(LOCAL_CLASS, "WaitForFirstConsumer"),
            _class(MANUAL_CLASS, "Immediate"),
            _class(ZONAL_CLASS, "Immediate"),
            *self.volumes,
            *self.claims,
        ]


def _drop_empty_affinity(pod: Obj) -> None:
    if not pod["spec"].get("affinity"):
        pod["spec"].pop("affinity", None)


def generate(
    seed: int, *, nodes: tuple[int, int] = (4, 7), pods: tuple[int, int] = (9, 14)
) -> World:
    """The world of ``seed`` (the same seed, the same world)."""
    rng = random.Random(seed)
    world = World(seed)
    world.nodes = [_node(rng, i) for i in range(rng.randint(*nodes))]
    volumes = Volumes(seed, world)
    for j in range(rng.randint(0, 4)):
        node = rng.choice(world.nodes)
        app = rng.choice(APPS)
        pod: Obj = {
            "metadata": {"name": f"b{j}", "labels": {"app": app}},
            "spec": {"nodeName": node["metadata"]["name"], "containers": [_container(rng)]},
        }
        if rng.random() < 0.3:
            pod["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [_term(app, HOSTNAME)]}}
        world.bound.append(pod)
    for i in range(rng.randint(*pods)):
        pod = {
            "metadata": {"name": f"p{i:02d}", "labels": {"app": rng.choice(APPS)}},
            "spec": {"containers": [_container(rng)]},
        }
        for feature in FEATURES:
            feature(rng, world, pod)
        _drop_empty_affinity(pod)
        volumes.apply(pod)
        world.pending.append(pod)
    volumes.finish()
    return world
