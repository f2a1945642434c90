"""Scenarios: ordinary Kubernetes YAML loaded into the embedded cluster (layer 4).

A scenario is one or more files (or directories of ``*.yaml``/``*.yml``) of what
``kubectl get -o yaml`` prints, lists included: Nodes, Pods, PodGroups, Queues,
Topologies, PriorityClasses, PodDisruptionBudgets, DeviceClasses, ResourceSlices,
ResourceClaims, ResourceClaimTemplates (a Node may carry its devices in the annotation of
:mod:`scheduler.sim.devices` instead), StorageClasses, PersistentVolumes,
PersistentVolumeClaims, CSINodes, CSIDrivers, CSIStorageCapacities (the embedded PV
controller binds and provisions as :mod:`scheduler.sim.volume_controller` says), at most one
SchedulerConfiguration
and at most one Simulation document. Everything is checked before anything runs, and
every problem is one :class:`ScenarioError` line naming the file, the object and the
field.

Timed objects, on any kind:

* ``sim.sluice.dev/arrival: 2.5s`` creates the object at that virtual time instead of at
  the start;
* ``sim.sluice.dev/departure: 10s`` deletes it at that virtual time, as ``kubectl delete``
  would: through the store's normal delete, so a bound pod that has not finished is
  deleted gracefully (its ``terminationGracePeriodSeconds``, else 30 s; the simulated
  kubelet removes it when the grace is over) and anything else goes at once. The
  departure must come after the arrival (0 without one). An object already gone by then
  (a preempted pod, say) is left alone;
* ``sim.sluice.dev/ungate: 10s``, on a pod with ``spec.schedulingGates``, removes its
  gates at that virtual time, as Kueue does when it admits the pod's workload (until then
  the pod is not tried). It must come after the arrival (and before the departure).

The Simulation document (``apiVersion: scheduling.sluice.dev/v1alpha1``) holds
``apiLatency`` and ``apiFailures`` (per call kind), ``seed``, ``until`` (a duration:
the run stops once that much clock time has passed), and ``start`` (an RFC 3339 time: the
wall time of the virtual clock's start, 2026-01-01T00:00:00Z without it; ``sluice
snapshot`` writes when it was taken, so the timestamps the objects carry are in the
replay's past); the flags of ``sluice simulate`` override the first four.

Objects keep the ``uid``, ``creationTimestamp`` and ``deletionTimestamp`` they carry (as a
cluster's snapshot holds them: jobs are ordered by creation, claims name pods by uid, a
pod being deleted goes when its ``deletionGracePeriodSeconds`` are over); without them
the embedded cluster sets them as the API server does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.api import labels as L
from scheduler.api.core_objects import node_from_object, ref, task_from_pod
from scheduler.api.errors import ConfigError, InvalidInputError, InvalidObjectError, ScenarioError
from scheduler.api.group_apis import APIS, KUBERNETES, SLUICE, VOLCANO, api_named, kind_key
from scheduler.api.label_selectors import parse_label_selector
from scheduler.api.membership import VOLCANO_QUEUE_ANNOTATION, pod_group_ref
from scheduler.config import SchedulerConfiguration, parse_configuration
from scheduler.schema import load_crds
from scheduler.sim.api_conventions import parse_rfc3339
from scheduler.sim.devices import node_slices
from scheduler.sim.durations import parse_duration
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.scenario_kinds import API_VERSIONS, DRA_KINDS, STORAGE_KINDS, check_kinds

ARRIVAL_ANNOTATION = "sim.sluice.dev/arrival"
DEPARTURE_ANNOTATION = "sim.sluice.dev/departure"
UNGATE_ANNOTATION = "sim.sluice.dev/ungate"
SIMULATION_KIND = "Simulation"
WORKLOAD_KIND = f"Workload.{KUBERNETES.group}"
QUEUE_KINDS = tuple(api.queue_key for api in APIS if api.queue_kind)
"""The Queue kinds of every API with queues (kind keys), Sluice's first."""
CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Queue",
        "Topology",
        "PriorityClass",
        *QUEUE_KINDS,
        "DeviceClass",
        "ResourceSlice",
        "StorageClass",
        "PersistentVolume",
        "CSINode",
        "CSIDriver",
        "Namespace",
    }
)
PLACEMENT_KINDS = ("Namespace", "Service", "ReplicaSet", "StatefulSet", "ReplicationController")
"""Objects placement reads besides pods and nodes: namespaces' labels (affinity namespace
selectors), the selectors of Services and controllers (default topology spreading)."""
GROUP_KINDS = tuple(api.pod_group_key for api in APIS)
"""The PodGroup kinds of every API (kind keys), Sluice's first."""
OBJECT_KINDS = (
    "Namespace",
    "PriorityClass",
    *QUEUE_KINDS,
    "Topology",
    "Node",
    *DRA_KINDS,
    *STORAGE_KINDS,
    WORKLOAD_KIND,
    *GROUP_KINDS,
    "PodDisruptionBudget",
    *PLACEMENT_KINDS[1:],
    "Pod",
)
"""Kinds a scenario may hold (kind keys: :func:`~scheduler.api.group_apis.kind_key`), in
the order they are created at the same instant."""
SUPPORTED = (
    "PriorityClass",
    "Queue",
    "Topology",
    "Node",
    *DRA_KINDS,
    *STORAGE_KINDS,
    "PodGroup",
    "Workload",
    "PodDisruptionBudget",
    *PLACEMENT_KINDS,
    "Pod",
    "SchedulerConfiguration",
    SIMULATION_KIND,
)


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    obj: dict[str, Any]
    source: str


