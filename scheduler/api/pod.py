"""What the scheduler reads from a pod's spec (layer 0).

:func:`parse_pod_spec` turns the ``spec`` of a Kubernetes pod (a JSON dict) into a frozen
:class:`PodSpecView`: the resource request computed as Kubernetes computes it, and the
placement constraints predicates and scores need, parsed once. ``shape`` groups pods
whose static placement constraints are identical, so predicates can cache per shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import (
    LabelSelector,
    Requirement,
    parse_label_selector,
    parse_requirement,
)
from scheduler.api.pod_resources import as_map, as_maps, container_amounts, pod_requests
from scheduler.api.resource import MAX_AMOUNT, PODS, ZERO, Resource, over_max
from scheduler.api.spread import SpreadConstraint, parse_spread
from scheduler.api.volumes.refs import PodVolume, parse_volumes


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" | "Exists"
    value: str
    effect: str  # "" means every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # "NoSchedule" | "PreferNoSchedule" | "NoExecute"


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements on node labels (matchExpressions) and fields (matchFields, metadata.name)."""

    labels: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.labels and not self.fields:
            return False  # an empty term matches no objects, as in Kubernetes
        if not all(r.matches(labels) for r in self.labels):
            return False
        fields = {"metadata.name": node_name}
        return all(r.matches(fields) for r in self.fields)


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """Pods matching ``selector`` in ``namespaces`` or in the namespaces whose labels
    ``namespace_selector`` matches (neither given: the pod's own namespace; an empty
    namespace selector: every namespace), counted per domain of ``topology_key``."""

    selector: LabelSelector
    namespaces: tuple[str, ...]
    topology_key: str
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    """A preferred pod (anti-)affinity term and its weight (1..100)."""

    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class HostPort:
    protocol: str
    host_ip: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wild = ("", "0.0.0.0")
        return self.host_ip in wild or other.host_ip in wild or self.host_ip == other.host_ip


@dataclass(frozen=True, slots=True)
class PodClaim:
    """An entry of a pod's ``spec.resourceClaims`` (DRA): a ResourceClaim by name, or one
    the claim controller makes from a ResourceClaimTemplate."""

    name: str
    claim_name: str = ""
    template_name: str = ""


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container's requests of resources named with a domain (``example.com/gpu``),
    kept for the pods that ask any: DRA may serve such a resource through a DeviceClass
    that names it (KEP-5004), and the claim made for it names its requests after the
    container and the resource's place among the container's requests."""

    name: str
    index: int
    """Its place in ``initContainers`` followed by ``containers``."""
    short_lived: bool
    """An init container that is not a sidecar (it ends before the others start)."""
    names: tuple[str, ...]
    """Every resource the container requests (limits count where requests are unset, as
    the API server defaults them), sorted."""
    amounts: tuple[tuple[str, int], ...]
    """The resources named with a domain and the amount asked of each."""


@dataclass(frozen=True, slots=True)
class StaticShape:
    """The constraints that depend only on node labels, taints and flags: a cache key."""

    node_selector: tuple[tuple[str, str], ...]
    required_terms: tuple[NodeSelectorTerm, ...] | None
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True, slots=True)
class PodSpecView:
    request: Resource
    node_selector: Mapping[str, str]
    required_terms: tuple[NodeSelectorTerm, ...] | None  # None: no required node affinity
    preferred_terms: tuple[PreferredTerm, ...]
    tolerations: tuple[Toleration, ...]
    host_ports: tuple[HostPort, ...]
    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]
    shape: StaticShape
    problem: str = ""
    """Why the pod cannot be scheduled whatever the cluster holds (it asks more of a
    resource than any node is counted with); empty for every ordinary pod."""
    resource_claims: tuple[PodClaim, ...] = ()
    """``spec.resourceClaims``: the DRA claims the pod needs allocated before it runs."""
    containers: tuple[ContainerRequests, ...] = ()
    """Per container, what it asks when the pod asks a resource named with a domain
    (empty for every other pod): what DRA needs to serve extended resources."""
    volumes: tuple[PodVolume, ...] = ()
    """The claims and inline disks of ``spec.volumes`` (:mod:`scheduler.api.volumes.refs`);
    empty for a pod that uses none: the volume plugins skip it at once."""
    nonzero_pad: Resource = ZERO
    """What a node's *non-zero requested* sum counts for the pod beyond ``request`` (CPU
    and memory of containers that name none: :mod:`scheduler.api.pod_resources`); what
    kube's scores read of the pods on a node."""
    score_pad: Resource = ZERO
    """What kube's scores count for the pod being placed beyond ``request`` (likewise)."""
    preferred_pod_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    """``spec.topologySpreadConstraints`` (:mod:`scheduler.api.spread`)."""

    @property
    def has_pod_affinity(self) -> bool:
        """Does the pod have any pod (anti-)affinity term, required or preferred?"""
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or self.preferred_pod_affinity
            or self.preferred_pod_anti_affinity
        )

    @property
    def best_effort(self) -> bool:
        """True when the pod requests nothing but its pod slot (backfill's pods)."""
        return all(name == PODS for name in self.request)


