"""``sluice doctor``: check a cluster for Sluice, before and after installing it (layer 5).

Prints one line per check (``ok``, ``warn`` or ``fail``, what was seen, and what to do)
or JSON (``-o json``); exits 1 when a check failed, 0 otherwise (warnings included), 2
for a bad option. ``kubectl sluice doctor`` runs the same checks.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import anyio

from scheduler.api.labels import SCHEDULER_NAME
from scheduler.doctor.findings import Finding, exit_code, render_json, render_text
from scheduler.doctor.manifests import MANIFESTS_NAMESPACE

__all__ = ["add_arguments", "doctor", "run_doctor"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="PATH", help="default: $KUBECONFIG, in-cluster")
    parser.add_argument("--context", metavar="NAME", help="a context of the kubeconfig")
    parser.add_argument(
        "-n",
        "--namespace",
        default=MANIFESTS_NAMESPACE,
        metavar="NS",
        help="where Sluice is (or will be) installed (default %(default)s)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        metavar="NAME",
        help="the schedulerName Sluice serves (default %(default)s)",
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")


async def doctor(
    kubeconfig: str | None, context: str | None, namespace: str, scheduler_name: str
) -> list[Finding]:
    """Every check against the cluster of ``kubeconfig``/``context``."""
    from scheduler.doctor import run_checks
    from scheduler.kube import KubeClient

    client = await KubeClient.connect(kubeconfig, context=context)
    async with client:
        return await run_checks(client, namespace=namespace, scheduler_name=scheduler_name)


def run_doctor(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Entry of ``sluice doctor``; its exit code. A bad kubeconfig raises ConfigError
    (the command line prints it, exit code 2)."""
    findings = anyio.run(doctor, args.kubeconfig, args.context, args.namespace, args.scheduler_name)
    text = render_json(findings) if args.output == "json" else render_text(findings)
    print(text, file=out or sys.stdout)
    return exit_code(findings)
