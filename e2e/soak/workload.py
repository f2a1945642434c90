"""The soak's work that never stops (issue 26): jobs arrive at random, run for a random
time once placed, and finish (deleted); evicted pods are replaced, as their owners'
controllers would.

A part of the soak (:mod:`soak`). Kinds of job, drawn per arrival:

* ``pod``: a pod of its own (500m, 1 or 2 CPU); some of ``research``'s carry the label a
  PodDisruptionBudget selects;
* ``gang``: a PodGroup of 2, 3, 4 or 6 one-CPU pods (``minMember`` all of them, or one
  less: an elastic gang with a spare);
* ``topology``: a PodGroup of four 2-CPU pods that must share a rack
  (``topologyConstraint.requiredLevel``);
* ``device``: a pod with a ResourceClaim made from a template (one DRA device);
* ``batch``: a batch Job of three pods in a PodGroup, its pods made (and remade after an
  eviction) by the real Job controller (only when a controller manager runs).

Each job goes to a leaf queue (most to the *hot* one, which changes every
``hot_queue_seconds``, so that shares move and queues reclaim from each other), with a
priority (mostly low, some mid, a few high: high ones preempt). A job counts as started
when its minimum is bound; it finishes ``run_for`` seconds later, or is withdrawn when
it has not started after ``give_up_seconds``. A pod of an unfinished job that disappears
was evicted: a new pod takes its place (the Job controller does it for ``batch``).

Calls go through the harness's direct connection and are retried while the API server
is away (its kill and restart are part of the soak).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
from harness import (
    API_VERSION,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    ApiFailure,
    Cluster,
    core_path,
    custom_path,
    name_of,
    node_of,
)

from soak.settings import SoakSettings
from soak.world import APP_LABEL, CLAIM_TEMPLATE, JOB_LABEL, RACK_LABEL, World

KINDS: Final = ("pod", "gang", "topology", "device", "batch")
_KIND_WEIGHTS: Final = (40, 26, 10, 12, 12)
_PRIORITY_WEIGHTS: Final = (("low", 55), ("mid", 30), ("high", 15))
_RETRY: Final = 1.0
"""Seconds between attempts of a call that failed for a reason that passes (the API
server away, a 5xx, a 429)."""


@dataclass
class SoakJob:
    """One job of the workload and what became of it."""

    name: str
    kind: str
    queue: str
    priority: str
    size: int
    min_member: int
    cpu: str
    created: float
    run_for: float
    group: str = ""
    pods: set[str] = field(default_factory=set)
    """Its pods alive, by name."""
    bound: set[str] = field(default_factory=set)
    """Those of :attr:`pods` the watch shows bound."""
    started: float | None = None
    finishing: bool = False
    withdrawn: bool = False
    serial: int = 0
    """Pods created for it so far (names ``<job>-<serial>``)."""


class Workload:
    """Creates and finishes :class:`SoakJob` s until :meth:`run` is cancelled or its
    deadline passes; :meth:`on_pod` (an informer listener) follows their pods."""

    def __init__(self, world: World, settings: SoakSettings, *, batch_jobs: bool) -> None:
        self.world = world
        self.cluster: Cluster = world.cluster
        self.settings = settings
        self.batch_jobs = batch_jobs
        self.rng = random.Random(settings.seed)
        self.jobs: dict[str, SoakJob] = {}
        self.by_pod: dict[str, str] = {}
        """Pod name -> its job's name."""
        self.counts: Counter[str] = Counter()
        """What was done: jobs by kind, ``started``, ``finished``, ``withdrawn``,
        ``replaced`` pods, ``retries`` of calls."""
        self._serial = 0
        self._replace: list[str] = []
        self._wake = anyio.Event()
        self._limiter = anyio.CapacityLimiter(8)
        self.arriving = True
        """False once the deadline of :meth:`run` passed (no more arrivals)."""

    # ----------------------------------------------------------------- what the watch says

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        """Follow the pods of the workload's jobs (called for every watch event)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        job = self.jobs.get(str(labels.get(JOB_LABEL, "")))
        if job is None:
            return
        name = name_of(pod)
        if kind == "DELETED":
            job.pods.discard(name)
            job.bound.discard(name)
            self.by_pod.pop(name, None)
            if not job.finishing and job.kind != "batch":
                self._replace.append(job.name)  # evicted: its owner makes a new one
                self._wake.set()
            return
        job.pods.add(name)
        self.by_pod[name] = job.name
        if node_of(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            job.bound.add(name)
        else:
            job.bound.discard(name)
        if job.started is None and len(job.bound) >= job.min_member:
            job.started = time.monotonic()
            self.counts["started"] += 1

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        """After a relist: the pods of the workload's jobs missing from it are gone (their
        deletion happened while the watch was away)."""
        listed = {name_of(p) for p in pods}
        for name in [n for n in self.by_pod if n not in listed]:
            job = self.jobs[self.by_pod[name]]
            self.on_pod("DELETED", {"metadata": {"name": name, "labels": {JOB_LABEL: job.name}}})
        for p in pods:
            self.on_pod("MODIFIED", p)

    def job_of(self, pod_name: str) -> SoakJob | None:
        name = self.by_pod.get(pod_name)
        return self.jobs.get(name) if name else None

    def hot_queue(self, now: float) -> str:
        leaves = self.world.leaves
        return leaves[int(now / self.settings.hot_queue_seconds) % len(leaves)]

    # ----------------------------------------------------------------- the loops

    async def run(self, deadline: float) -> None:
        """Jobs arrive until ``deadline`` (monotonic); jobs finish, are withdrawn and have
        their evicted pods replaced until cancelled (after the deadline too)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._finisher, tg)
            tg.start_soon(self._replacer, tg)
            start = time.monotonic()
            while time.monotonic() < deadline:
                gap = self.rng.expovariate(self.settings.arrivals_per_second)
                await anyio.sleep(min(gap, max(0.0, deadline - time.monotonic())))
                if time.monotonic() >= deadline:
                    break
                job = self._draw(time.monotonic() - start)
                self.jobs[job.name] = job
                self.counts[job.kind] += 1
                tg.start_soon(self._guarded, self._create_job, job)
            self.arriving = False

    def _draw(self, elapsed: float) -> SoakJob:
        rng, s = self.rng, self.settings
        kinds = KINDS if self.batch_jobs else KINDS[:-1]
        kind = rng.choices(kinds, weights=_KIND_WEIGHTS[: len(kinds)])[0]
        hot = self.hot_queue(elapsed)
        queue = hot if rng.random() < 0.6 else rng.choice(self.world.leaves)
        priority = rng.choices(
            [p for p, _ in _PRIORITY_WEIGHTS], weights=[w for _, w in _PRIORITY_WEIGHTS]
        )[0]
        size, minimum, cpu = 1, 1, rng.choice(["500m", "1", "2"])
        if kind == "gang":
            size = rng.choice([2, 3, 4, 6])
            minimum = size - 1 if size > 2 and rng.random() < 0.3 else size
            cpu = "1"
        elif kind == "topology":
            size, minimum, cpu = 4, 4, "2"
        elif kind == "device":
            cpu = "500m"
        elif kind == "batch":
            size, minimum, cpu = 3, 3, "1"
        self._serial += 1
        return SoakJob(
            name=f"{kind[:4]}-{self._serial:05d}",
            kind=kind,
            queue=queue,
            priority=priority,
            size=size,
            min_member=minimum,
            cpu=cpu,
            created=time.monotonic(),
            run_for=rng.expovariate(1.0 / s.mean_run_seconds),
        )

    async def _finisher(self, tg: anyio.abc.TaskGroup) -> None:
        """Every second: jobs whose run is over finish, jobs never placed are withdrawn."""
        while True:
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if job.finishing:
                    continue
                if job.started is not None and now >= job.started + job.run_for:
                    job.finishing = True
                    self.counts["finished"] += 1
                    tg.start_soon(self._guarded, self._delete_job, job)
                elif job.started is None and now - job.created > self.settings.give_up_seconds:
                    job.finishing = job.withdrawn = True
                    self.counts["withdrawn"] += 1
                    tg.start_soon(self._guarded, self._delete_job, job)
            await anyio.sleep(1.0)

    async def _replacer(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            pending, self._replace = self._replace, []
            for name in pending:
                job = self.jobs[name]
                if not job.finishing:
                    self.counts["replaced"] += 1
                    tg.start_soon(self._guarded, self._create_pod, job)

    async def _guarded(self, fn: Callable[[SoakJob], Awaitable[None]], job: SoakJob) -> None:
        async with self._limiter:
            await fn(job)

    # ----------------------------------------------------------------- calls

    async def _call(self, method: str, path: str, body: Any = None) -> None:
        """One write, retried while it fails for a reason that passes. A create that finds
        its object (a retry after a lost reply) and a delete that finds none are done."""
        while True:
            try:
                await self.cluster.api.request(method, path, body=body, timeout=30)
                return
            except ApiFailure as exc:
                if (method == "POST" and exc.status == 409) or (
                    method == "DELETE" and exc.status == 404
                ):
                    return
                if exc.status not in (0, 429, 500, 502, 503, 504, 403):
                    # 403: a restarted API server refuses until its RBAC cache is filled
                    raise
                self.counts["retries"] += 1
                await anyio.sleep(_RETRY)

    def _pod_group(self, job: SoakJob) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "minMember": job.min_member,
            "queue": job.queue,
            "priorityClassName": self.world.priorities[job.priority][0],
        }
        if job.kind == "topology":
            spec["topologyConstraint"] = {
                "topology": self.world.topology,
                "requiredLevel": RACK_LABEL,
            }
        return {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": job.group,
                "namespace": self.cluster.namespace,
                "labels": {JOB_LABEL: job.name},
            },
            "spec": spec,
        }

    def _pod(self, job: SoakJob, name: str) -> dict[str, Any]:
        labels = {JOB_LABEL: job.name}
        if job.kind == "pod" and job.queue == self.world.leaves[-1] and job.size == 1:
            labels[APP_LABEL] = "web" if self.rng.random() < 0.3 else "batch"
        claims = (
            [{"name": "gpu", "resourceClaimTemplateName": CLAIM_TEMPLATE}]
            if job.kind == "device"
            else ()
        )
        pod = self.cluster.pod_manifest(
            name,
            cpu=job.cpu,
            memory="256Mi",
            priority=self.world.priorities[job.priority],
            group=job.group or None,
            queue=None if job.group else job.queue,
            labels=labels,
            resource_claims=claims,
        )
        if claims:  # a container uses the claim, as a real device pod does
            pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        return pod

    async def _create_job(self, job: SoakJob) -> None:
        if job.size > 1 or job.kind == "batch":
            job.group = job.name
            await self._call(
                "POST", custom_path("podgroups", self.cluster.namespace), self._pod_group(job)
            )
        if job.kind == "batch":
            await self._call(
                "POST",
                core_path("jobs", self.cluster.namespace, group="batch/v1"),
                self._batch_job(job),
            )
            return
        for _ in range(job.size):
            await self._create_pod(job)

    async def _create_pod(self, job: SoakJob) -> None:
        job.serial += 1
        name = f"{job.name}-{job.serial}"
        await self._call("POST", core_path("pods", self.cluster.namespace), self._pod(job, name))

    def _batch_job(self, job: SoakJob) -> dict[str, Any]:
        template = self._pod(job, "template")
        labels = {k: v for k, v in template["metadata"]["labels"].items() if k != QUEUE_LABEL}
        labels[POD_GROUP_LABEL] = job.group
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job.name,
                "namespace": self.cluster.namespace,
                "labels": {JOB_LABEL: job.name},
            },
            "spec": {
                "parallelism": job.size,
                "completions": job.size,
                # Evictions count as failures (no kubelet ever makes a pod terminal, so a
                # podFailurePolicy could not tell them apart): never give up on them.
                "backoffLimit": 2**31 - 1,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {**template["spec"], "restartPolicy": "Never"},
                },
            },
        }

    async def _delete_job(self, job: SoakJob) -> None:
        """Finish ``job``: its Job (its pods go with it) or its pods, then its PodGroup."""
        ns = self.cluster.namespace
        if job.kind == "batch":
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
            await self._call("DELETE", core_path("jobs", ns, job.name, group="batch/v1"), body)
        else:
            for name in sorted(job.pods):
                await self._call("DELETE", core_path("pods", ns, name))
        if job.group:
            await self._call("DELETE", custom_path("podgroups", ns, job.group))

    # ----------------------------------------------------------------- the end

    def live_jobs(self) -> list[SoakJob]:
        return [j for j in self.jobs.values() if not j.finishing]

    def summary(self) -> dict[str, Any]:
        waits = sorted(j.started - j.created for j in self.jobs.values() if j.started is not None)

        def pct(p: float) -> float | None:
            if not waits:
                return None
            return round(waits[min(len(waits) - 1, math.floor(p * len(waits)))], 1)

        return {
            "jobs": {k: self.counts[k] for k in KINDS if self.counts[k]},
            "started": self.counts["started"],
            "finished": self.counts["finished"],
            "withdrawn": self.counts["withdrawn"],
            "pods_replaced": self.counts["replaced"],
            "call_retries": self.counts["retries"],
            "wait_to_start_seconds": {"p50": pct(0.5), "p90": pct(0.9), "max": pct(1.0)},
        }
