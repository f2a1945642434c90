"""The end-to-end suite (``e2e/``) against the in-process API emulator, inside ``make test``.

It runs in a pytest subprocess of its own (``SLUICE_E2E_EMULATOR=1``, no ``KUBECONFIG``,
so a developer's cluster is never touched): the e2e suite has its own conftest and
fixtures, starts ``sluice run`` subprocesses, and takes about three minutes on a quiet
machine (15 on two cores at a load of 15). ``TIMEOUT`` only stops a suite that hangs (its
tests have no deadline of their own), so it is set well above a busy machine's time. Its
report is shown when it fails. ``make e2e`` runs the same suite against ``KUBECONFIG``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 1800


@pytest.mark.slow
def test_e2e_suite_against_the_emulator() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["SLUICE_E2E_EMULATOR"] = "1"
    # A session of its own, so that a suite stopped at the deadline takes the
    # `sluice run` processes it started with it (they would outlive it otherwise).
    with subprocess.Popen(
        [sys.executable, "-m", "pytest", "e2e", "-rfEs", "--durations=5"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            pytest.fail(f"the e2e suite took more than {TIMEOUT} s\n{stdout[-20000:]}")
    report = stdout[-30000:] + ("\n" + stderr[-5000:] if stderr else "")
    assert proc.returncode == 0, f"e2e suite failed (exit {proc.returncode}):\n{report}"
    assert " passed" in stdout, report
