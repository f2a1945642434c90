"""Invariants of the decision core, on generated clusters (hypothesis).

A cluster is 2-8 nodes of random cpu, memory and pod slots, some tainted, and 1-20 pods of
random requests: lone pods, and gangs of random minMember (some with minTaskMember per
role), some pods already running where they fit. On it:

- no node is ever over-allocated in any resource, cycle after cycle and at the end of a
  whole simulation;
- a gang is bound in full (at least minMember, and minTaskMember per role unless the gang
  is elastic: minMember below their sum) or not at all;
- a pod is never bound to a node whose taint it does not tolerate;
- a rolled-back statement leaves the session exactly as it was;
- the same input gives the same decisions, whatever the order the cache heard it in.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.core_objects import pod_group_name
from scheduler.api.pod import pod_request
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from scheduler.config import SchedulerConfiguration, TierConfig
from scheduler.framework.effects import Bind, SetPhase
from scheduler.framework.session import Session, open_session
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import HOSTNAME, cache_with, node, pod, pod_group, session_dump

Obj = dict[str, Any]
TAINT = "dedicated=batch:NoSchedule"
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
ANTI = "requiredDuringSchedulingIgnoredDuringExecution"
CORE = SchedulerConfiguration(actions=("enqueue", "allocate", "backfill"))
"""The actions of issue 2 with the default plugins."""


# Generated clusters ---------------------------------------------------------------------------


@dataclass
class Cluster:
    nodes: list[Obj]
    groups: list[Obj]
    pods: list[Obj]

    @property
    def objects(self) -> list[Obj]:
        return [*self.nodes, *self.groups, *self.pods]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    nodes = []
    free: dict[str, Resource] = {}
    for i in range(draw(st.integers(2, 8))):
        raw = node(
            f"n{i}",
            cpu=draw(st.sampled_from(["1", "2", "4", "8", "1500m"])),
            memory=draw(st.sampled_from(["1Gi", "2Gi", "4Gi", "8Gi"])),
            pods=draw(st.integers(2, 12)),
            taints=[TAINT] if draw(st.integers(0, 3)) == 0 else None,
        )
        nodes.append(raw)
        free[raw["metadata"]["name"]] = Resource.parse(raw["status"]["allocatable"])
    groups: list[Obj] = []
    pods: list[Obj] = []
    budget = draw(st.integers(1, 20))
    j = 0
    while len(pods) < budget:
        size = min(draw(st.integers(1, 5)), budget - len(pods))
        is_gang = size > 1 or draw(st.booleans())
        name = f"j{j}"
        j += 1
        roles = [("ps" if k % 3 == 0 else "worker") for k in range(size)]
        with_roles = is_gang and size > 1 and draw(st.booleans())
        if is_gang:
            spec: dict[str, Any] = {}
            if with_roles:
                counts = Counter(roles)
                spec["min_task_member"] = {
                    r: draw(st.integers(0, n)) for r, n in sorted(counts.items())
                }
            groups.append(pod_group(name, min_member=draw(st.integers(1, size)), **spec))
        for k in range(size):
            best_effort = draw(st.integers(0, 9)) == 0
            cpu = None if best_effort else f"{draw(st.integers(1, 30)) * 100}m"
            memory = (
                None
                if best_effort
                else draw(st.sampled_from(["64Mi", "256Mi", "512Mi", "1Gi", "2Gi"]))
            )
            extra: dict[str, Any] = {}
            if draw(st.integers(0, 2)) == 0:
                extra["tolerations"] = [TOLERATION]
            labels = {}
            if draw(st.integers(0, 5)) == 0:  # one per node
                labels["app"] = "web"
                extra["affinity"] = {
                    "podAntiAffinity": {
                        ANTI: [
                            {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "topologyKey": HOSTNAME,
                            }
                        ]
                    }
                }
            raw = pod(
                f"{name}-{k}",
                cpu=cpu,
                memory=memory,
                labels=labels,
                group=name if is_gang else None,
                role=roles[k] if with_roles else None,
                **extra,
            )
            if draw(st.integers(0, 5)) == 0:
                raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
            if draw(st.integers(0, 3)) == 0:  # already running, where it fits
                need = pod_request(raw["spec"], obj="")
                order = draw(st.permutations(sorted(free)))
                where = next((n for n in order if need.fits_in(free[n])), None)
                if where is not None:
                    free[where] = free[where] - need
                    raw["spec"]["nodeName"] = where
                    raw["status"]["phase"] = "Running"
            pods.append(raw)
    return Cluster(nodes, groups, pods)


# Checks on placements -------------------------------------------------------------------------


def check_placements(cluster: Cluster, placed: dict[str, str], new: set[str]) -> None:
    """``placed`` maps ``ns/name`` of every pod on a node (running before, or bound) to it;
    ``new`` are those the scheduler bound."""
    pods = {f"default/{p['metadata']['name']}": p for p in cluster.pods}
    nodes = {n["metadata"]["name"]: n for n in cluster.nodes}
    used: dict[str, Resource] = {name: Resource() for name in nodes}
    for key, where in placed.items():
        used[where] = used[where] + pod_request(pods[key]["spec"], obj=key)
    for name, raw in nodes.items():
        allocatable = Resource.parse(raw["status"]["allocatable"])
        assert used[name].fits_in(allocatable), (
            f"node {name} over-allocated: {used[name]!r} > {allocatable!r}"
        )
    for key in new:
        raw = pods[key]
        where = placed[key]
        if nodes[where]["spec"].get("taints"):
            assert raw["spec"].get("tolerations"), f"{key} bound to tainted {where}"
        neighbours = [pods[k] for k, n in placed.items() if n == where and k != key]
        if host_ports(raw):
            assert not any(host_ports(o) & host_ports(raw) for o in neighbours), (
                f"{key} shares host port on {where}"
            )
        if raw["metadata"]["labels"].get("app") == "web":
            assert not any(o["metadata"]["labels"].get("app") == "web" for o in neighbours), (
                f"{key} breaks anti-affinity on {where}"
            )
    for group in cluster.groups:
        name = group["metadata"]["name"]
        members = [k for k, p in pods.items() if pod_group_name(p) == name]
        if not any(k in new for k in members):
            continue
        on_nodes = [k for k in members if k in placed]
        spec = group["spec"]
        assert len(on_nodes) >= spec["minMember"], f"gang {name} partly bound: {on_nodes}"
        roles = Counter(
            (pods[k]["metadata"]["labels"].get(L.TASK_ROLE_LABEL, "")) for k in on_nodes
        )
        by_role = spec.get("minTaskMember") or {}
        if sum(by_role.values()) > spec["minMember"]:
            continue  # an elastic gang counts minMember only (docs/concepts/gangs.md)
        for role, need in by_role.items():
            assert roles[role] >= need, f"gang {name} short of role {role}: {on_nodes}"


def host_ports(raw: Obj) -> set[int]:
    return {p["hostPort"] for c in raw["spec"]["containers"] for p in c.get("ports") or ()}


def initially_placed(cluster: Cluster) -> dict[str, str]:
    return {
        f"default/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in cluster.pods
        if p["spec"].get("nodeName")
    }


# The decision core, cycle after cycle ---------------------------------------------------------


def cycles(objects: Sequence[Obj], n: int = 3) -> list[list[tuple[str, str]]]:
    """Run ``n`` cycles on a cache fed ``objects`` in the order given; each cycle's binds
    and phases are assumed by the cache, as the loop does. Returns each cycle's binds."""
    cache = cache_with(*objects)
    resolved = app.resolve(CORE)
    out = []
    for _ in range(n):
        session = open_session(cache.snapshot(), resolved)
        for action in resolved.actions:
            session.run_action(action)
        assert_session_consistent(session)
        decided = []
        for effect in session.effects:
            if isinstance(effect, Bind):
                cache.ledger.assume_bind(effect.task.uid, effect.node)
                decided.append((effect.task.key, effect.node))
            elif isinstance(effect, SetPhase):
                cache.ledger.assume_phase(effect.job.uid, effect.phase)
        for name, info in cache.nodes.items():
            assert info.used.fits_in(info.allocatable), f"cache: node {name} over-allocated"
        out.append(decided)
    return out