@dataclass(frozen=True, slots=True)
class Departure:
    """An object to delete at virtual time ``at`` (``sim.sluice.dev/departure``)."""

    at: float
    kind: str
    namespace: str
    """"" for cluster-scoped kinds."""
    name: str
    source: str

    @property
    def label(self) -> str:
        """``Kind ns/name`` (or ``Kind name``), as the timeline names objects."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(frozen=True, slots=True)
class Ungate:
    """A pod whose scheduling gates are removed at virtual time ``at``
    (``sim.sluice.dev/ungate``)."""

    at: float
    namespace: str
    name: str
    source: str

    @property
    def label(self) -> str:
        """``namespace/name``, as the timeline names pods."""
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Scenario:
    arrivals: list[Arrival] = field(default_factory=list)
    """Objects by the virtual time they enter the cluster, then kind order, then name."""
    departures: list[Departure] = field(default_factory=list)
    """Objects by the virtual time they are deleted, then kind order, then name."""
    ungates: list[Ungate] = field(default_factory=list)
    """Pods by the virtual time their scheduling gates are removed, then name."""
    config: SchedulerConfiguration | None = None
    behaviour: ApiBehaviour | None = None
    """From a Simulation document, if any."""
    until: float | None = None
    """Seconds of clock time after which the run stops, from a Simulation document."""
    start: float | None = None
    """Wall time (Unix) of the virtual clock's start, from a Simulation document."""
    sources: list[str] = field(default_factory=list)


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml"))
            if not found:
                raise ScenarioError(str(p), None, "directory holds no .yaml or .yml files")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ScenarioError(str(p), None, "no such file or directory")
    return out


