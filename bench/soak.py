"""``python -m bench soak [--minutes N] [--report FILE]``: the soak of issue 26 on a real
API server, for as long as asked.

The soak itself is an end-to-end test (``e2e/test_soak.py``, its parts in ``e2e/soak/``):
this runs it through ``e2e/run-real-server`` (a fresh ``../shared/k8s/up
--controller-manager`` control plane, stopped after) with ``SLUICE_SOAK_MINUTES`` set,
and prints its JSON report (without the samples, which stay in the file). Exit status:
the test's (0 when every invariant held and every check over time passed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "test_chaos_with_work_that_never_stops"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench soak",
        description="The soak of issue 26 on a real API server; prints its JSON report.",
    )
    p.add_argument("--minutes", type=float, default=2.0, help="how long work arrives (default 2)")
    p.add_argument("--report", type=Path, help="where the JSON report goes (default: a temp file)")
    args = p.parse_args(argv)
    if args.minutes <= 0:
        p.error("--minutes: must be positive")
    report = args.report or Path(tempfile.mkdtemp(prefix="sluice-soak-")) / "report.json"
    env = {
        **os.environ,
        "SLUICE_SOAK_MINUTES": str(args.minutes),
        "SLUICE_SOAK_REPORT": str(report),
    }
    done = subprocess.run(
        [str(ROOT / "e2e" / "run-real-server"), "-k", TEST, "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        check=False,
    )
    if report.exists():
        figures = json.loads(report.read_text())
        figures.pop("samples", None)
        print(json.dumps({"report": str(report), **figures}))
    return done.returncode
