"""``sluice explain pod|podgroup NS/NAME``: why it is pending, and what the next cycle would
do for it (layer 5, the command line). Never writes to the cluster.

The objects come from a cluster (``--kubeconfig``, ``$KUBECONFIG`` or in-cluster: one
list of each kind the scheduler watches) or from scenario files (``-f``: the objects as
``sluice simulate`` creates them at time 0, through the embedded cluster's admission, so
priorities and defaults are those a cluster would give; with ``--at``, the cluster as the
story's simulation left it at that moment, the scheduler having run until then).
:func:`scheduler.explanation.explain` does the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

import anyio
import yaml

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.errors import ConfigError, InvalidInputError
from scheduler.cache import SchedulerCache
from scheduler.cli.simulate import simulation
from scheduler.config import (
    SchedulerConfiguration,
    load_configuration_file,
    parse_feature_gates,
    with_feature_gates,
)
from scheduler.explanation import KINDS, explain, render
from scheduler.logging import quiet
from scheduler.schema import load_crds
from scheduler.sim.claim_controller import SimClaimController
from scheduler.sim.durations import parse_duration
from scheduler.sim.scenario import OBJECT_KINDS, Scenario, load_scenario
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=KINDS, help="what to explain")
    p.add_argument("name", metavar="NS/NAME", help="the object (namespace default if omitted)")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE",
        help="scenario files or directories (instead of a cluster)",
    )
    p.add_argument(
        "--at",
        metavar="DURATION",
        help="with -f: the moment of the story to explain (e.g. 12s): the scenario is "
        "simulated until then, the scheduler deciding as it goes (default: its start)",
    )
    p.add_argument("--kubeconfig", metavar="PATH", help="the cluster (default: $KUBECONFIG)")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    p.add_argument("--config", metavar="FILE", help="a SchedulerConfiguration file")
    p.add_argument("--feature-gates", default="", metavar="K=V,...")
    p.add_argument("--output", "-o", choices=("text", "json", "yaml"), default="text")
    p.add_argument("-v", "--verbose", action="store_true", help="name the nodes of each reason")


Listed = dict[str, list[dict[str, Any]]]
"""Objects by kind, as listed."""


def run_explain(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    quiet()
    at = _at(getattr(args, "at", None), bool(args.filename))
    scenario = load_scenario(args.filename) if args.filename else None
    config = scenario.config if scenario is not None else None
    if args.config:
        config = load_configuration_file(args.config)
    config = with_feature_gates(
        config or SchedulerConfiguration(), parse_feature_gates(args.feature_gates)
    )
    resolved = app.resolve(config)
    if scenario is None:
        listed = anyio.run(_from_cluster, args.kubeconfig, getattr(args, "context", None))
    elif at > 0:
        listed = _simulated_until(scenario, config, resolved, at)
    else:
        listed = _from_scenario(scenario)
    cache = SchedulerCache(config.scheduler_name, wait_for_pod_grouper=config.wait_for_pod_grouper)
    for kind in OBJECT_KINDS:
        for obj in listed.get(kind, ()):
            cache.handle(kind, "ADDED", obj)
    try:
        result = explain(cache, resolved, args.kind, args.name, wall=time.time())
    except InvalidInputError as exc:
        later = _arrives_later(scenario, args.kind, args.name, at)
        if later is None:
            raise
        raise InvalidInputError(
            exc.obj,
            exc.field,
            f"not there at {at:g}s of the scenario, where it arrives at {later:g}s: "
            f"explain it then, with --at {later:g}s",
        ) from exc
    if args.output == "json":
        out.write(json.dumps(result, indent=2) + "\n")
    elif args.output == "yaml":
        out.write(yaml.safe_dump(result, sort_keys=False))
    else:
        out.write(render(result, verbose=args.verbose) + "\n")
    return 0


def _at(text: str | None, from_files: bool) -> float:
    """Seconds of ``--at`` (0 when not given); only with scenario files."""
    if text is None:
        return 0.0
    if not from_files:
        raise ConfigError(
            "--at", None, "needs scenario files (-f): a cluster is explained as it is now"
        )
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError("--at", None, str(exc)) from exc


def _arrives_later(scenario: Scenario | None, kind: str, name: str, at: float) -> float | None:
    """When the object named ``name`` of ``kind`` (pod or podgroup) arrives in the
    scenario after ``at``; None when it does not."""
    if scenario is None:
        return None
    namespace, _, short = name.rpartition("/")
    wanted = "Pod" if kind == "pod" else "PodGroup"
    for arrival in scenario.arrivals:
        meta = arrival.obj.get("metadata") or {}
        if (
            arrival.at > at
            and arrival.obj.get("kind") == wanted
            and meta.get("name") == short
            and (meta.get("namespace") or "default") == (namespace or "default")
        ):
            return arrival.at
    return None


def _simulated_until(
    scenario: Scenario,
    config: SchedulerConfiguration,
    resolved: app.ResolvedConfiguration,
    at: float,
) -> Listed:
    """The objects of the embedded cluster after the scenario ran ``at`` seconds of
    virtual time with the scheduler of ``config`` (as ``sluice simulate --until``)."""
    sim = simulation(scenario, config, resolved, behaviour=scenario.behaviour, until=at)
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return {kind: list(sim.store.list(kind)[0]) for kind in OBJECT_KINDS}


def from_scenario(files: list[str]) -> tuple[Listed, SchedulerConfiguration | None]:
    """The objects of the scenario ``files`` present at time 0, by kind, as the embedded
    cluster holds them (validated, defaulted, claims made from templates), and the
    scenario's configuration if it has one."""
    scenario = load_scenario(files)
    return _from_scenario(scenario), scenario.config


def _from_scenario(scenario: Scenario) -> Listed:
    catalog = load_crds()

    def validate(obj: dict[str, Any]) -> dict[str, Any]:
        return catalog.check(obj) if catalog.covers(obj) else obj

    store = ObjectStore(VirtualClock().wall, validator=validate)
    arrivals = [a.obj for a in scenario.arrivals if a.at <= 0]
    if not any(o["kind"] == "Queue" and o["metadata"]["name"] == L.DEFAULT_QUEUE for o in arrivals):
        # as `sluice simulate` (and the controller, in a cluster) creates it
        queue = {
            "apiVersion": L.API_VERSION,
            "kind": "Queue",
            "metadata": {"name": L.DEFAULT_QUEUE},
        }
        store.create({**queue, "spec": {"weight": 1}})
    for obj in arrivals:
        store.create(obj, restore=True)
    SimClaimController(store).attach()  # claims made from templates, as in a cluster
    return {kind: list(store.list(kind)[0]) for kind in OBJECT_KINDS}


async def _from_cluster(kubeconfig: str | None, context: str | None = None) -> Listed:
    from scheduler.kube import KubeClient
    from scheduler.kube.listing import list_view

    async with await KubeClient.connect(kubeconfig, context=context) as client:
        return (await list_view(client)).objects
