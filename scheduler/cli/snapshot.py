"""``sluice snapshot``: what the scheduler sees of a cluster, written as a scenario that
``sluice simulate`` replays (layer 5, the command line). Reads; never writes to the
cluster.

It lists every kind the scheduler reads (:func:`scheduler.kube.listing.list_view`, with
the Workloads of the Workload API), turns the objects into a scenario
(:func:`scheduler.sim.scenario_writer.scenario_of`; ``--anonymize``:
:func:`scheduler.sim.anonymize.anonymize`) and adds the scheduler's configuration read
from its ConfigMap (``--scheduler-config NS/NAME``, the manifests' by default) when the
caller may read it. The file opens with comments saying where and when it was taken and
what was left out.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import anyio
import yaml

from scheduler.api.errors import ApiError, ConfigError, NotFoundError
from scheduler.config import parse_configuration
from scheduler.logging import quiet
from scheduler.sim.anonymize import anonymize
from scheduler.sim.scenario_writer import Snapshot, scenario_of

DEFAULT_CONFIG_MAP = "sluice-system/sluice-scheduler-config"
"""Where ``manifests/`` put the scheduler's configuration (key ``config.yaml``)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", metavar="PATH", help="the cluster (default: $KUBECONFIG)")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    p.add_argument(
        "-o", "--output", metavar="FILE", default="-", help="where to write it (default: stdout)"
    )
    p.add_argument(
        "--anonymize",
        action="store_true",
        help="rename namespaces, nodes, pods and the other namespaced objects (keeping their "
        "order), and drop the labels, annotations and container details the scheduler does "
        "not read",
    )
    p.add_argument(
        "--scheduler-config",
        default=DEFAULT_CONFIG_MAP,
        metavar="NS/NAME",
        help="the ConfigMap holding the scheduler's SchedulerConfiguration, written into the "
        f"snapshot (default {DEFAULT_CONFIG_MAP}; '' for none)",
    )


def run_snapshot(args: argparse.Namespace, out: TextIO | None = None) -> int:
    quiet()
    taken = time.time()
    snap, config, host, notes = anyio.run(
        _take, args.kubeconfig, args.context, args.scheduler_config, taken
    )
    if args.anonymize:
        anonymize(snap)
    docs: list[dict[str, Any]] = ([config] if config is not None else []) + list(snap.documents())
    header = _header(host, taken, snap, notes, anonymized=args.anonymize)
    text = header + yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
    if args.output == "-":
        (out or sys.stdout).write(text)
    else:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
        counts = ", ".join(f"{len(v)} {k}" for k, v in snap.objects.items())
        print(f"snapshot: {args.output} ({counts})", file=sys.stderr)
    for line in snap.left_out:
        print(f"left out: {line}", file=sys.stderr)
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    return 0


async def _take(
    kubeconfig: str | None, context: str | None, config_map: str, taken: float
) -> tuple[Snapshot, dict[str, Any] | None, str, list[str]]:
    from scheduler.kube import KubeClient
    from scheduler.kube.listing import SNAPSHOT_VIEW, list_view

    notes: list[str] = []
    async with await KubeClient.connect(kubeconfig, context=context) as client:
        view = await list_view(client, SNAPSHOT_VIEW)
        config = await _configuration(client, config_map, notes) if config_map else None
        host = client.host
    notes.extend(
        f"the cluster does not serve {r.plural}.{r.group or 'core'}" for r in view.unserved
    )
    return scenario_of(view.objects, taken), config, host, notes


async def _configuration(client: Any, where: str, notes: list[str]) -> dict[str, Any] | None:
    """The SchedulerConfiguration in ConfigMap ``where`` (``NS/NAME``; its key
    ``config.yaml``, or its only key), checked; None, with a note, when it cannot be read."""
    from scheduler.kube.resource_paths import Resource

    ns, slash, name = where.partition("/")
    if not slash or not ns or not name:
        raise ConfigError("--scheduler-config", None, f"expected NS/NAME, got {where!r}")
    config_maps = Resource("ConfigMap", "", "v1", "configmaps", True)
    try:
        cm = await client.request("GET", config_maps.path(ns, name), kind="configmaps", name=name)
    except NotFoundError:
        notes.append(f"no ConfigMap {where}: the replay uses the defaults, or --config")
        return None
    except ApiError as exc:
        notes.append(f"ConfigMap {where} not read ({exc}): the replay uses the defaults")
        return None
    data = cm.get("data") or {}
    text = data.get("config.yaml") or (next(iter(data.values())) if len(data) == 1 else None)
    if text is None:
        notes.append(f"ConfigMap {where} has no config.yaml: the replay uses the defaults")
        return None
    doc = yaml.safe_load(text)
    try:
        parse_configuration(doc)
    except ConfigError as exc:
        raise ConfigError(f"ConfigMap {where}", exc.field, exc.message) from exc
    return dict(doc)


def _header(host: str, taken: float, snap: Snapshot, notes: list[str], *, anonymized: bool) -> str:
    when = datetime.fromtimestamp(taken, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"# sluice snapshot of {'a cluster' if anonymized else host} at {when}"
        + (" (anonymized)" if anonymized else ""),
        "# what the scheduler reads, as a scenario: sluice simulate THIS_FILE [--config FILE]",
    ]
    lines += [f"# left out: {line}" for line in snap.left_out]
    lines += [f"# note: {line}" for line in notes]
    return "\n".join(lines) + "\n"