def _documents(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ScenarioError(where, None, f"not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    except OSError as exc:
        raise ScenarioError(str(path), None, f"cannot read: {exc.strerror}") from exc
    for i, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f"{path} (document {i})"
        if not isinstance(doc, Mapping):
            raise ScenarioError(where, None, "expected a Kubernetes object")
        if doc.get("kind") == "List":
            for j, item in enumerate(doc.get("items") or ()):
                if not isinstance(item, Mapping):
                    raise ScenarioError(f"{where} items[{j}]", None, "expected an object")
                yield f"{where} items[{j}]", item
        else:
            yield where, doc


SIMULATION_FIELDS = ("apiLatency", "apiFailures", "apiLostReplies", "seed", "until", "start")


def _simulation(doc: Mapping[str, Any], where: str) -> tuple[ApiBehaviour, float | None]:
    """The API behaviour and the horizon (``until``, seconds; None if not given)."""
    unknown = sorted(set(doc) - {"apiVersion", "kind", "metadata", *SIMULATION_FIELDS})
    if unknown:
        raise ScenarioError(
            where,
            unknown[0],
            f"unknown field of Simulation; known: {', '.join(SIMULATION_FIELDS)}",
        )
    until: float | None = None
    if doc.get("until") is not None:
        try:
            until = parse_duration(str(doc["until"]))
        except ValueError as exc:
            raise ScenarioError(where, "until", str(exc)) from exc
        if not until > 0:
            raise ScenarioError(
                where, "until", f"must be a positive duration, like 90s or 1h; got {doc['until']!r}"
            )
    latency: dict[str, float] = {}
    for k, v in (doc.get("apiLatency") or {}).items():
        try:
            latency[str(k)] = parse_duration(str(v))
        except ValueError as exc:
            raise ScenarioError(where, f"apiLatency.{k}", str(exc)) from exc
    failures = _rates(doc, "apiFailures", where)
    lost = _rates(doc, "apiLostReplies", where)
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ScenarioError(where, "seed", f"expected an integer, got {seed!r}")
    try:
        behaviour = ApiBehaviour(
            latency=latency, failure_rate=failures, seed=seed, lost_reply_rate=lost
        )
        return behaviour, until
    except ConfigError as exc:
        raise ScenarioError(where, exc.field, exc.message) from exc


def _start(doc: Mapping[str, Any], where: str) -> float | None:
    """The Unix time of ``start`` (RFC 3339), or None without it."""
    text = doc.get("start")
    if text is None:
        return None
    try:
        return parse_rfc3339(str(text))
    except ValueError as exc:
        raise ScenarioError(
            where, "start", f"expected an RFC 3339 time like 2026-01-01T00:00:00Z, got {text!r}"
        ) from exc


def _rates(doc: Mapping[str, Any], name: str, where: str) -> dict[str, float]:
    """The map of call kind to rate in field ``name`` of a Simulation document."""
    rates: dict[str, float] = {}
    for k, v in (doc.get(name) or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ScenarioError(where, f"{name}.{k}", f"expected a rate in [0, 1], got {v!r}")
        rates[str(k)] = float(v)
    return rates


def _annotation_time(obj: Mapping[str, Any], where: str, annotation: str) -> float | None:
    """Seconds in a duration annotation of ``obj``; None without it."""
    text = (obj["metadata"].get("annotations") or {}).get(annotation)
    if text is None:
        return None
    try:
        return parse_duration(str(text))
    except ValueError as exc:
        raise ScenarioError(
            f"{where}: {ref(obj)}", f"metadata.annotations[{annotation}]", str(exc)
        ) from exc


def load_scenario(paths: list[str]) -> Scenario:
    """Read and check a scenario. Raises ScenarioError (one line) on the first problem."""
    catalog = load_crds()
    scenario = Scenario()
    seen: dict[tuple[str, str, str], str] = {}
    objects: list[tuple[float, str, dict[str, Any]]] = []
    departures: list[Departure] = []
    ungates: list[Ungate] = []
    simulation_seen = False
    for path in _files(paths):
        scenario.sources.append(str(path))
        for where, doc in _documents(path):
            kind = doc.get("kind")
            if kind == "SchedulerConfiguration":
                if scenario.config is not None:
                    raise ScenarioError(
                        where, None, "a second SchedulerConfiguration; a scenario holds at most one"
                    )
                try:
                    scenario.config = parse_configuration(doc)
                except ConfigError as exc:
                    raise ScenarioError(where, exc.field, exc.message) from exc
                continue
            if kind == SIMULATION_KIND:
                if simulation_seen:
                    raise ScenarioError(where, None, "a second Simulation document")
                simulation_seen = True
                scenario.behaviour, scenario.until = _simulation(doc, where)
                scenario.start = _start(doc, where)
                continue
            api_version = str(doc.get("apiVersion") or API_VERSIONS.get(str(kind), ""))
            kind = kind_key(api_version, str(kind))
            if kind not in OBJECT_KINDS:
                raise ScenarioError(
                    where,
                    "kind",
                    f"unsupported kind {doc.get('kind')!r} of {api_version or 'no apiVersion'}; "
                    f"a scenario holds {', '.join(SUPPORTED)}",
                )
            obj = _normalise(doc, where, kind)
            meta = obj["metadata"]
            key = (kind, str(meta.get("namespace", "")), str(meta["name"]))
            label = _label(obj, kind)
            if key in seen:
                raise ScenarioError(label, None, f"defined twice: in {seen[key]} and in {where}")
            seen[key] = where
            if catalog.is_custom(kind):
                try:
                    obj = catalog.check(obj)
                except InvalidObjectError as exc:
                    raise ScenarioError(where, None, str(exc)) from exc
            at = _annotation_time(obj, where, ARRIVAL_ANNOTATION) or 0.0
            leave = _annotation_time(obj, where, DEPARTURE_ANNOTATION)
            if leave is not None:
                if not leave > at:
                    raise ScenarioError(
                        f"{where}: {label}",
                        f"metadata.annotations[{DEPARTURE_ANNOTATION}]",
                        f"the departure ({leave:g}s) must come after the arrival ({at:g}s)",
                    )
                departures.append(
                    Departure(leave, kind, str(meta.get("namespace", "")), meta["name"], where)
                )
            ungate = _annotation_time(obj, where, UNGATE_ANNOTATION)
            if ungate is not None:
                _check_ungate(obj, f"{where}: {label}", at, ungate, leave)
                ungates.append(Ungate(ungate, str(meta["namespace"]), meta["name"], where))
            objects.append((at, where, obj))
            if kind == "Node":
                for made in node_slices(obj, where):
                    extra = _normalise(made, where, "ResourceSlice")
                    key = ("ResourceSlice", "", extra["metadata"]["name"])
                    if key in seen:
                        raise ScenarioError(
                            ref(extra), None, f"defined twice: in {seen[key]} and in {where}"
                        )
                    seen[key] = where
                    objects.append((at, where, extra))
                    if leave is not None:
                        departures.append(
                            Departure(leave, "ResourceSlice", "", extra["metadata"]["name"], where)
                        )
    _check_references(objects)
    order = {k: i for i, k in enumerate(OBJECT_KINDS)}
    objects.sort(key=lambda o: (o[0], order[_kind_of(o[2])], ref(o[2])))
    scenario.arrivals = [Arrival(at, obj, where) for at, where, obj in objects]
    departures.sort(key=lambda d: (d.at, order[d.kind], d.label))
    scenario.departures = departures
    scenario.ungates = sorted(ungates, key=lambda u: (u.at, u.label))
    return scenario


def _check_ungate(
    obj: Mapping[str, Any], where: str, arrival: float, at: float, departure: float | None
) -> None:
    """A ``sim.sluice.dev/ungate`` time must be on a gated pod, after its arrival and
    before its departure."""
    field_name = f"metadata.annotations[{UNGATE_ANNOTATION}]"
    if obj.get("kind") != "Pod" or not (obj.get("spec") or {}).get("schedulingGates"):
        raise ScenarioError(
            where, field_name, "only a pod with spec.schedulingGates can be ungated"
        )
    if not at > arrival:
        raise ScenarioError(
            where, field_name, f"the ungating ({at:g}s) must come after the arrival ({arrival:g}s)"
        )
    if departure is not None and not at < departure:
        raise ScenarioError(
            where,
            field_name,
            f"the ungating ({at:g}s) must come before the departure ({departure:g}s)",
        )


def _normalise(doc: Mapping[str, Any], where: str, kind: str) -> dict[str, Any]:
    obj = dict(doc)
    meta = obj.get("metadata")
    if (
        not isinstance(meta, Mapping)
        or not isinstance(meta.get("name"), str)
        or not meta.get("name")
    ):
        raise ScenarioError(where, "metadata.name", f"every {obj.get('kind')} needs a name")
    meta = dict(meta)
    if kind in CLUSTER_SCOPED:
        meta.pop("namespace", None)
    else:
        meta.setdefault("namespace", "default")
    obj["metadata"] = meta
    obj.setdefault("apiVersion", API_VERSIONS.get(kind, ""))
    return obj


def _kind_of(obj: Mapping[str, Any]) -> str:
    """The kind key of a normalised object."""
    return kind_key(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))


def _label(obj: Mapping[str, Any], kind: str) -> str:
    """``Kind ns/name``, with the API of another scheduler's kind."""
    return ref(obj) if "." not in kind else f"{ref(obj)} ({obj['apiVersion']})"


def _check_references(objects: list[tuple[float, str, dict[str, Any]]]) -> None:
    """What the API server and the controllers would refuse or resolve, checked up front."""
    by_kind: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in OBJECT_KINDS}
    for _, _, obj in objects:
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        by_kind[_kind_of(obj)][name] = obj
    classes: dict[str, int] = {}
    default_priority = 0
    for name, klass in by_kind["PriorityClass"].items():
        value = klass.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            raise ScenarioError(ref(klass), "value", f"must be an integer, got {value!r}")
        classes[name] = value
        if klass.get("globalDefault"):
            default_priority = value
    queues = {name for kind in QUEUE_KINDS for name in by_kind[kind]} | {L.DEFAULT_QUEUE}
    for api in APIS:
        for q in by_kind[api.queue_key].values() if api.queue_kind else ():
            parent = (q.get("spec") or {}).get("parent")
            if (
                parent
                and parent not in queues
                and not (api.root_queue and parent == api.root_queue)
            ):
                raise ScenarioError(ref(q), "spec.parent", f"no Queue named {parent!r}")
    for pg in by_kind[KUBERNETES.pod_group_key].values():
        ref_ = ((pg.get("spec") or {}).get("podGroupTemplateRef") or {}).get("workload") or {}
        workload = ref_.get("workloadName")
        ns = pg["metadata"]["namespace"]
        if workload and f"{ns}/{workload}" not in by_kind[WORKLOAD_KIND]:
            raise ScenarioError(  # the API server's admission refuses it (403)
                _label(pg, KUBERNETES.pod_group_key),
                "spec.podGroupTemplateRef.workload.workloadName",
                f"no Workload named {workload!r} in namespace {ns!r}",
            )
    for pg in by_kind[VOLCANO.pod_group_key].values():
        pc = (pg.get("spec") or {}).get("priorityClassName")
        if pc and pc not in classes:
            raise ScenarioError(ref(pg), "spec.priorityClassName", f"no PriorityClass named {pc!r}")
        queue = (pg.get("spec") or {}).get("queue") or L.DEFAULT_QUEUE
        if queue not in queues:
            raise ScenarioError(ref(pg), "spec.queue", f"no Queue named {queue!r}")
    for pg in by_kind["PodGroup"].values():
        pg_spec: dict[str, Any] = pg.get("spec") or {}
        if pg_spec.get("queue", L.DEFAULT_QUEUE) not in queues:
            raise ScenarioError(ref(pg), "spec.queue", f"no Queue named {pg_spec.get('queue')!r}")
        pc = pg_spec.get("priorityClassName")
        if pc and pc not in classes:
            raise ScenarioError(ref(pg), "spec.priorityClassName", f"no PriorityClass named {pc!r}")
        tc = pg_spec.get("topologyConstraint")
        if tc and tc.get("topology") not in by_kind["Topology"]:
            raise ScenarioError(
                ref(pg),
                "spec.topologyConstraint.topology",
                f"no Topology named {tc.get('topology')!r}",
            )
    for node in by_kind["Node"].values():
        try:
            node_from_object(node)
        except InvalidInputError as exc:
            raise ScenarioError(exc.obj, exc.field, exc.message) from exc
    for pdb in by_kind["PodDisruptionBudget"].values():
        try:
            parse_label_selector(
                (pdb.get("spec") or {}).get("selector"),
                obj=ref(pdb),
                field="spec.selector",
                null_matches=False,
            )
        except InvalidInputError as exc:
            raise ScenarioError(exc.obj, exc.field, exc.message) from exc
    check_kinds(by_kind)
    for pod in by_kind["Pod"].values():
        _resolve_pod(pod, classes, default_priority, by_kind, queues)


def _resolve_pod(
    pod: dict[str, Any],
    classes: Mapping[str, int],
    default_priority: int,
    by_kind: Mapping[str, Mapping[str, Any]],
    queues: set[str],
) -> None:
    spec = dict(pod.get("spec") or {})
    pod["spec"] = spec
    where = ref(pod)
    pc = spec.get("priorityClassName")
    if pc:
        if pc not in classes:
            raise ScenarioError(where, "spec.priorityClassName", f"no PriorityClass named {pc!r}")
        if "priority" in spec and spec["priority"] != classes[pc]:
            raise ScenarioError(
                where,
                "spec.priority",
                f"must equal the value of PriorityClass {pc!r} ({classes[pc]}) or be omitted",
            )
        spec["priority"] = classes[pc]
    else:
        spec.setdefault("priority", default_priority)
    if not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise ScenarioError(where, "spec.containers", "a pod needs at least one container")
    node = spec.get("nodeName")
    if node and node not in by_kind["Node"]:
        raise ScenarioError(where, "spec.nodeName", f"no Node named {node!r}")
    ns = pod["metadata"]["namespace"]
    group = pod_group_ref(pod)
    if group is not None:
        name = f"{ns}/{group.name}"
        fallback = group.api.falls_back_to
        found = name in by_kind[group.api.pod_group_key] or bool(
            fallback and name in by_kind[api_named(fallback).pod_group_key]
        )
        if not found:
            of = "" if group.api is SLUICE else f" of {group.api.api_version}"
            raise ScenarioError(
                where,
                group.field,
                f"no PodGroup{of} named {group.name!r} in namespace {ns!r}",
            )
    for where_queue, queue in (
        (
            f"metadata.labels[{L.QUEUE_LABEL}]",
            (pod["metadata"].get("labels") or {}).get(L.QUEUE_LABEL),
        ),
        (
            f"metadata.annotations[{VOLCANO_QUEUE_ANNOTATION}]",
            (pod["metadata"].get("annotations") or {}).get(VOLCANO_QUEUE_ANNOTATION),
        ),
    ):
        if queue and queue not in queues:
            raise ScenarioError(where, where_queue, f"no Queue named {queue!r}")
    try:
        task_from_pod(pod)
    except InvalidInputError as exc:
        raise ScenarioError(exc.obj, exc.field, exc.message) from exc
    if node:
        status = dict(pod.get("status") or {})
        status.setdefault("phase", "Running")
        if status["phase"] == "Running":
            status.setdefault("conditions", [{"type": "Ready", "status": "True"}])
        pod["status"] = status
