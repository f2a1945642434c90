"""Where ``bench real``'s placement shapes put their pods, and whether a hard rule broke.

After a run of a shape with placement rules (:data:`bench.real_cluster.PLACEMENT`), the
run's pods are listed and counted by the label their rules select (``color``): per node,
and per zone where the nodes have zones. The figures say how each scheduler spread or
packed them (the preferred rules are scores: schedulers may differ) and count what broke
a hard rule: a zone skew over maxSkew (DoNotSchedule spread), two pods on one node
(required anti-affinity). A check of the bench's own, from the objects, not Sluice's
code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from bench import real_cluster as rc
from scheduler.kube import KubeClient
from scheduler.kube.resource_paths import NODES, PODS

MAX_SKEW: Final = 5
"""scheduler_perf's maxSkew of the spread shapes (:func:`bench.real_cluster._spread`)."""
HARD: Final = {"spread": "zone_skew", "anti-affinity": "nodes_with_two"}
"""The placements whose rule is hard, and the figure that counts what broke it."""


def placement_figures(
    placement: str, run: str, pods: Iterable[Mapping[str, Any]], zones: Mapping[str, str]
) -> dict[str, Any]:
    """The figures of ``placement`` (a key of :data:`~bench.real_cluster.PLACEMENT`) for
    ``pods`` (API objects; the bound ones count) on nodes whose zone is ``zones[name]``
    (empty: no zones). ``violations``: pods or zones breaking a hard rule (0 is right),
    None for a preferred rule."""
    labels, _ = rc.PLACEMENT[placement](run)
    [(key, value)] = labels.items()
    per_node: Counter[str] = Counter()
    for pod in pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node and ((pod.get("metadata") or {}).get("labels") or {}).get(key) == value:
            per_node[node] += 1
    out: dict[str, Any] = {
        "selector": f"{key}={value}",
        "bound": sum(per_node.values()),
        "nodes_used": len(per_node),
        "most_on_a_node": max(per_node.values(), default=0),
        "pods_sharing_a_node": sum(n for n in per_node.values() if n > 1),
        "nodes_with_two": sum(1 for n in per_node.values() if n > 1),
    }
    if zones:
        per_zone = dict.fromkeys(sorted(set(zones.values())), 0)
        for node, n in per_node.items():
            per_zone[zones[node]] += n
        out["zone_counts"] = per_zone
        out["zone_skew"] = max(per_zone.values()) - min(per_zone.values())
    if placement == "spread":
        out["violations"] = max(out["zone_skew"] - MAX_SKEW, 0)
    elif placement == "anti-affinity":
        out["violations"] = out["nodes_with_two"]
    else:
        out["violations"] = None
    return out


async def check_placement(api: KubeClient, shape: rc.Shape, run: str) -> dict[str, Any]:
    """:func:`placement_figures` for ``run``'s pods and nodes as the server has them."""
    pods, _ = await rc.list_all(api, PODS.path(run))
    zones: dict[str, str] = {}
    if shape.zones:
        nodes, _ = await rc.list_all(
            api, NODES.path(), [("labelSelector", f"{rc.RUN_LABEL}={run}")]
        )
        for node in nodes:
            meta = node.get("metadata") or {}
            zone = (meta.get("labels") or {}).get(rc.ZONE)
            if zone is not None:
                zones[str(meta.get("name"))] = str(zone)
    return placement_figures(shape.placement, run, pods, zones)
