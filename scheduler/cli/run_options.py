"""Options of ``sluice run`` (layer 5): kept apart so that other commands do not import
the Kubernetes client just to build the parser."""

from __future__ import annotations

import argparse
import os

from scheduler.serving.settings import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_TTL

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
    parser.add_argument(
        "--leader-elect-resource-name",
        default=None,
        help="the Lease (default sluice-scheduler, or sluice-scheduler-SHARD with --shard)",
    )
    parser.add_argument(
        "--shard",
        default=None,
        metavar="NAME",
        help="run as the shard NAME: one of the configuration's shards (or, with none "
        "listed, the shard of the node pool NAME), with a Lease of its own",
    )
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
        help="port of /metrics, the live page and the probes /healthz, /readyz and /livez "
        "(0: none); served over TLS, every path but the probes to callers whose bearer token "
        "the API server authenticates (TokenReview) and allows to get it (SubjectAccessReview)",
    )
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument(
        "--ui",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the live page (/ui: queues, pending jobs and why, nodes, holds, recent "
        "preemptions) on --port beside /metrics (default: on; --no-ui turns it off)",
    )
    port = parser.add_argument_group("the port's security (as kube-scheduler's)")
    port.add_argument(
        "--insecure-serving",
        action="store_true",
        help="serve --port over plain HTTP to anyone, with no authentication or authorization: "
        "for local use only (against `sluice simulate --serve`, on a laptop, in tests)",
    )
    port.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="the port's certificate, PEM (default: one made at start, for localhost, "
        "127.0.0.1 and the host's name)",
    )
    port.add_argument("--tls-private-key-file", metavar="FILE", help="its key, PEM")
    port.add_argument(
        "--authorization-always-allow-paths",
        default=",".join(DEFAULT_ALWAYS_ALLOW_PATHS),
        metavar="PATH,...",
        help="paths served without authentication or authorization; a path ending in '*' is "
        "a prefix (default: %(default)s)",
    )
    port.add_argument(
        "--authentication-token-webhook-cache-ttl",
        default=f"{DEFAULT_TTL:g}s",
        metavar="DURATION",
        help="how long a token's review is kept (default: %(default)s)",
    )
    port.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        default=f"{DEFAULT_TTL:g}s",
        metavar="DURATION",
        help="how long an access review that allows is kept (default: %(default)s)",
    )
    port.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        default=f"{DEFAULT_TTL:g}s",
        metavar="DURATION",
        help="how long an access review that denies is kept (default: %(default)s)",
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
