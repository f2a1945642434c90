"""SIGTERM and SIGINT caught from the first moment of ``sluice run`` (layer 5).

Kubernetes stops a pod with SIGTERM whenever it likes, also while the process imports,
lists its caches or waits for a Lease. A signal that came before the command's event
loop listened for it used to kill the process with the default action (exit -15, no
clean stop). :func:`caught` installs plain handlers that only remember the first
signal, before the heavy imports; the command's stopping task (``scheduler.cli.run``)
then listens on the event loop and acts on the remembered one at once. Light on
purpose: imported before anything else of the command.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EarlySignals:
    """The first stop signal received while :func:`caught` is in force, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def remember(self, signum: int, frame: FrameType | None) -> None:
        """The handler: keeps the first signal, ignores repeats (the command acts once)."""
        del frame
        if self.signum is None:
            self.signum = signum


@contextmanager
def caught() -> Iterator[EarlySignals]:
    """Remember SIGTERM/SIGINT instead of dying of them, until the block ends; then the
    handlers before it are back. Outside the main thread (a test calling the command in
    a worker) Python cannot set handlers: nothing is installed and nothing remembered."""
    early = EarlySignals()
    if threading.current_thread() is not threading.main_thread():
        yield early
        return
    before = {s: signal.signal(s, early.remember) for s in STOP_SIGNALS}
    try:
        yield early
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
