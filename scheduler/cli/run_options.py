"""Options of ``sluice run`` (layer 5): kept apart so that other commands do not import
the Kubernetes client just to build the parser."""

from __future__ import annotations

import argparse
import os

DEFAULT_PORT = 10259
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="a SchedulerConfiguration file")
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="default: $KUBECONFIG, then the in-cluster configuration",
    )
    parser.add_argument("--feature-gates", default="", metavar="K=V,...")
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="run only while holding the Lease (for several replicas)",
    )
    parser.add_argument("--leader-elect-resource-name", default="sluice-scheduler")
    parser.add_argument(
        "--leader-elect-resource-namespace",
        default=os.environ.get("POD_NAMESPACE", "sluice-system"),
    )
    parser.add_argument("--kube-api-qps", type=float, default=DEFAULT_QPS)
    parser.add_argument("--kube-api-burst", type=int, default=DEFAULT_BURST)
    parser.add_argument(
        "--event-qps",
        type=float,
        default=None,
        metavar="QPS",
        help="events written a second, on a client of their own (default: --kube-api-qps, "
        "as kube-scheduler's event client; 0: no limit)",
    )
    parser.add_argument(
        "--event-burst",
        type=int,
        default=None,
        metavar="N",
        help="events written at once before --event-qps applies (default: --kube-api-burst)",
    )
    parser.add_argument(
        "--eviction-mode",
        choices=("delete", "evict"),
        default="delete",
        help="delete victims, or evict them through the Eviction API "
        "(which honours PodDisruptionBudgets)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port of /metrics, /healthz and /readyz (0: none)",
    )
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument(
        "--ui",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the live page (/ui: queues, pending jobs and why, nodes, holds, recent "
        "preemptions) on --port beside /metrics (default: on; --no-ui turns it off)",
    )
    parser.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=int,
        default=0,
        metavar="N",
        help="log verbosity, as kube-scheduler's -v",
    )