def assert_session_consistent(session: Session) -> None:
    """Nodes' accounting and the NodeTable agree with the tasks on them."""
    for name, info in session.nodes.items():
        occupying = [
            t
            for t in info.tasks.values()
            if t.status
            in (
                TaskStatus.ALLOCATED,
                TaskStatus.BINDING,
                TaskStatus.BOUND,
                TaskStatus.RUNNING,
                TaskStatus.RELEASING,
            )
        ]
        total = Resource()
        for t in occupying:
            total = total + t.request
        assert info.used == total, name
        row = session.table.row[name]
        assert session.table.idle[row].tolist() == session.table.vector(info.idle).tolist()


ORDER = ("Node", "PodGroup", "Pod")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), data=st.data())
def test_decision_core_invariants_and_determinism(cluster: Cluster, data: st.DataObject) -> None:
    decided = cycles(cluster.objects)
    placed = initially_placed(cluster)
    new: set[str] = set()
    for binds in decided:
        for key, where in binds:
            assert key not in placed, f"{key} bound twice"
            placed[key] = where
            new.add(key)
    check_placements(cluster, placed, new)
    assert decided[-1] == [], "the last cycle still found something to bind"
    # the same input, heard in any order, gives the same decisions
    shuffled = data.draw(st.permutations(cluster.objects), label="event order")
    assert cycles(shuffled) == decided
    assert cycles(cluster.objects) == decided


