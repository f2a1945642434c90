"""``sluice``: the command line (layer 5).

Every user mistake ends as one line on stderr naming the object and the problem, and
exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from scheduler.api.errors import InvalidInputError, InvalidObjectError, RegistryError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice", description="A Kubernetes scheduler for batch and AI workloads."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="run the scheduler on the embedded cluster",
        description="Load Kubernetes YAML into the embedded cluster and run the real "
        "scheduling loop on it, on a virtual clock.",
    )
    sim.add_argument(
        "files", nargs="+", metavar="FILE", help="scenario files or directories of *.yaml"
    )
    sim.add_argument(
        "--config",
        metavar="FILE",
        help="a SchedulerConfiguration file (overrides one inside the scenario)",
    )
    sim.add_argument(
        "--feature-gates", default="", metavar="K=V,...", help="e.g. SchedulerAsyncPreemption=false"
    )
    sim.add_argument(
        "--cycles",
        type=int,
        metavar="N",
        help="stop after N cycles (default: when nothing more can change, or at --until)",
    )
    sim.add_argument(
        "--until",
        metavar="DURATION",
        help="stop once this much clock time has passed, like 90s or 1h (default: 1h on "
        "the virtual clock, none on the real one; overrides until in a Simulation document)",
    )
    sim.add_argument("--output", choices=("text", "json"), default="text")
    sim.add_argument(
        "--api-latency",
        default="",
        metavar="KIND=DURATION,...",
        help="latency per call kind: bind, delete, evict, patch, create",
    )
    sim.add_argument(
        "--api-failures",
        default="",
        metavar="KIND=RATE,...",
        help="failure rate per call kind, within [0, 1]",
    )
    sim.add_argument(
        "--api-lost-replies",
        default="",
        metavar="KIND=RATE,...",
        help="rate per call kind, within [0, 1], of calls applied whose reply is then lost "
        "(the scheduler gets an error and must learn the outcome)",
    )
    sim.add_argument("--seed", type=int, help="seed of the random failures")
    sim.add_argument(
        "--real-time", action="store_true", help="run on the real clock instead of the virtual one"
    )
    sim.add_argument(
        "--report",
        metavar="FILE",
        help="write a picture of the run to FILE: one self-contained HTML page (pods per "
        "node over time, preemptions, gates, queue shares, pending pods)",
    )
    sim.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help="serve the simulated cluster's Kubernetes API on 127.0.0.1:PORT (0 picks a free "
        "port) and write a kubeconfig; runs on the real clock and keeps serving after the "
        "run until interrupted",
    )
    sim.add_argument(
        "--ui-port",
        type=int,
        default=0,
        metavar="PORT",
        help="with --serve: the port of the live page on 127.0.0.1 (default 0: a free one; "
        "its address is printed)",
    )
    sim.add_argument(
        "--kubeconfig-out",
        default=".sluice/kubeconfig",
        metavar="PATH",
        help="where --serve writes its kubeconfig",
    )
    run = sub.add_parser(
        "run",
        help="schedule pods in a Kubernetes cluster",
        description="Run the scheduler against the cluster of --kubeconfig, $KUBECONFIG or the "
        "in-cluster configuration.",
    )
    from scheduler.cli.run_options import add_arguments

    add_arguments(run)
    exp = sub.add_parser(
        "explain",
        help="why a pod or PodGroup is pending, and what the next cycle would do for it",
        description="Run one scheduling cycle in memory over the objects of a cluster (or of "
        "scenario files) and say, for one pod or PodGroup: the decision it would get now "
        "(binds, nominations, the victims a preemption or reclaim would evict), why each pod "
        "is not placed, node by node, its gang, its queue, and what it waits for. Writes "
        "nothing.",
    )
    from scheduler.cli.explain import add_arguments as add_explain_arguments

    add_explain_arguments(exp)
    snap = sub.add_parser(
        "snapshot",
        help="write what the scheduler sees of a cluster as a scenario to replay offline",
        description="List every object the scheduler reads (nodes, pods, the PodGroups and "
        "Queues of every API, topologies, budgets, priority classes, DRA objects) and the "
        "scheduler's configuration, and write them as a scenario: `sluice simulate FILE "
        "--config other.yaml` replays the cluster with another configuration. Writes "
        "nothing to the cluster.",
    )
    from scheduler.cli.snapshot import add_arguments as add_snapshot_arguments

    add_snapshot_arguments(snap)
    doc = sub.add_parser(
        "doctor",
        help="check a cluster for Sluice, before and after installing it",
        description="Check the cluster: the API server's version and the features Sluice "
        "uses, the PodGroup and Queue APIs served, Sluice's CRDs against crds/, what its "
        "ServiceAccounts may do against manifests/, the admission webhook, who holds its "
        "Lease, and another scheduler answering to its schedulerName. One line per check: "
        "ok, warn or fail, and what to do. Exit code 1 when a check failed. Writes nothing "
        "(dry runs only).",
    )
    from scheduler.cli.doctor import add_arguments as add_doctor_arguments

    add_doctor_arguments(doc)
    cfg = sub.add_parser("config", help="configuration files: convert Volcano's into Sluice's")
    from scheduler.cli.config import add_arguments as add_config_arguments

    add_config_arguments(cfg)
    ctl = sub.add_parser(
        "controller",
        help="run the controller: the default Queue, the validating webhook, the pod grouper",
    )
    ctl.add_argument("--kubeconfig", metavar="PATH")
    ctl.add_argument("--namespace", metavar="NS", help="validate only PodGroups of this namespace")
    ctl.add_argument(
        "--dev",
        action="store_true",
        help="outside the cluster: text logs, the webhook on 127.0.0.1 with a self-signed "
        "certificate unless --cert-dir has one",
    )
    ctl.add_argument("-v", "--v", dest="verbose", type=int, default=0, metavar="N")
    ctl.add_argument("--webhook-port", type=int, default=9443)
    ctl.add_argument(
        "--webhook-address",
        metavar="ADDR",
        help="where the webhook listens (default 0.0.0.0; 127.0.0.1 with --dev)",
    )
    ctl.add_argument("--cert-dir", default="/etc/sluice/webhook-certs")
    ctl.add_argument("--health-port", type=int, default=8080)
    ctl.add_argument(
        "--scheduler-name",
        default="sluice",
        metavar="NAME",
        help="group by their owners the pods of this schedulerName (default sluice)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `sluice simulate ... | head` ends quietly
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            from scheduler.cli.signals import caught

            with caught() as early:  # before the imports: a SIGTERM from now on stops cleanly
                from scheduler.cli.run import run

                return run(args, early)
        if args.command == "controller":
            from scheduler.controllers.main import run_controller

            return run_controller(
                kubeconfig=args.kubeconfig,
                namespace=args.namespace,
                dev=args.dev,
                verbose=args.verbose,
                webhook_port=args.webhook_port,
                cert_dir=args.cert_dir,
                health_port=args.health_port,
                webhook_address=args.webhook_address,
                scheduler_name=args.scheduler_name,
            )
        if args.command == "simulate":
            from scheduler.cli.simulate import simulate

            return simulate(args)
        if args.command == "explain":
            from scheduler.cli.explain import run_explain

            return run_explain(args)
        if args.command == "snapshot":
            from scheduler.cli.snapshot import run_snapshot

            return run_snapshot(args)
        if args.command == "config":
            from scheduler.cli.config import run_config

            return run_config(args)
        if args.command == "doctor":
            from scheduler.cli.doctor import run_doctor

            return run_doctor(args)
    except (InvalidInputError, RegistryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except InvalidObjectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