def _int(value: object, *, obj: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(obj, field, f"must be an integer, got {value!r}")
    return value


def _containers_with_domains(
    spec: Mapping[str, Any], request: Resource, *, obj: str
) -> tuple[ContainerRequests, ...]:
    """:attr:`PodSpecView.containers`: empty unless ``request`` names a resource with a
    domain (``/``)."""
    if not any("/" in name for name in request):
        return ()
    out = []
    inits = as_maps(spec.get("initContainers"), obj=obj, field="spec.initContainers")
    regular = as_maps(spec.get("containers"), obj=obj, field="spec.containers")
    for index, (where, c) in enumerate([*inits, *regular]):
        amounts = container_amounts(c, obj=obj, field=where)
        out.append(
            ContainerRequests(
                name=str(c.get("name") or ""),
                index=index,
                short_lived=index < len(inits) and c.get("restartPolicy") != "Always",
                names=tuple(sorted(amounts)),
                amounts=tuple((n, a) for n, a in sorted(amounts.items()) if "/" in n and a),
            )
        )
    return tuple(out)


def pod_request(spec: Mapping[str, Any], *, obj: str) -> Resource:
    """The pod's effective request, as Kubernetes computes it
    (:func:`~scheduler.api.pod_resources.pod_requests`)."""
    return pod_requests(spec, obj=obj).request


def _node_selector_term(raw: Mapping[str, Any], *, obj: str, field: str) -> NodeSelectorTerm:
    labels = tuple(
        parse_requirement(e, obj=obj, field=f"{field}.matchExpressions[{i}]")
        for i, e in enumerate(raw.get("matchExpressions") or ())
    )
    fields = tuple(
        parse_requirement(e, obj=obj, field=f"{field}.matchFields[{i}]")
        for i, e in enumerate(raw.get("matchFields") or ())
    )
    return NodeSelectorTerm(labels, fields)


def parse_node_selector(raw: object, *, obj: str, field: str) -> tuple[NodeSelectorTerm, ...]:
    """A ``NodeSelector`` (``nodeSelectorTerms``, ORed) as terms; errors name the field."""
    selector = as_map(raw, obj=obj, field=field)
    return tuple(
        _node_selector_term(t, obj=obj, field=f"{where}")
        for where, t in as_maps(
            selector.get("nodeSelectorTerms"), obj=obj, field=f"{field}.nodeSelectorTerms"
        )
    )


def _pod_claims(raw: object, *, obj: str) -> tuple[PodClaim, ...]:
    out = []
    for where, m in as_maps(raw, obj=obj, field="spec.resourceClaims"):
        claim = PodClaim(
            str(m.get("name") or ""),
            str(m.get("resourceClaimName") or ""),
            str(m.get("resourceClaimTemplateName") or ""),
        )
        if not claim.name:
            raise InvalidInputError(obj, f"{where}.name", "Required value")
        if bool(claim.claim_name) == bool(claim.template_name):
            raise InvalidInputError(
                obj, where, "exactly one of resourceClaimName or resourceClaimTemplateName"
            )
        out.append(claim)
    return tuple(out)


def _pod_affinity_term(term: Mapping[str, Any], *, obj: str, field: str) -> PodAffinityTerm:
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise InvalidInputError(obj, f"{field}.topologyKey", "a non-empty string is required")
    selector = parse_label_selector(
        term.get("labelSelector"), obj=obj, field=f"{field}.labelSelector", null_matches=False
    )
    raw_ns = term.get("namespaceSelector")
    namespace_selector = (
        None
        if raw_ns is None
        else parse_label_selector(raw_ns, obj=obj, field=f"{field}.namespaceSelector")
    )
    namespaces = tuple(str(n) for n in term.get("namespaces") or ())
    return PodAffinityTerm(selector, namespaces, key, namespace_selector)


def _pod_affinity_terms(raw: object, *, obj: str, field: str) -> tuple[PodAffinityTerm, ...]:
    return tuple(
        _pod_affinity_term(term, obj=obj, field=where)
        for where, term in as_maps(raw, obj=obj, field=field)
    )


def _weighted_terms(raw: object, *, obj: str, field: str) -> tuple[WeightedAffinityTerm, ...]:
    out = []
    for where, item in as_maps(raw, obj=obj, field=field):
        weight = _int(item.get("weight", 1), obj=obj, field=f"{where}.weight")
        term = as_map(item.get("podAffinityTerm"), obj=obj, field=f"{where}.podAffinityTerm")
        out.append(
            WeightedAffinityTerm(
                weight, _pod_affinity_term(term, obj=obj, field=f"{where}.podAffinityTerm")
            )
        )
    return tuple(out)


def parse_pod_spec(spec: Mapping[str, Any], *, obj: str) -> PodSpecView:
    """Parse a pod ``spec``. Errors name ``obj`` (``Pod ns/name``) and the field.

    A spec of the wrong shape (a list where a map belongs, a string for a port) raises
    InvalidInputError too, never a bare TypeError.
    """
    if not isinstance(spec, Mapping):
        raise InvalidInputError(obj, "spec", "must be an object")
    try:
        return _parse_pod_spec(spec, obj=obj)
    except InvalidInputError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise InvalidInputError(obj, "spec", f"malformed pod spec ({exc})") from exc


def _parse_pod_spec(spec: Mapping[str, Any], *, obj: str) -> PodSpecView:
    requests = pod_requests(spec, obj=obj)
    request = requests.request
    problem = ""
    huge = over_max(request)
    if huge:
        asked = ", ".join(f"{n} {request.to_quantities()[n]}" for n in huge)
        problem = (
            f"{obj} asks more than any node can hold ({asked}; nodes are counted with at "
            f"most {Resource({huge[0]: MAX_AMOUNT}).to_quantities()[huge[0]]} of each)"
        )
        # Kept above every node's capped amount, and small enough to sum in 64 bits.
        request = Resource(
            {n: (MAX_AMOUNT + 1 if a > MAX_AMOUNT else a) for n, a in request.items()}
        )
    node_selector = {
        str(k): str(v)
        for k, v in as_map(spec.get("nodeSelector"), obj=obj, field="spec.nodeSelector").items()
    }
    affinity = as_map(spec.get("affinity"), obj=obj, field="spec.affinity")
    node_aff = as_map(affinity.get("nodeAffinity"), obj=obj, field="spec.affinity.nodeAffinity")
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        required_terms = tuple(
            _node_selector_term(t, obj=obj, field=f"{base}.nodeSelectorTerms[{i}]")
            for i, t in enumerate(req.get("nodeSelectorTerms") or ())
        )
    pref_field = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = tuple(
        PreferredTerm(
            _int(p.get("weight", 1), obj=obj, field=f"{where}.weight"),
            _node_selector_term(
                as_map(p.get("preference"), obj=obj, field=f"{where}.preference"),
                obj=obj,
                field=f"{where}.preference",
            ),
        )
        for where, p in as_maps(
            node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"),
            obj=obj,
            field=pref_field,
        )
    )
    tolerations = tuple(
        Toleration(
            str(t.get("key", "")),
            str(t.get("operator", "Equal")),
            str(t.get("value", "")),
            str(t.get("effect", "")),
        )
        for _, t in as_maps(spec.get("tolerations"), obj=obj, field="spec.tolerations")
    )
    ports: list[HostPort] = []
    for where, c in as_maps(spec.get("containers"), obj=obj, field="spec.containers"):
        for pwhere, p in as_maps(c.get("ports"), obj=obj, field=f"{where}.ports"):
            if p.get("hostPort"):
                port = _int(p["hostPort"], obj=obj, field=f"{pwhere}.hostPort")
                ports.append(
                    HostPort(str(p.get("protocol", "TCP")), str(p.get("hostIP", "")), port)
                )
    pa = as_map(affinity.get("podAffinity"), obj=obj, field="spec.affinity.podAffinity")
    paa = as_map(affinity.get("podAntiAffinity"), obj=obj, field="spec.affinity.podAntiAffinity")
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
    shape = StaticShape(tuple(sorted(node_selector.items())), required_terms, tolerations)
    return PodSpecView(
        request=request,
        node_selector=node_selector,
        required_terms=required_terms,
        preferred_terms=preferred,
        tolerations=tolerations,
        host_ports=tuple(ports),
        pod_affinity=_pod_affinity_terms(
            pa.get(key), obj=obj, field=f"spec.affinity.podAffinity.{key}"
        ),
        pod_anti_affinity=_pod_affinity_terms(
            paa.get(key), obj=obj, field=f"spec.affinity.podAntiAffinity.{key}"
        ),
        preferred_pod_affinity=_weighted_terms(
            pa.get(preferred_key), obj=obj, field=f"spec.affinity.podAffinity.{preferred_key}"
        ),
        preferred_pod_anti_affinity=_weighted_terms(
            paa.get(preferred_key),
            obj=obj,
            field=f"spec.affinity.podAntiAffinity.{preferred_key}",
        ),
        spread=parse_spread(spec.get("topologySpreadConstraints"), obj=obj),
        shape=shape,
        problem=problem,
        resource_claims=_pod_claims(spec.get("resourceClaims"), obj=obj),
        containers=_containers_with_domains(spec, request, obj=obj),
        volumes=parse_volumes(spec.get("volumes"), obj=obj),
        nonzero_pad=requests.nonzero_pad,
        score_pad=requests.score_pad,
    )
