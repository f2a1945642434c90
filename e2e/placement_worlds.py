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

Adding to the worlds (volumes, say): a :data:`Feature` is a function given the random
source, the world so far and one pending pod's manifest; it may change the pod and add
objects to ``world.objects`` (created before any pod: StorageClasses, PersistentVolumes,
claims). Append it to :data:`FEATURES`; the runner creates ``world.objects`` in order
and the checker (:mod:`kube_filters`) is where the matching filter goes.
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
        world.pending.append(pod)
    return world
