"""Two ``sluice run`` replicas with leader election, kept alive, and what they hold over
time (issue 26).

A part of the soak (:mod:`soak`). :class:`Replicas` starts two replicas (through the
test's ``start_scheduler``, so their logs are checked for 403s and shown when the test
fails) and, every second, starts a new one in place of a replica that ended: killed by
the chaos (SIGKILL of the leader), or ended by itself. A replica may end by itself only
after losing its leadership (exit code 1 and ``leadership lost`` in its log: the API
server was away longer than the renew deadline); any other end is a crash, counted.

Every ``sample_every`` seconds it samples each live replica: its RSS and peak RSS
(``/proc``), and from its ``/metrics`` the asyncio tasks, open sockets and events
dropped (:mod:`scheduler.metrics.runtime`, ``scheduler_events_dropped_total``), and
whether it leads. A leader change is timed from the moment the old leader was killed (or
ended) to the new holder of the Lease and to the next bind the watcher sees.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from harness import ApiFailure, Cluster, SchedulerProcess, unix_seconds

from soak.disturbances import Disturbance, Disturbances
from soak.settings import SoakSettings

_CYCLE_SECONDS = "scheduler_cycle_duration_seconds_sum"

StartScheduler = Callable[..., Awaitable[SchedulerProcess]]


@dataclass
class Sample:
    """One sample of one replica."""

    at: float
    """Seconds since the soak started."""
    replica: int
    leading: bool
    rss_mb: float
    tasks: float | None = None
    sockets: float | None = None
    events_dropped: float | None = None
    tasks_by: dict[str, float] = field(default_factory=dict, repr=False)
    """The tasks by the function they run (``sluice_asyncio_tasks{coroutine}``)."""
    action_seconds: dict[str, float] = field(default_factory=dict, repr=False)
    """``scheduler_cycle_duration_seconds_sum`` by action, since the replica started."""


@dataclass
class LeaderChange:
    """One change of leader: why, and how long until the Lease had another holder and
    until the next bind after that."""

    why: str
    at: float
    """Seconds since the soak started, when the old leader was killed or seen gone."""
    old: str
    new: str = ""
    to_new_holder: float | None = None
    to_next_bind: float | None = None
    disturbance: Disturbance | None = field(default=None, repr=False)
    acquired_at: float | None = field(default=None, repr=False)
    """Seconds since the soak started, when the new holder took the Lease (its
    ``acquireTime``)."""


@dataclass
class Replica:
    process: SchedulerProcess
    index: int
    started: float
    killed: bool = False
    peak_rss_mb: float = 0.0
    last: Sample | None = None
    _identity: str | None = None

    @property
    def identity(self) -> str | None:
        """The Lease identity it leads with, once its log says it became leader (read
        from the log until then; a replica leads at most once)."""
        if self._identity is None:
            self._identity = self.process.identity()
        return self._identity


class Replicas:
    """The two replicas of the soak (module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        start_scheduler: StartScheduler,
        settings: SoakSettings,
        disturbances: Disturbances,
        *,
        extra_args: list[str],
    ) -> None:
        self.cluster = cluster
        self.start_scheduler = start_scheduler
        self.settings = settings
        self.disturbances = disturbances
        self.extra_args = extra_args
        self.lease_name = f"sluice-{cluster.run_id}"
        self.live: list[Replica] = []
        self.ended: list[Replica] = []
        self.samples: list[Sample] = []
        self.changes: list[LeaderChange] = []
        self.exits: list[dict[str, Any]] = []
        """Every replica that ended: its exit code, why, its pid."""
        self.crashes: list[str] = []
        self.t0 = time.monotonic()
        self._started = 0
        self._holder = ""
        self._config_path: Path | None = None
        self.binds: list[float] = []
        """Seconds since the start at which the watcher saw each pod bound (the soak's
        list, in order)."""
        self.forbidden_windows: list[tuple[str, str]] = []
        """When 403s are tolerated in the replicas' logs (the chaos adds a window for each
        restart of the API server); the test's fixture judges every log with it."""

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def start(self) -> None:
        for _ in range(2):
            await self._start_one()

    async def _start_one(self) -> Replica:
        proc = await self.start_scheduler(
            leader_elect=True, extra_args=self.extra_args, config=self._config(), ready=False
        )
        proc.forbidden_tolerated = self.forbidden_windows  # type: ignore[attr-defined]
        self._started += 1
        replica = Replica(proc, self._started, self.now())
        self.live.append(replica)
        return replica

    def _config(self) -> Path:
        """The replicas' SchedulerConfiguration: the defaults, the cluster's scheduler
        name, the soak's dissolve grace, and a reclaim minimum runtime only when the
        settings give one (written once, to a directory of its own that :meth:`stop`
        removes)."""
        if self._config_path is None:
            path = Path(tempfile.mkdtemp(prefix="sluice-soak-")) / "scheduler-config.yaml"
            runtime = self.settings.reclaim_min_runtime
            reclaim = (
                f"  reclaim: {{minRuntimeSeconds: {runtime}}}\n" if runtime is not None else ""
            )
            path.write_text(
                "apiVersion: scheduling.sluice.dev/v1alpha1\n"
                "kind: SchedulerConfiguration\n"
                f"schedulerName: {self.cluster.scheduler_name}\n"
                "actionArguments:\n"
                f"{reclaim}"
                f"  dissolve: {{graceSeconds: {self.settings.dissolve_grace}}}\n"
            )
            self._config_path = path
        return self._config_path

    # ----------------------------------------------------------------- who leads

    async def holder(self) -> str:
        """The Lease's holder now (the last one known when the Lease cannot be read)."""
        return (await self._lease())[0]

    async def _lease(self) -> tuple[str, float | None]:
        """(holder, when it acquired the Lease in seconds since the start) of the Lease."""
        try:
            lease = await self.cluster.get_lease(self.lease_name)
        except ApiFailure:  # the API server may be away: ask again later
            return self._holder, None
        spec = (lease or {}).get("spec") or {}
        acquired = _seconds_since(str(spec.get("acquireTime") or ""), self.t0)
        return str(spec.get("holderIdentity") or ""), acquired

    def leader(self) -> Replica | None:
        """The live replica that leads (it logged ``became leader`` with the Lease's
        holder identity)."""
        for r in self.live:
            if r.process.returncode is None and self._holder and r.identity == self._holder:
                return r
        return None

    # ----------------------------------------------------------------- the chaos asks

    async def kill_leader(self) -> LeaderChange | None:
        """SIGKILL the leader; None when no replica leads right now."""
        self._holder = await self.holder()
        leader = self.leader()
        if leader is None:
            return None
        change = LeaderChange("killed", self.now(), old=self._holder)
        change.disturbance = self.disturbances.open("leader killed", old=self._holder)
        self.changes.append(change)
        leader.killed = True
        self._sample(leader)
        await leader.process.kill()
        return change

    # ----------------------------------------------------------------- the supervisor

    async def supervise(self) -> None:
        """Restart replicas that ended, follow the Lease, sample; until cancelled."""
        next_sample = 0.0
        while True:
            for r in list(self.live):
                if r.process.returncode is not None:
                    self._ended(r)
                    await self._start_one()
            holder, acquired = await self._lease()
            if holder and holder != self._holder:
                self._new_holder(holder, acquired)
            self._holder = holder or self._holder
            self._close_changes()
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + self.settings.sample_every
                await self._sample_all()
            await anyio.sleep(1.0)

    def _ended(self, r: Replica) -> None:
        self.live.remove(r)
        self.ended.append(r)
        code = r.process.returncode
        lost = any(rec.get("event") == "leadership lost" for rec in r.process.log_records())
        why = "killed" if r.killed else ("leadership lost" if code == 1 and lost else "crashed")
        self.exits.append(
            {
                "replica": r.index,
                "pid": r.process.pid,
                "exit_code": code,
                "why": why,
                "at": round(self.now(), 1),
                "lived_seconds": round(self.now() - r.started, 1),
            }
        )
        if why == "crashed":
            self.crashes.append(f"replica {r.index} exited with {code}\n{r.process.tail(30)}")
        if why == "leadership lost" and r.identity == self._holder:
            change = LeaderChange("leadership lost", self.now(), old=self._holder)
            change.disturbance = self.disturbances.open("leadership lost", old=self._holder)
            self.changes.append(change)

    def _new_holder(self, holder: str, acquired: float | None) -> None:
        for change in self.changes:
            if change.new == "" and change.old != holder:
                change.new = holder
                change.acquired_at = self.now() if acquired is None else acquired
                change.to_new_holder = round(change.acquired_at - change.at, 1)

    def _close_changes(self) -> None:
        """A change is over at the first bind the watcher saw after the new holder took
        the Lease (only the leader binds)."""
        for change in self.changes:
            if change.to_next_bind is not None or change.acquired_at is None:
                continue
            after = next((b for b in self.binds if b >= change.acquired_at), None)
            if after is not None:
                change.to_next_bind = round(after - change.at, 1)
                if change.disturbance is not None:
                    self.disturbances.close(change.disturbance, new=change.new)

    async def _sample_all(self) -> None:
        for r in list(self.live):
            if r.process.returncode is None:
                self._sample(r)
                await self._scrape(r)

    def _sample(self, r: Replica) -> None:
        rss, peak = _rss_mb(r.process.pid)
        r.peak_rss_mb = max(r.peak_rss_mb, peak)
        leading = bool(self._holder) and r.identity == self._holder
        r.last = Sample(round(self.now(), 1), r.index, leading, rss)
        self.samples.append(r.last)

    async def _scrape(self, r: Replica) -> None:
        if r.last is None:
            return
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            status, text = await r.process.http_get("/metrics")
            if status != 200:  # the port's reviews could not be made (the API server away)
                return
            r.last.tasks = _metric(text, "sluice_asyncio_tasks")
            r.last.tasks_by = _by_label(text, "sluice_asyncio_tasks", "coroutine")
            r.last.sockets = _metric(text, "sluice_open_sockets")
            r.last.events_dropped = _metric(text, "scheduler_events_dropped_total") or 0.0
            r.last.action_seconds = _by_label(text, _CYCLE_SECONDS, "action")

    async def stop(self) -> None:
        """SIGTERM every live replica (the fixture would too) and record their ends."""
        for r in list(self.live):
            self._sample(r)
            await self._scrape(r)
            with contextlib.suppress(AssertionError):
                await r.process.terminate(timeout=30)
            self.live.remove(r)
            self.ended.append(r)
            self.exits.append(
                {
                    "replica": r.index,
                    "pid": r.process.pid,
                    "exit_code": r.process.returncode,
                    "why": "stopped at the end",
                    "at": round(self.now(), 1),
                    "lived_seconds": round(self.now() - r.started, 1),
                }
            )
            if r.process.returncode != 0:
                self.crashes.append(
                    f"replica {r.index} exited with {r.process.returncode} on SIGTERM\n"
                    + r.process.tail(30)
                )
        if self._config_path is not None:
            shutil.rmtree(self._config_path.parent, ignore_errors=True)

    def all_replicas(self) -> list[Replica]:
        return [*self.ended, *self.live]

    def action_seconds(self) -> dict[str, float]:
        """Time spent in each action (and ``all``: whole cycles), summed over the replicas,
        each as last sampled."""
        total: dict[str, float] = {}
        for r in self.all_replicas():
            for action, seconds in (r.last.action_seconds if r.last else {}).items():
                total[action] = round(total.get(action, 0.0) + seconds, 2)
        return total

    def cycles(self) -> dict[str, Any]:
        """The cycles every replica logged (those that decided something, at ``-v 2``):
        how many, and how long the longest took."""
        seconds = sorted(
            float(rec.get("seconds") or 0.0)
            for r in self.all_replicas()
            for rec in r.process.log_records()
            if rec.get("event") == "cycle"
        )
        if not seconds:
            return {"logged": 0}
        return {
            "logged": len(seconds),
            "p50_seconds": seconds[len(seconds) // 2],
            "p99_seconds": seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))],
            "max_seconds": seconds[-1],
            "over_5_seconds": sum(1 for x in seconds if x > 5.0),
        }

    def events_dropped(self) -> float:
        """Events dropped, summed over the replicas, each as last sampled (a replica killed
        takes the events it still held with it: those are not counted anywhere)."""
        return sum(
            (r.last.events_dropped or 0.0) for r in self.all_replicas() if r.last is not None
        )


def _seconds_since(micro_time: str, t0: float) -> float | None:
    """A Lease's MicroTime (UTC) as seconds since the monotonic ``t0``."""
    wall = unix_seconds(micro_time)
    if wall is None:
        return None
    return wall - time.time() + time.monotonic() - t0


def _rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB; zeros when it is gone."""
    rss = peak = 0.0
    with contextlib.suppress(OSError):
        for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return round(rss, 1), round(peak, 1)


def _by_label(text: str, name: str, label: str) -> dict[str, float]:
    """The samples of ``name`` by the value of ``label``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        for part in head[len(name) + 1 : -1].split(","):
            key, _, quoted = part.partition("=")
            if key == label:
                out[quoted.strip('"')] = float(value)
    return out


def _metric(text: str, name: str) -> float | None:
    total: float | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] == name:
            total = (total or 0.0) + float(value)
    return total
