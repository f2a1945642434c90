"""``python -m bench scorers``: what each filter and score costs per pod, in process.

A micro-benchmark of the placement plugins (issue 37, point 7) on scheduler_perf's shapes
as ``bench real`` builds them (:data:`bench.real_cluster.SHAPES`: the same nodes, running
pods and pod templates, zones and node selectors): the objects go through a
:class:`~scheduler.cache.SchedulerCache` into one snapshot and a session with the default
configuration, as a cycle opens it. Then, for each of the first ``--pods`` measured pods
in turn, it times

* every ``NODE_FILTER`` hook on its own over the whole node table, then ``Session.fit``
  (all of them, as allocate asks);
* every ``NODE_SCORER`` hook on its own over the feasible rows a selection scores
  (kube-scheduler's adaptive share of them), then ``Session.select_node`` (every score,
  weighted, and the choice);
* the placement (``Statement.allocate``: every plugin's placement handler, so the next
  pod counts this one, as a cycle that decides many pods does).

Times are the CPU time of the thread (``time.thread_time``), steadier than wall time on a
busy machine. Shapes run in ``--rounds`` rounds, every other one in reverse order (A B,
B A), each from a fresh session on the same cluster, so that what drifts on a shared
machine weighs on every shape alike. Prints one JSON object per shape (JSON Lines): the
means over the rounds, in microseconds per pod (``*_us``), and each round's total
(``per_round_us``). Not a timed test: a command.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from bench import real_cluster as rc
from bench.common import machine
from scheduler.api import labels as L
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.app import builtin_registry
from scheduler.cache import SchedulerCache
from scheduler.config import SchedulerConfiguration
from scheduler.framework.extension_points import NODE_FILTER, NODE_SCORER
from scheduler.framework.plugin_questions import nodes_to_score
from scheduler.framework.session import Session, open_session
from scheduler.framework.statement import Statement
from scheduler.logging import quiet

SHAPES: Final = (
    "scheduling-basic",
    "topology-spreading",
    "preferred-topology-spreading",
    "pod-anti-affinity",
    "preferred-pod-affinity",
    "preferred-pod-anti-affinity",
)
"""The shapes of :data:`bench.real_cluster.SHAPES` measured by default: SchedulingBasic
(pods without placement fields: the fast path) and the five placement shapes."""
RUN: Final = "scorers"
"""The namespace (and run label) of every object."""


@dataclass(slots=True)
class Figures:
    """One shape's timings in one round, summed over the pods timed (seconds)."""

    fit: float = 0.0
    select: float = 0.0
    place: float = 0.0
    filters: dict[str, float] | None = None
    scorers: dict[str, float] | None = None
    placed: int = 0
    unplaced: int = 0
    rows_scored: int = 0


def cluster(shape: rc.Shape, pods: int) -> SchedulerCache:
    """A cache holding ``shape``'s nodes and running pods and its first ``pods`` measured
    pods (pending, for Sluice), as a cluster's watch events would bring them."""
    cache = SchedulerCache()
    cache.handle(
        "Queue",
        "ADDED",
        {
            "apiVersion": L.API_VERSION,
            "kind": "Queue",
            "metadata": {"name": L.DEFAULT_QUEUE},
            "spec": {"weight": 1},
        },
    )
    status = rc.node_status()["status"]
    for i in range(shape.nodes):
        node = rc.node_object(RUN, i, shape.zones)
        cache.handle("Node", "ADDED", {**node, "status": status})
    running = rc.running_status()["status"]
    for i in range(shape.running):
        pod = rc.pod_object(
            RUN,
            f"running-{i}",
            scheduler_name=L.SCHEDULER_NAME,
            cpu=shape.running_cpu,
            node_name=f"{RUN}-node-{i % shape.nodes}",
            placement=shape.running_placement,
        )
        pod["metadata"]["uid"] = f"running-{i}"
        cache.handle("Pod", "ADDED", {**pod, "status": running})
    for pod in rc.measured_pods(replace(shape, pods=pods), RUN, L.SCHEDULER_NAME):
        pod["metadata"]["uid"] = pod["metadata"]["name"]
        cache.handle("Pod", "ADDED", {**pod, "status": {"phase": "Pending"}})
    return cache


def measured(session: Session) -> list[TaskInfo]:
    """The session's pending pods, in the order they were created."""
    tasks = [
        t
        for job in session.jobs.values()
        for t in job.tasks.values()
        if t.status is TaskStatus.PENDING and t.sluice
    ]
    return sorted(tasks, key=lambda t: int(t.name.rpartition("-")[2]))


def one_round(cache: SchedulerCache, config: SchedulerConfiguration) -> Figures:
    """Open a session on ``cache``'s snapshot and time every pending pod's filters,
    scores, selection and placement (see the module docstring)."""
    session = open_session(cache.full_snapshot(), builtin_registry().resolve(config))
    try:
        figures = Figures(filters={}, scorers={})
        stmt = session.statement()
        share = nodes_to_score(len(session.table), config.percentage_of_nodes_to_score)
        for task in measured(session):
            _time_pod(session, stmt, task, share, figures)
        stmt.discard()
        return figures
    finally:
        session.close()


