"""``sluice explain pod|podgroup NS/NAME``: why it is pending, and what the next cycle would
do for it (layer 5, the command line). Never writes to the cluster.

The objects come from a cluster (``--kubeconfig``, ``$KUBECONFIG`` or in-cluster: one
list of each kind the scheduler watches) or from scenario files (``-f``: the objects as
``sluice simulate`` creates them at time 0, through the embedded cluster's admission, so
priorities and defaults are those a cluster would give). :func:`scheduler.explain.explain`
does the rest.
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
from scheduler.cache import SchedulerCache
from scheduler.config import (
    SchedulerConfiguration,
    load_configuration_file,
    parse_feature_gates,
    with_feature_gates,
)
from scheduler.explain import KINDS, explain, render
from scheduler.logging import quiet
from scheduler.schema import load_crds
from scheduler.sim.claims import SimClaimController
from scheduler.sim.clock import VirtualClock
from scheduler.sim.scenario import OBJECT_KINDS, load_scenario
from scheduler.sim.store import ObjectStore


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
    config: SchedulerConfiguration | None = None
    if args.filename:
        listed, config = _from_scenario(args.filename)
    else:
        listed = anyio.run(_from_cluster, args.kubeconfig, getattr(args, "context", None))
    if args.config:
        config = load_configuration_file(args.config)
    config = with_feature_gates(
        config or SchedulerConfiguration(), parse_feature_gates(args.feature_gates)
    )
    resolved = app.resolve(config)
    cache = SchedulerCache(config.scheduler_name, wait_for_pod_grouper=config.wait_for_pod_grouper)
    for kind in OBJECT_KINDS:
        for obj in listed.get(kind, ()):
            cache.handle(kind, "ADDED", obj)
    result = explain(cache, resolved, args.kind, args.name, wall=time.time())
    if args.output == "json":
        out.write(json.dumps(result, indent=2) + "\n")
    elif args.output == "yaml":
        out.write(yaml.safe_dump(result, sort_keys=False))
    else:
        out.write(render(result, verbose=args.verbose) + "\n")
    return 0


def _from_scenario(files: list[str]) -> tuple[Listed, SchedulerConfiguration | None]:
    scenario = load_scenario(files)
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
    return {kind: list(store.list(kind)[0]) for kind in OBJECT_KINDS}, scenario.config


async def _from_cluster(kubeconfig: str | None, context: str | None = None) -> Listed:
    from scheduler.kube import KubeClient
    from scheduler.kube.listing import list_view

    async with await KubeClient.connect(kubeconfig, context=context) as client:
        return (await list_view(client)).objects
