"""What the live page shows of storage (layer 4, live): per node, its local volumes.

:func:`local_volumes` counts, per node, the PersistentVolumes that only it can use (a
node affinity that admits it alone: local disks, and the PVs provisioned on it) and how
many of them are bound to a claim, as the watch events left them. A PV whose affinity
admits several nodes (a zone's), or none, is counted nowhere. One pass over the PVs and,
for those whose affinity is not a plain ``kubernetes.io/hostname`` term, over the nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.node import NodeInfo
from scheduler.api.volumes.model import PvInfo

HOSTNAME = "kubernetes.io/hostname"


def _hostname_only(pv: PvInfo) -> str | None:
    """The one hostname a PV's affinity names, when it is a single ``In`` of one value
    on ``kubernetes.io/hostname`` (the common local PV), else None."""
    terms = pv.node_affinity
    if terms is None or len(terms) != 1 or terms[0].fields or len(terms[0].labels) != 1:
        return None
    req = terms[0].labels[0]
    if req.key != HOSTNAME or req.operator != "In" or len(req.values) != 1:
        return None
    return req.values[0]


def local_volumes(
    volumes: Mapping[str, PvInfo], nodes: Mapping[str, NodeInfo]
) -> dict[str, tuple[int, int]]:
    """Per node name: (its local PVs, how many of them are bound)."""
    by_host: dict[str, list[str]] = {}
    for name, node in nodes.items():
        by_host.setdefault(node.labels.get(HOSTNAME, name), []).append(name)
    out: dict[str, tuple[int, int]] = {}
    for pv in volumes.values():
        if pv.node_affinity is None:
            continue
        host = _hostname_only(pv)
        if host is not None:
            admitted = by_host.get(host, [])
        else:
            admitted = [name for name, node in nodes.items() if pv.allows(node.labels)]
        if len(admitted) != 1:
            continue
        total, bound = out.get(admitted[0], (0, 0))
        out[admitted[0]] = (total + 1, bound + (pv.claim_ref is not None and pv.phase == "Bound"))
    return out
