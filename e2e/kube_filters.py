"""kube-scheduler's filters, written again for the differential test from kube's plugins
(NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
PodTopologySpread, InterPodAffinity of v1.36, and for ``persistentVolumeClaim`` volumes
VolumeRestrictions' ReadWriteOncePod rule, VolumeZone and VolumeBinding's static
matching), node by node, plainly: a checker of the test's own that shares no code with
Sluice.

:func:`violations` says why a pod bound to a node would not pass kube's filters there,
given every other pod bound in the cluster: the placement as it stands at the end of a
run (the pod itself left out) must be one kube-scheduler allows; :func:`fits_somewhere`
where a pod left pending could still go. Objects are the API server's JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

Obj = Mapping[str, Any]

_SUFFIX: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("0.001"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
POD_LEVEL = ("cpu", "memory")
HOSTNAME = "kubernetes.io/hostname"


def quantity(text: object) -> Decimal:
    s = str(text)
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suffix) and s[: -len(suffix)]:
            return Decimal(s[: -len(suffix)]) * _SUFFIX[suffix]
    return Decimal(s)


def _requests(c: Obj) -> dict[str, Decimal]:
    res = c.get("resources") or {}
    out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
    out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def _add(a: dict[str, Decimal], b: Mapping[str, Decimal]) -> None:
    for k, v in b.items():
        a[k] = a.get(k, Decimal(0)) + v


def requests(pod: Obj) -> dict[str, Decimal]:
    """kube's PodRequests: containers, sidecars, init containers, pod level, overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        _add(total, _requests(c))
    sidecars: dict[str, Decimal] = {}
    inits: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or ():
        req = _requests(c)
        if c.get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
        for k, v in step.items():
            inits[k] = max(inits.get(k, v), v)
    for k, v in inits.items():
        total[k] = max(total.get(k, v), v)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    for k, v in pod_level.items():
        if k in POD_LEVEL or k.startswith("hugepages-"):
            total[k] = quantity(v)
    _add(total, {k: quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    total["pods"] = Decimal(1)
    return total


def _labels(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ns(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def _expression(expr: Obj, labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if key not in labels:
        return False
    try:
        have, want = int(labels[key]), int(values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (null: nothing)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or ())


def _node_term(term: Obj, node: Obj) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    name = {"metadata.name": node["metadata"]["name"]}
    return all(_expression(e, _labels(node)) for e in exprs) and all(
        _expression(f, name) for f in fields
    )


def node_affinity_ok(pod: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity (NodeAffinity's filter)."""
    spec = pod.get("spec") or {}
    labels = _labels(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_node_term(t, node) for t in required.get("nodeSelectorTerms") or ())


def _tolerates(tol: Obj, taint: Obj) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if not tol.get("key"):
        return tol.get("operator") == "Exists"
    if tol["key"] != taint.get("key"):
        return False
    return tol.get("operator") == "Exists" or tol.get("value", "") == taint.get("value", "")


def taints_ok(pod: Obj, node: Obj) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in (node.get("spec") or {}).get("taints") or ()
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def _ports(pod: Obj) -> list[tuple[str, str, int]]:
    out = []
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for p in c.get("ports") or ():
            if p.get("hostPort"):
                out.append((p.get("protocol", "TCP"), p.get("hostIP") or "0.0.0.0", p["hostPort"]))
    return out


def ports_ok(pod: Obj, others: Iterable[Obj]) -> bool:
    used = [u for o in others for u in _ports(o)]
    for proto, ip, port in _ports(pod):
        for uproto, uip, uport in used:
            if (uproto, uport) == (proto, port) and (ip == uip or "0.0.0.0" in (ip, uip)):
                return False
    return True


def _term_namespaces(
    term: Obj, owner: Obj, namespaces: Mapping[str, Mapping[str, str]]
) -> set[str] | None:
    listed = set(term.get("namespaces") or ())
    selector = term.get("namespaceSelector")
    if selector is None:
        return listed or {_ns(owner)}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return None
    return listed | {n for n, labels in namespaces.items() if selector_matches(selector, labels)}


def _selects(term: Obj, owner: Obj, pod: Obj, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
    scope = _term_namespaces(term, owner, namespaces)
    if scope is not None and _ns(pod) not in scope:
        return False
    return selector_matches(term.get("labelSelector"), _labels(pod))


def _same_domain(a: Obj, b: Obj, key: str) -> bool:
    la, lb = _labels(a), _labels(b)
    return key in la and key in lb and la[key] == lb[key]


def inter_pod_affinity_ok(
    pod: Obj,
    node: Obj,
    placed: Sequence[tuple[Obj, Obj]],
    namespaces: Mapping[str, Mapping[str, str]],
) -> list[str]:
    """InterPodAffinity's filter; ``placed``: (pod, its node) of every other pod."""
    out = []
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    terms = (affinity.get("podAffinity") or {}).get(required) or []
    if terms:
        holders = [(o, n) for o, n in placed if all(_selects(t, pod, o, namespaces) for t in terms)]
        has_keys = all(t["topologyKey"] in _labels(node) for t in terms)
        near = all(any(_same_domain(node, n, t["topologyKey"]) for _, n in holders) for t in terms)
        any_pair = any(t["topologyKey"] in _labels(n) for _, n in holders for t in terms)
        itself = all(_selects(t, pod, pod, namespaces) for t in terms)
        if not (has_keys and (near or (not any_pair and itself))):
            out.append("pod affinity")
    for t in (affinity.get("podAntiAffinity") or {}).get(required) or []:
        if any(
            _same_domain(node, n, t["topologyKey"]) and _selects(t, pod, o, namespaces)
            for o, n in placed
        ):
            out.append("pod anti-affinity")
    for o, n in placed:
        other = (o.get("spec") or {}).get("affinity") or {}
        for t in (other.get("podAntiAffinity") or {}).get(required) or []:
            if _same_domain(node, n, t["topologyKey"]) and _selects(t, o, pod, namespaces):
                out.append("existing pods' anti-affinity")
    return out


def spread_ok(pod: Obj, node: Obj, placed: Sequence[tuple[Obj, Obj]], nodes: Sequence[Obj]) -> bool:
    """PodTopologySpread's filter (DoNotSchedule constraints)."""
    constraints = [
        c
        for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or ()
        if c.get("whenUnsatisfiable") == "DoNotSchedule"
    ]
    if not constraints:
        return True
    keys = [c["topologyKey"] for c in constraints]
    labels = _labels(pod)
    for c in constraints:
        key = c["topologyKey"]
        if key not in _labels(node):
            return False
        selector = c.get("labelSelector")

        def eligible(n: Obj, c: Obj = c) -> bool:
            if not all(k in _labels(n) for k in keys):
                return False
            if c.get("nodeAffinityPolicy", "Honor") == "Honor" and not node_affinity_ok(pod, n):
                return False
            return not (c.get("nodeTaintsPolicy", "Ignore") == "Honor" and not taints_ok(pod, n))

        counts: dict[str, int] = {}
        for n in nodes:
            if eligible(n):
                counts.setdefault(_labels(n)[key], 0)
        empty = (
            selector is not None
            and not selector.get("matchLabels")
            and not selector.get("matchExpressions")
        )
        if not empty:
            for o, n in placed:
                if eligible(n) and _ns(o) == _ns(pod) and selector_matches(selector, _labels(o)):
                    counts[_labels(n)[key]] += 1
        lowest = 0 if len(counts) < c.get("minDomains", 1) else min(counts.values(), default=0)
        mine = 1 if selector_matches(selector, labels) else 0
        if counts.get(_labels(node)[key], 0) + mine - lowest > c["maxSkew"]:
            return False
    return True


@dataclass(frozen=True)
class Storage:
    """The storage objects of one namespace as they ended: claims (by name), PVs and
    StorageClasses (by name)."""

    claims: Mapping[str, Obj] = field(default_factory=dict)
    volumes: Mapping[str, Obj] = field(default_factory=dict)
    classes: Mapping[str, Obj] = field(default_factory=dict)


ZONE_KEYS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
_GA = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}


def claim_names(pod: Obj) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in (pod.get("spec") or {}).get("volumes") or ()
        if v.get("persistentVolumeClaim")
    ]


def _pv_node_ok(pv: Obj, node: Obj) -> bool:
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return True
    return any(_node_term(t, node) for t in required.get("nodeSelectorTerms") or ())


def _pv_zone_ok(pv: Obj, node: Obj) -> bool:
    """VolumeZone: each zone or region label of the PV holds on the node (values joined
    by ``__`` are alternatives); a node with none of these labels passes."""
    labels = _labels(node)
    node_zones = {_GA.get(k, k): v for k, v in labels.items() if k in ZONE_KEYS}
    if not node_zones:
        return True
    for key, value in _labels(pv).items():
        if key in ZONE_KEYS and node_zones.get(_GA.get(key, key)) not in value.split("__"):
            return False
    return True


def _available_for(pv: Obj, claim: Obj) -> bool:
    """VolumeBinding's static match of an unbound claim: a PV no claim holds, of the
    claim's class and volume mode, at least its size, with its access modes, selected."""
    spec, want = pv.get("spec") or {}, claim.get("spec") or {}
    if spec.get("claimRef") or (pv.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if spec.get("storageClassName", "") != want.get("storageClassName", ""):
        return False
    if spec.get("volumeMode", "Filesystem") != want.get("volumeMode", "Filesystem"):
        return False
    asked = (want.get("resources") or {}).get("requests", {}).get("storage", "0")
    if quantity(spec.get("capacity", {}).get("storage", "0")) < quantity(asked):
        return False
    if not set(want.get("accessModes") or ()) <= set(spec.get("accessModes") or ()):
        return False
    selector = want.get("selector")
    return selector is None or selector_matches(selector, _labels(pv))


def volume_violations(
    pod: Obj, node: Obj, placed: Sequence[tuple[Obj, Obj]], storage: Storage
) -> list[str]:
    """Why kube's volume filters refuse ``pod`` on ``node``: a claim missing; a bound
    claim's PV missing, or its node affinity or zone not the node's; an unbound claim of
    a class that does not wait for its consumer; an unbound one with no available PV
    that fits and may sit on the node; a ReadWriteOncePod claim another pod of
    ``placed`` uses."""
    out = []
    for name in claim_names(pod):
        claim = storage.claims.get(name)
        if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
            out.append("claim missing")
            continue
        spec = claim.get("spec") or {}
        if "ReadWriteOncePod" in (spec.get("accessModes") or ()) and any(
            _ns(o) == _ns(pod) and name in claim_names(o) for o, _ in placed
        ):
            out.append("ReadWriteOncePod claim in use")
        if spec.get("volumeName"):
            pv = storage.volumes.get(spec["volumeName"])
            if pv is None:
                out.append("bound PV missing")
            elif not _pv_node_ok(pv, node):
                out.append("volume node affinity")
            elif not _pv_zone_ok(pv, node):
                out.append("volume zone")
            continue
        mode = (storage.classes.get(spec.get("storageClassName", "")) or {}).get(
            "volumeBindingMode"
        )
        if mode != "WaitForFirstConsumer":
            out.append("unbound immediate claim")
        elif not any(
            _available_for(pv, claim) and _pv_node_ok(pv, node) for pv in storage.volumes.values()
        ):
            out.append("no PV to bind")
    return out


def violations(
    pod: Obj,
    node: Obj,
    placed: Sequence[tuple[Obj, Obj]],
    nodes: Sequence[Obj],
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    *,
    storage: Storage | None = None,
) -> list[str]:
    """Why kube-scheduler's filters refuse ``pod`` on ``node`` where ``placed`` are the
    other pods bound (each with its node), and ``storage`` the claims and PVs (for a pod
    bound, its claims as bound); empty when they allow it."""
    namespaces = namespaces or {}
    out = []
    if claim_names(pod):
        out.extend(volume_violations(pod, node, placed, storage or Storage()))
    spec = node.get("spec") or {}
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    if spec.get("unschedulable") and not any(_tolerates(t, unschedulable) for t in tolerations):
        out.append("node unschedulable")
    if not node_affinity_ok(pod, node):
        out.append("node affinity")
    if not taints_ok(pod, node):
        out.append("untolerated taint")
    on_node = [o for o, n in placed if n["metadata"]["name"] == node["metadata"]["name"]]
    if not ports_ok(pod, on_node):
        out.append("host ports")
    allocatable = {
        k: quantity(v) for k, v in (node.get("status") or {}).get("allocatable", {}).items()
    }
    used: dict[str, Decimal] = {}
    for o in on_node:
        _add(used, requests(o))
    for name, amount in requests(pod).items():
        if amount > 0 and used.get(name, Decimal(0)) + amount > allocatable.get(name, Decimal(0)):
            out.append(f"insufficient {name}")
    if not spread_ok(pod, node, placed, nodes):
        out.append("topology spread")
    out.extend(inter_pod_affinity_ok(pod, node, placed, namespaces))
    return out


def fits_somewhere(
    pod: Obj,
    placed: Sequence[tuple[Obj, Obj]],
    nodes: Sequence[Obj],
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    *,
    storage: Storage | None = None,
) -> list[str]:
    """The names of the nodes where kube-scheduler's filters allow ``pod`` beside
    ``placed`` (empty: it fits nowhere, and a scheduler that left it pending there was
    right to)."""
    return [
        n["metadata"]["name"]
        for n in nodes
        if not violations(pod, n, placed, nodes, namespaces, storage=storage)
    ]
