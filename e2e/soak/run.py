"""One soak, from the cluster's set-up to its report (issue 26).

A part of the soak (:mod:`soak`). :func:`run_soak` builds the world, starts the two
replicas, then runs side by side until the deadline: the workload, the chaos, the
supervisor of the replicas, the checks (on every pod and event of the harness's own
watches, and every second), the claims' watch. After the deadline no job arrives any
more; the run goes on until the cluster has been settled long enough for every
"once settled" check to have judged (bounded), then the replicas are stopped and the
report is made (:func:`report`): what was done, what was injected, what was measured,
and every invariant's count of violations.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
from control_plane import LocalControlPlane
from dra_driver import ClaimWatch, FakeDriver
from harness import Cluster, condition, core_path, name_of, node_of, wait_for

from soak import trends
from soak.chaos import Chaos
from soak.checks import SoakChecks
from soak.disturbances import Disturbances
from soak.replicas import Replicas, StartScheduler
from soak.settings import SoakSettings
from soak.workload import Workload
from soak.world import JOB_LABEL, World

FINAL_SETTLE_CAP = 300.0
"""At most this long after the deadline, waiting for the cluster to have settled."""

PROBED = ("pending_without_reason", "preemptor_gated")
"""The invariants about one pod whose violation is probed when it is flagged
(:meth:`Soak._probe`): the watch's view may be stale, and the leader's is gone once
the run ends."""


class Soak:
    """The parts of one soak, wired together (module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        start_scheduler: StartScheduler,
        settings: SoakSettings,
        control_plane: LocalControlPlane | None,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.disturbances = Disturbances()
        self.world = World(
            cluster, settings, FakeDriver(cluster, devices=settings.devices_per_node)
        )
        self.workload = Workload(self.world, settings, batch_jobs=not cluster.emulated)
        self.checks = SoakChecks(self.workload, settings, self.disturbances)
        self.claims = ClaimWatch(cluster)
        self.replicas = Replicas(
            cluster, start_scheduler, settings, self.disturbances, extra_args=["--ui"]
        )
        self.chaos = Chaos(cluster, self.replicas, settings, self.disturbances, control_plane)
        self.binds: list[float] = self.replicas.binds
        """Seconds since the start at which the watcher first saw each pod bound."""
        self.load: list[float] = []
        self.t0 = time.monotonic()
        self.work_seconds = 0.0
        self.settled_after = 0.0
        self.probes: dict[str, str] = {}
        """Violation subject (a pod's uid) -> what the API server and the leader said of
        the pod when it was flagged (:meth:`_probe`)."""

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        known = uid in self.checks.first_bound
        self.workload.on_pod(kind, pod)
        self.checks.on_pod(kind, pod)
        if not known and uid in self.checks.first_bound:
            self.binds.append(time.monotonic() - self.t0)

    def _on_sync(self, pods: list[dict[str, Any]]) -> None:
        self.workload.on_sync(pods)
        self.checks.on_sync(pods)

    async def _every_second(self) -> None:
        next_load = 0.0
        probed = 0
        async with anyio.create_task_group() as tg:
            while True:
                self.checks.tick()
                for v in self.checks.violations[probed:]:
                    if v.invariant in PROBED:
                        tg.start_soon(self._probe, v.subject)
                probed = len(self.checks.violations)
                if time.monotonic() >= next_load:
                    next_load = time.monotonic() + self.settings.sample_every
                    self.load.append(os.getloadavg()[0])
                await anyio.sleep(1.0)

    async def _probe(self, uid: str) -> None:
        """What the API server and the leader say, right now, of the pod ``uid`` just
        flagged: the pod read afresh (is it there, is it the same pod, its
        resourceVersion and PodScheduled condition), and the leader's own explanation
        from its cache (``/ui/explain``: is the pod in it, what holds it). Kept in
        :attr:`probes` for the violation's detail; a failure is recorded, not raised."""
        name = name_of(self.checks.pod_by_uid(uid))
        said: list[str] = []
        try:
            pod = await self.cluster.api.request(
                "GET", core_path("pods", self.cluster.namespace, name), timeout=10
            )
            meta = pod.get("metadata") or {}
            scheduled = condition(pod, "PodScheduled") or {}
            same = "same" if meta.get("uid") == uid else "another"
            said.append(
                f"API server: uid {meta.get('uid')} ({same} pod), resourceVersion "
                f"{meta.get('resourceVersion')}, node "
                f"{node_of(pod) or '-'}, PodScheduled {scheduled.get('status', '-')} "
                f"{scheduled.get('reason', '')} {scheduled.get('message', '')!r}"
            )
        except Exception as exc:
            said.append(f"API server: {exc}")
        leader = self.replicas.leader()
        if leader is None:
            said.append("leader: none right now")
        else:
            path = f"/ui/explain?kind=pod&name={self.cluster.namespace}/{name}"
            try:
                status, text = await leader.process.http_get(path)
                said.append(f"leader {leader.index} ({status}): {text[:3000]}")
            except Exception as exc:
                said.append(f"leader {leader.index}: {exc!r}")
        self.probes[uid] = "\n  ".join(said)

    async def run(self) -> dict[str, Any]:
        s = self.settings
        await self.world.build()
        self.cluster.informer.listeners.append(self._on_pod)
        self.cluster.informer.sync_listeners.append(self._on_sync)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.claims.run)
                await tg.start(self.checks.event_watch(self.cluster).run)
                self.t0 = self.replicas.t0 = time.monotonic()
                await self.replicas.start()
                await wait_for(self.replicas.holder, timeout=60, what="a replica leading")
                supervisor = anyio.CancelScope()

                async def supervise() -> None:
                    with supervisor:
                        await self.replicas.supervise()

                tg.start_soon(supervise)
                tg.start_soon(self._every_second)
                deadline = time.monotonic() + s.seconds
                tg.start_soon(self.workload.run, deadline)
                await self.chaos.run(deadline)
                await anyio.sleep(max(0.0, deadline - time.monotonic()))
                self.work_seconds = time.monotonic() - self.t0
                await self._settle()
                supervisor.cancel()  # no replica is started again from now on
                await self.replicas.stop()
                self.checks.tick()
                tg.cancel_scope.cancel()
        finally:
            self.cluster.informer.listeners.remove(self._on_pod)
            self.cluster.informer.sync_listeners.remove(self._on_sync)
        return self.report()

    async def _settle(self) -> None:
        """Until the cluster has been quiet for long enough that every "once settled"
        check has judged what it saw, at most :data:`FINAL_SETTLE_CAP`."""
        s = self.settings
        enough = s.settle_seconds + max(s.gang_partial_limit, s.reason_limit) + 2.0
        begin = time.monotonic()
        while time.monotonic() - begin < FINAL_SETTLE_CAP:
            if self.disturbances.quiet_for(time.monotonic()) >= enough:
                break
            await anyio.sleep(1.0)
        self.settled_after = time.monotonic() - begin

    async def cleanup(self) -> None:
        """Delete the batch Jobs (so their controller makes no pods while the harness
        deletes the namespace's), then what the harness does not delete."""
        with anyio.CancelScope(shield=True):
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
            for job in self.workload.jobs.values():
                if job.kind == "batch" and not job.finishing:
                    job.finishing = True
                    try:
                        await self.cluster.api.request(
                            "DELETE",
                            core_path("jobs", self.cluster.namespace, job.name, group="batch/v1"),
                            body=body,
                        )
                    except Exception:
                        continue
            await self.world.cleanup()

    # ----------------------------------------------------------------- the report

    def _story(self, subject: str) -> str:
        """What the watch saw of every pod of the job ``subject`` names, or of the pod
        whose uid it is (for a violation's detail): node, deletion, conditions,
        nominations; for a pod, what was probed when it was flagged."""
        job = self.workload.jobs.get(subject)
        if job is None:
            h = self.cluster.recorder.by_uid.get(subject)
            if h is None:
                return ""
            meta = h.last.get("metadata") or {}
            conditions = ", ".join("/".join(c) for c in h.conditions)
            return (
                f"\n  watch: uid {subject}, resourceVersion {meta.get('resourceVersion')}, "
                f"node={h.node or '-'} deleted={h.deleted} nominated={h.nominated} "
                f"conditions=[{conditions}]\n  {self.probes.get(subject, 'not probed')}"
            )
        lines = []
        for h in self.cluster.recorder.by_uid.values():
            labels = (h.last.get("metadata") or {}).get("labels") or {}
            if labels.get(JOB_LABEL) != job.name:
                continue
            conditions = ", ".join("/".join(c) for c in h.conditions)
            lines.append(
                f"\n  {h.name}: node={h.node or '-'} deleted={h.deleted} "
                f"nominated={h.nominated} conditions=[{conditions}]"
            )
        return "".join(lines)

    def report(self) -> dict[str, Any]:
        s = self.settings
        rec = self.cluster.recorder
        counts = self.checks.counts(rec.violations, self.claims.violations)
        counts["replica_crashed"] = len(self.replicas.crashes)
        faults = self.cluster.faults
        samples = self.replicas.samples
        seconds = self.work_seconds or s.seconds
        width = 60.0 if seconds >= 900 else max(10.0, seconds / 12)
        peak = max((r.peak_rss_mb for r in self.replicas.all_replicas()), default=0.0)
        exits: dict[str, int] = {}
        for e in self.replicas.exits:
            exits[e["why"]] = exits.get(e["why"], 0) + 1
        return {
            "settings": s.as_dict(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds)),
            "machine": {
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "load_average_1m": _spread(self.load),
            },
            "work_seconds": round(seconds, 1),
            "settled_after_seconds": round(self.settled_after, 1),
            "pods_scheduled": len(self.binds),
            "evictions": dict(self.checks.evictions),
            "reclaims_seen_in_events": len(self.checks.reclaims),
            "reclaimed_back_later": self.checks.reclaimed_back_later,
            "workload": self.workload.summary(),
            "pods_pending_at_end": len(self.checks.pending_now()),
            "faults": {
                "calls": dict(faults.calls),
                "writes_by_resource": dict(faults.by_resource.most_common()),
                "refused": dict(faults.failed),
                "replies_lost": dict(faults.lost),
                "watches_cut": faults.cut,
            },
            "kills": {**dict(self.chaos.kills), "replica_exits": exits},
            "chaos": self.chaos.log,
            "leader_changes": [
                {
                    "why": c.why,
                    "at": round(c.at, 1),
                    "to_new_holder_seconds": c.to_new_holder,
                    "to_next_bind_seconds": c.to_next_bind,
                }
                for c in self.replicas.changes
            ],
            "largest_rss_mb": round(peak, 1),
            "cycles": self.replicas.cycles(),
            "action_seconds": self.replicas.action_seconds(),
            "events_dropped": self.replicas.events_dropped(),
            "memory": trends.memory(samples, seconds, s.warmup_seconds, s.rss_growth_limit),
            "tasks_and_sockets": {
                **trends.bounded(samples, seconds, s.warmup_seconds),
                "busiest": trends.busiest(samples),
            },
            "throughput": trends.throughput(self.binds, seconds, width),
            "reigns": trends.reigns(samples),
            "watcher": {
                "pod_events": rec.events,
                "claim_events": self.claims.events,
                "relists": self.cluster.informer.list_watch.relists,
                "reconnects": self.cluster.informer.list_watch.reconnects,
            },
            "violations": counts,
            "samples": [
                [x.at, x.replica, int(x.leading), x.rss_mb, x.tasks, x.sockets, _top(x.tasks_by)]
                for x in samples
            ],
            "violation_details": [
                f"{v.invariant}: {v.detail}{self._story(v.subject)}"
                for v in self.checks.violations[:50]
            ]
            + rec.violations[:20]
            + self.claims.violations[:20]
            + [c[:2000] for c in self.replicas.crashes[:5]],
        }


def _top(counts: dict[str, float], n: int = 5) -> dict[str, float]:
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:n])


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "min": round(min(values), 2),
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
    }


async def run_soak(
    cluster: Cluster,
    start_scheduler: StartScheduler,
    settings: SoakSettings,
    control_plane: LocalControlPlane | None,
    report_path: Path | None = None,
) -> dict[str, Any]:
    """Run one soak; its report (also written to ``report_path`` as JSON when given, with
    each replica's log beside it: ``<stem>-replica-N.log``)."""
    import json

    soak = Soak(cluster, start_scheduler, settings, control_plane)
    try:
        result = await soak.run()
    finally:
        await soak.cleanup()
    if report_path is not None:
        report_path.write_text(json.dumps(result, indent=1) + "\n")
        for r in soak.replicas.all_replicas():  # the logs outlive pytest's tmp dirs
            log = r.process.log_path
            kept = report_path.with_name(f"{report_path.stem}-replica-{r.index}.log")
            if log.exists() and log.parent != report_path.parent:
                shutil.copyfile(log, kept)
    return result
