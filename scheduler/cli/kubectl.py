"""``kubectl sluice``: the kubectl plugin (layer 5, the command line).

The package installs the ``kubectl-sluice`` command; kubectl finds it on ``PATH`` and
runs it for ``kubectl sluice ...``, passing the arguments that follow. It reads the
cluster (never writes) with kubectl's own flags, before or after the subcommand:
``--kubeconfig``, ``--context``, ``-n/--namespace`` (default: the context's namespace,
else ``default``), ``-A/--all-namespaces``, ``-o/--output``.

* ``kubectl sluice explain pod|podgroup [NS/]NAME``: ``sluice explain`` against the
  cluster (``-o json|yaml``; ``-v`` names the nodes of each reason);
* ``kubectl sluice queues``: the queue tree as a table: weight, state, what each deserves
  and holds (the status the scheduler writes), guarantee, capability, jobs pending,
  inqueue and running; Sluice's Queues and Volcano's where served (``-o json|yaml``: the
  Queue objects, as ``kubectl get -o`` prints them, in tree order; ``-o wide`` adds
  priority and the closed reason);
* ``kubectl sluice jobs``: the PodGroups of every API the cluster serves (Sluice's,
  Volcano's, scheduler-plugins', the Workload API's), each with its queue, phase, minimum,
  its pods pending, running, succeeded and failed, and why it waits (its condition's
  message, else its first pending pod's); ``-o json|yaml``: the PodGroup objects;
* ``kubectl sluice doctor``: ``sluice doctor`` (``-n``: where Sluice is installed, default
  ``sluice-system``; ``--scheduler-name``; ``-o json``); exit code 1 when a check failed.

Every mistake is one line on stderr and exit code 2; a cluster that cannot be reached or
refuses (403) is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import yaml

from scheduler.api import labels as L
from scheduler.api.errors import ApiError, InvalidInputError, InvalidObjectError
from scheduler.api.group_apis import APIS, GroupApi
from scheduler.api.group_apis.table import BY_GROUP_KIND, BY_QUEUE_KIND
from scheduler.api.membership import pod_group_ref, resolve_job_id

OUTPUTS = ("text", "wide", "json", "yaml")


def _common(*, suppress: bool) -> argparse.ArgumentParser:
    """kubectl's flags; on the subcommands their defaults are left out (``suppress``), so
    that a flag given before the subcommand is not overwritten by the default after."""
    p = argparse.ArgumentParser(add_help=False)
    default = argparse.SUPPRESS if suppress else None
    p.add_argument("--kubeconfig", metavar="PATH", default=default)
    p.add_argument("--context", metavar="NAME", default=default)
    p.add_argument("-n", "--namespace", metavar="NS", default=default)
    p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
    )
    p.add_argument(
        "-o", "--output", choices=OUTPUTS, default=argparse.SUPPRESS if suppress else "text"
    )
    return p


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl sluice",
        description="Sluice's view of a cluster: why a job waits, the queues, the gangs.",
        parents=[_common(suppress=False)],
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = _common(suppress=True)
    exp = sub.add_parser(
        "explain",
        parents=[common],
        help="why a pod or PodGroup is pending, and what the next cycle would do for it",
    )
    exp.add_argument("kind", choices=("pod", "podgroup"))
    exp.add_argument("name", metavar="[NS/]NAME")
    exp.add_argument("-v", "--verbose", action="store_true", help="name the nodes of each reason")
    exp.add_argument("--config", metavar="FILE", help="a SchedulerConfiguration file")
    sub.add_parser("queues", parents=[common], help="the queue tree, with shares and jobs")
    sub.add_parser("jobs", parents=[common], help="PodGroups of every API, phase and reason")
    doc = sub.add_parser(
        "doctor", parents=[common], help="check the cluster for Sluice (sluice doctor)"
    )
    doc.add_argument("--scheduler-name", default=L.SCHEDULER_NAME, metavar="NAME")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry of ``kubectl-sluice``."""
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    try:
        if args.command == "explain":
            return _explain(args, out)
        if args.command == "doctor":
            return _doctor(args, out)
        listed = anyio.run(_list, args)
        if args.command == "queues":
            _queues(listed, args, out)
        else:
            _jobs(listed, args, out)
        return 0
    except (InvalidInputError, InvalidObjectError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# ---------------------------------------------------------------------------- doctor


def _doctor(args: argparse.Namespace, out: TextIO) -> int:
    from scheduler.cli.doctor import doctor
    from scheduler.doctor.findings import exit_code, render_json, render_text
    from scheduler.doctor.manifests import MANIFESTS_NAMESPACE

    if args.output not in ("text", "json"):
        raise InvalidInputError("kubectl sluice doctor", "-o", "must be text or json")
    findings = anyio.run(
        doctor,
        args.kubeconfig,
        args.context,
        args.namespace or MANIFESTS_NAMESPACE,
        args.scheduler_name,
    )
    print(render_json(findings) if args.output == "json" else render_text(findings), file=out)
    return exit_code(findings)


# ---------------------------------------------------------------------------- explain


def _explain(args: argparse.Namespace, out: TextIO) -> int:
    from scheduler.cli.explain import run_explain
    from scheduler.explanation import with_namespace

    name = with_namespace(args.name, args.namespace or _context_namespace(args))
    output = {"text": "text", "wide": "text", "json": "json", "yaml": "yaml"}[args.output]
    explain_args = argparse.Namespace(
        kind=args.kind,
        name=name,
        filename=None,
        kubeconfig=args.kubeconfig,
        context=args.context,
        config=args.config,
        feature_gates="",
        output=output,
        verbose=args.verbose or args.output == "wide",
    )
    return run_explain(explain_args, out)


def _context_namespace(args: argparse.Namespace) -> str:
    """The namespace of the kubeconfig's context (``--context``, else its current one), as
    kubectl takes it; ``default`` when it names none."""
    path = args.kubeconfig or os.environ.get("KUBECONFIG", "") or str(Path("~/.kube/config"))
    for file in (Path(p).expanduser() for p in path.split(os.pathsep) if p):
        try:
            doc = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        name = args.context or doc.get("current-context")
        for ctx in doc.get("contexts") or ():
            if ctx.get("name") == name:
                return str((ctx.get("context") or {}).get("namespace") or "default")
    return "default"


# ---------------------------------------------------------------------------- listing


async def _list(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The objects ``args.command`` shows: the Queues of both APIs; the PodGroups of every
    API and the pods of the namespace (or all)."""
    from scheduler.kube import KubeClient
    from scheduler.kube.listing import list_objects, list_view
    from scheduler.kube.resource_paths import PODS, Resource, pod_groups_of, queues_of

    wanted: tuple[Resource, ...]
    if args.command == "queues":
        wanted = tuple(queues_of(api) for api in APIS if api.queue_kind)
    else:
        wanted = tuple(pod_groups_of(api) for api in APIS)
    async with await KubeClient.connect(args.kubeconfig, context=args.context) as client:
        if args.command == "queues":
            return (await list_view(client, wanted)).objects
        namespace = None if args.all_namespaces else args.namespace or _context_namespace(args)
        listed = (await list_view(client, wanted)).objects
        if namespace is not None:
            listed = {
                k: [o for o in v if o["metadata"].get("namespace") == namespace]
                for k, v in listed.items()
            }
        listed["Pod"] = await list_objects(client, PODS, namespace)
        return listed


def _write_objects(items: list[dict[str, Any]], output: str, out: TextIO) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}
    if output == "json":
        out.write(json.dumps(doc, indent=4) + "\n")
    else:
        out.write(yaml.safe_dump(doc, sort_keys=False))


def _table(rows: list[list[str]], out: TextIO) -> None:
    """Columns as kubectl prints them: left-aligned, three spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _amounts(m: Any) -> str:
    if not isinstance(m, Mapping) or not m:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in m.items())


# ---------------------------------------------------------------------------- queues


def _queues(listed: dict[str, list[dict[str, Any]]], args: argparse.Namespace, out: TextIO) -> None:
    queues: dict[str, tuple[GroupApi, dict[str, Any]]] = {}
    for key, group_api in BY_QUEUE_KIND.items():
        for q in listed.get(key, ()):
            queues.setdefault(q["metadata"]["name"], (group_api.api, q))  # Sluice's wins a name
    shown = {name: BY_QUEUE_KIND[api.queue_key].shown_queue(q) for name, (api, q) in queues.items()}
    root = next((name for name, s in shown.items() if s.root), "")
    parents = {name: s.parent or ("" if s.root else root) for name, s in shown.items()}
    order: list[tuple[str, int]] = []

    def visit(name: str, depth: int, seen: frozenset[str]) -> None:
        order.append((name, depth))
        for child in sorted(c for c, p in parents.items() if p == name and c not in seen):
            visit(child, depth + 1, seen | {child})

    for top in sorted(n for n, p in parents.items() if not p or p not in queues):
        visit(top, 0, frozenset({top}))
    order += [(n, 0) for n in sorted(set(queues) - {n for n, _ in order})]  # in a loop
    if args.output in ("json", "yaml"):
        _write_objects([queues[n][1] for n, _ in order], args.output, out)
        return
    wide = args.output == "wide"
    header = [
        "NAME",
        "API",
        "WEIGHT",
        "STATE",
        "DESERVED",
        "ALLOCATED",
        "GUARANTEE",
        "CAPABILITY",
        "PENDING",
        "INQUEUE",
        "RUNNING",
    ]
    rows = [header + (["PRIORITY", "CLOSED"] if wide else [])]
    for name, depth in order:
        api, q = queues[name]
        spec, status = q.get("spec") or {}, q.get("status") or {}
        guarantee = shown[name].guarantee
        closed = next(
            (
                c.get("message", "")
                for c in status.get("conditions") or ()
                if c.get("type") == "Closed"
            ),
            "",
        )
        row = [
            "  " * depth + name,
            api.name,
            str(spec.get("weight", 1)),
            str(status.get("state") or spec.get("state") or "Open"),
            _amounts(status.get("deserved")),
            _amounts(status.get("allocated")),
            _amounts(guarantee),
            _amounts(spec.get("capability"))
            if spec.get("capability") is not None
            else "<unbounded>",
            str(status.get("pending", 0)),
            str(status.get("inqueue", 0)),
            str(status.get("running", 0)),
        ]
        if wide:
            row += [str(spec.get("priority", 0)), closed or "<none>"]
        rows.append(row)
    if len(rows) == 1:
        print("No queues found.", file=sys.stderr)
        return
    _table(rows, out)


# ---------------------------------------------------------------------------- jobs


def _jobs(listed: dict[str, list[dict[str, Any]]], args: argparse.Namespace, out: TextIO) -> None:
    groups: list[tuple[GroupApi, dict[str, Any]]] = [
        (api, pg) for api in APIS for pg in listed.get(api.pod_group_key, ())
    ]
    groups.sort(key=lambda g: (g[1]["metadata"]["namespace"], g[1]["metadata"]["name"], g[0].name))
    if args.output in ("json", "yaml"):
        _write_objects([pg for _, pg in groups], args.output, out)
        return
    ids = {api.job_id(pg["metadata"]["namespace"], pg["metadata"]["name"]) for api, pg in groups}
    members: dict[str, list[dict[str, Any]]] = {}
    for pod in listed.get("Pod", ()):
        ref = pod_group_ref(pod)
        if ref is None:
            continue
        meta = pod["metadata"]
        job = resolve_job_id(ref, meta["namespace"], meta["name"], _Listed(ids))
        members.setdefault(job, []).append(pod)
    header = [
        "NAME",
        "API",
        "QUEUE",
        "PHASE",
        "MIN",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "REASON",
    ]
    if args.all_namespaces:
        header.insert(0, "NAMESPACE")
    rows = [header]
    for api, pg in groups:
        meta = pg["metadata"]
        shown = BY_GROUP_KIND[api.pod_group_key].shown(pg)
        pods = members.get(api.job_id(meta["namespace"], meta["name"]), [])
        phases = [_pod_phase(p) for p in pods]
        reason = shown.waiting or _pod_reason(pods)
        if args.output != "wide" and len(reason) > 100:
            reason = reason[:97] + "..."
        row = [
            meta["name"],
            api.name,
            shown.queue,
            shown.phase,
            str(shown.minimum),
            str(phases.count("Pending")),
            str(phases.count("Running")),
            str(phases.count("Succeeded")),
            str(phases.count("Failed")),
            reason or "<none>",
        ]
        if args.all_namespaces:
            row.insert(0, meta["namespace"])
        rows.append(row)
    if len(rows) == 1:
        where = "any namespace" if args.all_namespaces else "this namespace"
        print(f"No PodGroups found in {where}.", file=sys.stderr)
        return
    _table(rows, out)


def _pod_phase(pod: Mapping[str, Any]) -> str:
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    if phase == "Pending" and (pod.get("spec") or {}).get("nodeName"):
        return "Running"  # bound, starting: not waiting for the scheduler
    return phase


class _Listed:
    """The PodGroups listed (job ids), as :func:`resolve_job_id` asks of them."""

    def __init__(self, ids: set[str]) -> None:
        self._ids = ids

    def has_group(self, job_id: str, /) -> bool:
        return job_id in self._ids

    def is_basic(self, job_id: str, /) -> bool:
        del job_id
        return False  # a basic group's members are listed under it all the same


def _pod_reason(pods: list[dict[str, Any]]) -> str:
    """Why a group that says nothing waits: its first pending pod's condition."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if _pod_phase(pod) != "Pending":
            continue
        for c in (pod.get("status") or {}).get("conditions") or ():
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message"):
                return f"{pod['metadata']['name']}: {c['message']}"
    return ""


def run() -> None:
    """The console script ``kubectl-sluice``."""
    sys.exit(main())