def _time_pod(
    session: Session, stmt: Statement, task: TaskInfo, share: int, figures: Figures
) -> None:
    """Time ``task``'s filters, scores, selection and placement into ``figures``."""
    assert figures.filters is not None and figures.scorers is not None
    clock = time.thread_time  # CPU time: steadier than wall time on a shared machine
    table = session.table
    for reg in session.hooks[NODE_FILTER]:
        t0 = clock()
        reg.hook(task, table, False)
        figures.filters[reg.plugin] = figures.filters.get(reg.plugin, 0.0) + clock() - t0
    t0 = clock()
    fit = session.fit(task)
    figures.fit += clock() - t0
    rows = np.flatnonzero(fit.feasible)[:share]
    figures.rows_scored += len(rows)
    for reg in session.hooks[NODE_SCORER]:
        t0 = clock()
        reg.hook(task, table, rows, False)
        figures.scorers[reg.plugin] = figures.scorers.get(reg.plugin, 0.0) + clock() - t0
    t0 = clock()
    node = session.select_node(task, fit)
    figures.select += clock() - t0
    if node is None:
        figures.unplaced += 1
        return
    t0 = clock()
    stmt.allocate(task, node.name)
    figures.place += clock() - t0
    figures.placed += 1


def _us(seconds: float, pods: int) -> float:
    return round(1e6 * seconds / max(pods, 1), 1)


def summary(shape: rc.Shape, pods: int, rounds: Sequence[Figures]) -> dict[str, Any]:
    """The JSON object of one shape: means over ``rounds`` in µs per pod timed."""

    def mean(get: Callable[[Figures], float]) -> float:
        return _us(sum(get(r) for r in rounds) / len(rounds), pods)

    filters = sorted({p for r in rounds for p in r.filters or {}})
    scorers = sorted({p for r in rounds for p in r.scorers or {}})
    return {
        "shape": shape.name,
        "description": shape.description,
        "nodes": shape.nodes,
        "running_pods": shape.running,
        "pods_timed": pods,
        "rounds": len(rounds),
        "placed": rounds[-1].placed,
        "unplaced": rounds[-1].unplaced,
        "rows_scored_per_pod": round(rounds[-1].rows_scored / max(pods, 1), 1),
        "fit_us": mean(lambda r: r.fit),
        "select_us": mean(lambda r: r.select),
        "place_us": mean(lambda r: r.place),
        "per_pod_us": mean(lambda r: r.fit + r.select + r.place),
        "filters_us": {p: mean(lambda r, p=p: (r.filters or {}).get(p, 0.0)) for p in filters},
        "scorers_us": {p: mean(lambda r, p=p: (r.scorers or {}).get(p, 0.0)) for p in scorers},
        "per_round_us": [_us(r.fit + r.select + r.place, pods) for r in rounds],
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench scorers",
        description="Per-pod cost of each filter and score on scheduler_perf's placement "
        "shapes, in process; prints JSON lines.",
    )
    p.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated, of {', '.join(SHAPES)} (default: all)",
    )
    p.add_argument("--pods", type=int, default=500, help="measured pods timed per round")
    p.add_argument("--rounds", type=int, default=2, help="rounds (every other one reversed)")
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiply nodes and running pods by this"
    )
    return p


def shapes_of(args: argparse.Namespace) -> list[rc.Shape]:
    """The shapes asked for, scaled; a bad option is a one-line SystemExit."""
    if args.pods < 1 or args.rounds < 1:
        raise SystemExit("--pods and --rounds must be at least 1")
    if not 0 < args.scale <= 10:
        raise SystemExit("--scale must be in (0, 10]")
    out = []
    for name in (s.strip() for s in args.shapes.split(",") if s.strip()):
        if name not in SHAPES:
            raise SystemExit(f"--shapes: unknown shape {name!r} (known: {', '.join(SHAPES)})")
        shape = rc.SHAPES[name]
        if args.scale != 1.0:
            shape = replace(
                shape,
                nodes=max(int(shape.nodes * args.scale), 1),
                running=int(shape.running * args.scale),
            )
        out.append(shape)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    shapes = shapes_of(args)
    quiet()
    config = SchedulerConfiguration()
    load_before = os.getloadavg()
    caches = {s.name: cluster(s, args.pods) for s in shapes}
    timings: dict[str, list[Figures]] = {s.name: [] for s in shapes}
    for r in range(args.rounds):
        for shape in shapes if r % 2 == 0 else list(reversed(shapes)):
            gc.collect()
            timings[shape.name].append(one_round(caches[shape.name], config))
    meta = machine(load_before)
    for shape in shapes:
        line = {**summary(shape, args.pods, timings[shape.name]), **meta}
        sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return 0
