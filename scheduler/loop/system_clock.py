"""SystemClock: the ``Clock`` port on real time (layer 3).

The one real-time clock of Sluice: ``sluice run`` (through the kube backend) and the
embedded cluster on the real clock (``sluice simulate --real-time``, ``--serve``, the
benchmarks) both use it. Virtual time is :class:`scheduler.sim.virtual_time.VirtualClock`.
"""

from __future__ import annotations

import time

import anyio


class SystemClock:
    """Monotonic ``now()`` (only differences mean anything), Unix ``wall()``."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
