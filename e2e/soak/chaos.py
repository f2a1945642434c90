"""The soak's chaos (issue 26): the API server killed and started again, the leader
killed, the proxy's short outage, each on its own schedule, all at once.

A part of the soak (:mod:`soak`). Each kind strikes first after ``first_<kind>`` seconds
and then every ``<kind>_every`` seconds, jittered by up to a fifth either way (seeded),
until :meth:`Chaos.run`'s deadline. What it does:

* **API server**: SIGKILL through the pid file of the ``up`` state directory, down for
  ``apiserver_down`` seconds, started again with the same command line
  (:class:`control_plane.LocalControlPlane`), then waited for (``/readyz``, and the RBAC
  in force again when the schedulers run as ServiceAccounts). On the emulator, the
  emulator stops serving and resumes instead. The schedulers' 403s while the restarted
  server's authorizer fills its cache are tolerated in that window, and for the
  leaders' renew deadline after it (:data:`RENEW_DEADLINE`).
* **leader**: SIGKILL of the replica holding the Lease (:meth:`soak.replicas.Replicas.
  kill_leader`); the supervisor starts another.
* **outage**: the fault proxy stops listening for ``outage_seconds`` (every watch cut,
  connections refused), then listens again.

Every strike is a disturbance (:mod:`soak.disturbances`) and is listed in
:attr:`Chaos.log`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import anyio
from control_plane import LocalControlPlane, wait_for_rbac
from harness import Cluster

from soak.disturbances import Disturbances
from soak.replicas import Replicas
from soak.settings import SoakSettings

RENEW_DEADLINE = 10.0
"""``sluice run``'s leader renew deadline (:class:`scheduler.kube.leader.LeaderElectionConfig`):
a leader whose renewals the restarted server refused logs ``leadership lost`` with the last
refusal's 403 up to this long after it."""


def _iso_now(end: bool = False, later: float = 0.0) -> str:
    """Now (plus ``later`` seconds) in UTC as the logs write it, at the start (or ``end``)
    of the second."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + later))
    return stamp + (".999999Z" if end else ".000000Z")


class Chaos:
    """See the module docstring. ``control_plane``: the local control plane whose API
    server is killed (None on the emulator)."""

    def __init__(
        self,
        cluster: Cluster,
        replicas: Replicas,
        settings: SoakSettings,
        disturbances: Disturbances,
        control_plane: LocalControlPlane | None,
    ) -> None:
        self.cluster = cluster
        self.replicas = replicas
        self.settings = settings
        self.disturbances = disturbances
        self.control_plane = control_plane
        self.rng = random.Random(settings.seed + 1)
        self.kills: Counter[str] = Counter()
        self.log: list[dict[str, Any]] = []
        self.forbidden_windows = replicas.forbidden_windows
        """(from, to) UTC timestamps when a restarted API server may refuse with 403 (the
        replicas' list: each replica's log is judged with it)."""

    async def run(self, deadline: float) -> None:
        s = self.settings
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._every, "apiserver", s.first_apiserver, s.apiserver_every, deadline)
            tg.start_soon(self._every, "leader", s.first_leader, s.leader_every, deadline)
            tg.start_soon(self._every, "outage", s.first_outage, s.outage_every, deadline)

    async def _every(self, kind: str, first: float, every: float, deadline: float) -> None:
        due = time.monotonic() + first
        while due < deadline:
            await anyio.sleep(max(0.0, due - time.monotonic()))
            await self.strike(kind)
            due += every * self.rng.uniform(0.8, 1.2)

    async def strike(self, kind: str) -> None:
        t = round(self.replicas.now(), 1)
        started = time.monotonic()
        if kind == "apiserver":
            entry = await self._restart_apiserver()
        elif kind == "leader":
            change = await self.replicas.kill_leader()
            entry = {"killed": change.old} if change is not None else {"skipped": "no leader"}
        else:
            entry = await self._outage()
        if "skipped" not in entry:
            self.kills[kind] += 1
        self.log.append(
            {"kind": kind, "at": t, "seconds": round(time.monotonic() - started, 1), **entry}
        )

    async def _restart_apiserver(self) -> dict[str, Any]:
        d = self.disturbances.open("apiserver killed")
        begin = _iso_now()
        if self.control_plane is None:
            server = self.cluster.emulator
            assert server is not None, "no API server to kill: neither local nor emulated"
            await server.stop()
            await anyio.sleep(self.settings.apiserver_down)
            await server.resume()
        else:
            argv = await self.control_plane.kill_apiserver()
            await anyio.sleep(self.settings.apiserver_down)
            self.control_plane.start_apiserver(argv)
            await self.control_plane.wait_ready(self.cluster.api)
            if self.cluster.scheduler_kubeconfig != self.cluster.kubeconfig:
                await wait_for_rbac(self.cluster.api, timeout=60)
        self.disturbances.close(d)
        assert d.end is not None
        # A 403 just after the RBAC is in force again comes from a request sent before; a
        # leader's "leadership lost" tells of a refusal up to its renew deadline later.
        await anyio.sleep(1.0)
        self.forbidden_windows.append((begin, _iso_now(end=True, later=RENEW_DEADLINE)))
        return {"down_seconds": round(d.end - d.start, 1)}

    async def _outage(self) -> dict[str, Any]:
        proxy = self.cluster.proxy
        assert proxy is not None, "the soak runs behind the fault proxy"
        d = self.disturbances.open("proxy outage")
        await proxy.outage()
        await anyio.sleep(self.settings.outage_seconds)
        await proxy.resume()
        self.disturbances.close(d)
        return {"outage_seconds": self.settings.outage_seconds}
