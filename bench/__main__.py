"""``python -m bench [all|preemption|WORKLOAD] [--nodes N] [--pods N] [--running N] [--profile]``
(``python -m bench real``, ``scorers``, ``cel`` and ``soak`` take their own options: their
modules).

Prints one JSON object per workload to stdout, one per line (JSON Lines), in the order
the workloads ran. Each workload runs in a fresh subprocess (``python -m bench --child
WORKLOAD ...``) so that its peak RSS and timings are its own. ``--profile`` runs the
workload under cProfile and writes the 40 hottest functions by cumulative and by total
time to stderr. Exit status: 0 when every workload ran, bound every measured pod and
passed its own checks (``failures``, preemption workloads), 1 otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import pstats
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import gang_preemption, http_workload, idle, preemption, reclaim, storm
from bench.workloads import DEFAULTS, Workload, run

WORKLOADS: dict[str, Any] = {
    **DEFAULTS,
    **preemption.WORKLOADS,
    **reclaim.WORKLOADS,
    **gang_preemption.WORKLOADS,
    **idle.WORKLOADS,
    **storm.WORKLOADS,
    **http_workload.WORKLOADS,
}
GROUPS = {
    "all": list(WORKLOADS),
    "preemption": [*preemption.WORKLOADS, *storm.WORKLOADS, *gang_preemption.WORKLOADS],
    "queues": list(reclaim.WORKLOADS),
    "idle": list(idle.WORKLOADS),
    "http": list(http_workload.WORKLOADS),
}

PROFILE_TOP = 40
ROOT = Path(__file__).resolve().parent.parent
"""The checkout holding ``bench``: the children run there, so ``-m bench`` finds it."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Sluice scheduling benchmarks (scheduler_perf shapes); prints JSON lines.",
    )
    p.add_argument(
        "workload",
        nargs="?",
        default="all",
        choices=[*GROUPS, *WORKLOADS],
        help="which workload (or group of workloads) to run (default: all)",
    )
    p.add_argument("--nodes", type=int, help="number of nodes (overrides the workload's)")
    p.add_argument("--pods", type=int, help="number of measured (pending) pods")
    p.add_argument("--running", type=int, help="number of pods already running")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run under cProfile; top functions by cumulative and total time to stderr",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds each workload may take (default: none)"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def _workload(
    args: argparse.Namespace, name: str
) -> (
    Workload
    | preemption.PreemptionWorkload
    | reclaim.ReclaimWorkload
    | gang_preemption.GangPreemptionWorkload
    | idle.IdleWorkload
    | storm.StormWorkload
):
    w = WORKLOADS[name]
    changes: dict[str, Any] = {}
    for field in ("nodes", "pods", "running"):
        value = getattr(args, field)
        if value is not None:
            if value < (1 if field != "running" else 0):
                raise SystemExit(f"--{field} must be at least {1 if field != 'running' else 0}")
            changes[field] = value
    return dataclasses.replace(w, **changes)


def _child(args: argparse.Namespace) -> int:
    w = _workload(args, args.workload)
    profiler: cProfile.Profile | None = None
    wrap = None
    if args.profile:
        profiler = cProfile.Profile()

        def wrap(fn: Any) -> Any:
            assert profiler is not None
            return profiler.runcall(fn)

    if isinstance(w, preemption.PreemptionWorkload):
        figures = preemption.run(w, wrap=wrap)
    elif isinstance(w, reclaim.ReclaimWorkload):
        figures = reclaim.run(w, wrap=wrap)
    elif isinstance(w, gang_preemption.GangPreemptionWorkload):
        figures = gang_preemption.run(w, wrap=wrap)
    elif isinstance(w, idle.IdleWorkload):
        figures = idle.run(w, wrap=wrap)
    elif isinstance(w, storm.StormWorkload):
        figures = storm.run(w, wrap=wrap)
    elif w.name in http_workload.WORKLOADS:
        figures = http_workload.run(w, wrap=wrap)
    else:
        figures = run(w, wrap=wrap)
    if profiler is not None:
        figures["profiled"] = True
        if w.name not in http_workload.WORKLOADS:  # those profile their scheduler process
            _print_profile(profiler, w.name)
    sys.stdout.write(json.dumps(figures) + "\n")
    sys.stdout.flush()
    return 0 if not figures.get("unbound") and not figures.get("failures") else 1


def _print_profile(profiler: cProfile.Profile, name: str) -> None:
    for order in ("cumulative", "tottime"):
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats(order).print_stats(PROFILE_TOP)
        sys.stderr.write(f"=== {name}: top {PROFILE_TOP} by {order} ===\n{buf.getvalue()}\n")
    sys.stderr.flush()


def _parent(args: argparse.Namespace) -> int:
    names = GROUPS.get(args.workload, [args.workload])
    status = 0
    for name in names:
        _workload(args, name)  # check the overrides before starting anything
    for name in names:
        cmd = [sys.executable, "-m", "bench", "--child", name]
        for field in ("nodes", "pods", "running"):
            value = getattr(args, field)
            if value is not None:
                cmd += [f"--{field}", str(value)]
        if args.profile:
            cmd.append("--profile")
        try:
            proc = subprocess.run(
                cmd,
                stdout=subprocess.PIPE,
                text=True,
                timeout=args.timeout,
                check=False,
                cwd=ROOT,
            )
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"bench: {name} took longer than {args.timeout}s; stopped\n")
            status = 1
            continue
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            sys.stderr.write(f"bench: {name} failed (exit status {proc.returncode})\n")
            status = 1
            continue
        figures = json.loads(lines[-1])
        sys.stdout.write(json.dumps(figures) + "\n")
        sys.stdout.flush()
        if proc.returncode != 0:
            sys.stderr.write(f"bench: {name}: {figures.get('unbound')} measured pods not bound\n")
            for failure in figures.get("failures") or ():
                sys.stderr.write(f"bench: {name}: check failed: {failure}\n")
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["real"]:  # its own options: bench/real.py
        from bench import real

        return real.main(argv[1:])
    if argv[:1] == ["soak"]:  # issue 26's soak on a real API server: bench/soak.py
        from bench import soak

        return soak.main(argv[1:])
    if argv[:1] == ["scorers"]:  # each filter's and score's cost per pod: bench/scorers.py
        from bench import scorers

        return scorers.main(argv[1:])
    if argv[:1] == ["cel"]:  # DRA's CEL libraries compared: bench/cel_libraries.py
        from bench import cel_libraries

        return cel_libraries.main()
    args = _parser().parse_args(argv)
    if args.child:
        if args.workload in GROUPS:
            raise SystemExit("--child needs one workload")
        return _child(args)
    return _parent(args)


if __name__ == "__main__":
    sys.exit(main())