# Rollback ------------------------------------------------------------------------------------


def open_default(cluster: Cluster) -> Session:
    cache = cache_with(*sorted(cluster.objects, key=lambda o: ORDER.index(o["kind"])))
    config = SchedulerConfiguration(actions=(), tiers=CORE.tiers)
    assert all(isinstance(t, TierConfig) for t in config.tiers)
    return open_session(cache.snapshot(), app.resolve(config))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), data=st.data())
def test_rolled_back_statement_leaves_the_session_as_it_was(
    cluster: Cluster, data: st.DataObject
) -> None:
    session = open_default(cluster)
    tasks = sorted(
        (t for j in session.jobs.values() for t in j.tasks.values()), key=lambda t: t.uid
    )
    names = sorted(session.nodes)
    initial = session_dump(session)
    fits = verdicts(session, tasks)
    with session.statement() as stmt:
        marks: list[tuple[int, dict[str, Any]]] = []
        for _ in range(data.draw(st.integers(1, 12), label="operations")):
            if data.draw(st.integers(0, 3), label="checkpoint?") == 0:
                marks.append((stmt.checkpoint(), session_dump(session)))
            kind = data.draw(st.sampled_from(["allocate", "pipeline", "evict"]), label="op")
            if kind == "evict":
                victims = [t for t in tasks if t.status in (TaskStatus.BOUND, TaskStatus.RUNNING)]
                if victims:
                    stmt.evict(data.draw(st.sampled_from(victims), label="victim"), "test")
                continue
            waiting = [t for t in tasks if t.status in (TaskStatus.PENDING, TaskStatus.PIPELINED)]
            if not waiting:
                continue
            task = data.draw(st.sampled_from(waiting), label="task")
            target = data.draw(st.sampled_from(names), label="node")
            if kind == "pipeline":
                if task.status is TaskStatus.PENDING:
                    stmt.pipeline(task, target)
            elif task.request.fits_in(session.nodes[target].idle):
                stmt.allocate(task, target)
        for cp, dump in reversed(marks):
            stmt.rollback(cp)
            assert session_dump(session) == dump
        stmt.discard()
    assert session_dump(session) == initial
    assert verdicts(session, tasks) == fits  # plugins' own state (ports, affinity) too
    assert session.effects == []


def verdicts(session: Session, tasks: list[Any]) -> list[tuple[list[bool], str]]:
    """Every filter's verdict on every task: what the plugins' private state decides."""
    out = []
    for t in tasks:
        fit = session.fit(t)
        out.append((fit.feasible.tolist(), fit.explain()))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters())
def test_actions_leave_consistent_sessions(cluster: Cluster) -> None:
    """After the actions run (committing some gangs, rolling back others), every node's
    accounting, the NodeTable and the proportion plugin agree with the tasks."""
    session = open_default(cluster)
    for action in app.resolve(CORE).actions:
        session.run_action(action)
    assert_session_consistent(session)
    dump = session_dump(session)
    proportion = next(p for _, p in session.plugins if p.name == "proportion")
    for queue, allocated in dump.get("queues", {}).items():
        expected = Resource()
        for job in session.jobs.values():
            if job.queue != queue:
                continue
            for t in job.tasks.values():
                if t.status in (
                    TaskStatus.ALLOCATED,
                    TaskStatus.BINDING,
                    TaskStatus.BOUND,
                    TaskStatus.RUNNING,
                    TaskStatus.PIPELINED,
                ):
                    expected = expected + t.request
        assert Resource(allocated) == expected, queue
    assert proportion is not None


# The whole simulation ------------------------------------------------------------------------


def simulate(cluster: Cluster, config: SchedulerConfiguration) -> tuple[dict[str, str], Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump_all(cluster.objects, sort_keys=False))
        scenario = load_scenario([str(path)])
    resolved = app.resolve(config)
    sim = Simulation(
        scenario, lambda cache, ports: app.build_loop(resolved, cache, ports), max_cycles=50
    )
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    pods, _ = sim.store.list("Pod")
    placed = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in pods
        if p["spec"].get("nodeName")
    }
    return placed, result


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), defaults=st.booleans())
def test_simulation_invariants_and_determinism(cluster: Cluster, defaults: bool) -> None:
    config = SchedulerConfiguration() if defaults else CORE
    placed, result = simulate(cluster, config)
    new = set(result.bindings)
    assert all(placed[k] == v for k, v in result.bindings.items())
    assert set(placed) == set(initially_placed(cluster)) | new
    check_placements(cluster, placed, new)
    assert result.evictions == []  # one priority everywhere: nothing to preempt
    again, second = simulate(cluster, config)
    assert again == placed
    assert second.bindings == result.bindings
    assert second.timeline == result.timeline
