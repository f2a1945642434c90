"""``sluice run`` stopped by SIGTERM or SIGINT at any moment of its life ends cleanly with
exit code 0 (scheduler/cli/signals.py, ``Stopping`` in scheduler/cli/run.py). A follower
stopped right after its caches synced once died of the signal's default action (exit
-15): the handler was installed only once the loop was made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from scheduler.cli.signals import caught
from tests.cli.test_run import UNREACHABLE


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_event_loop_is_remembered_not_fatal(signum: int) -> None:
    before = signal.getsignal(signum)
    with caught() as early:
        os.kill(os.getpid(), signum)
        os.kill(os.getpid(), signal.SIGTERM)  # a repeat does not replace the first
        assert early.signum == signum
    assert signal.getsignal(signum) is before


def test_outside_the_main_thread_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def worker() -> None:
        with caught() as early:
            seen.append(signal.getsignal(signal.SIGTERM))
            seen.append(early.signum)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before, None]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stopped_while_its_caches_cannot_fill(tmp_path: Path, signum: int) -> None:
    """The API server never answers, so the lists retry for ever: the signal ends the
    start at once, with 0 and the line that says so."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNREACHABLE))
    command = ["run", "--kubeconfig", str(kubeconfig), "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli.main", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # wait until it is listing, and failing to
            if "list or watch failed" in line:
                break
        else:
            pytest.fail(f"it ended before listing (exit {proc.wait()})")
        started = time.monotonic()
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert time.monotonic() - started < 10
    assert "stopped while starting" in rest
