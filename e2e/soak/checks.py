"""The soak's invariants, checked on every watch event of a watcher that talks to the API
server directly (issue 26).

A part of the soak (:mod:`soak`). Besides those the harness already checks on every pod
event (:class:`harness.PodRecorder`: no node over its allocatable, no pod's node ever
changes) and the claims' watch (:class:`dra_driver.ClaimWatch`: no device in two
claims), :class:`SoakChecks` keeps, per pod and per gang, since when a state holds, and
counts a violation (once per subject) when it holds too long while the cluster is
settled (:class:`soak.disturbances.Disturbances`):

* ``gang_below_minimum``: a gang with some members bound but fewer than its minimum,
  for longer than ``gang_partial_limit`` (a member's eviction failed, or its
  replacement waits out its Job's backoff: the replicas dissolve such a gang after
  ``dissolve_grace``);
* ``preemptor_gated``: a pod nominated to a node (``status.nominatedNodeName``) and not
  bound, for longer than ``gated_limit``;
* ``pending_without_reason``: a pod of the scheduler not bound and without
  ``PodScheduled=False`` and a reason, for longer than ``reason_limit``;
* ``reclaimed_back``: a job whose pods were evicted by a reclaim for another job, and
  which then reclaims from that job within ``reclaim_back_window`` seconds (victims and
  reclaimers from the ``Preempted`` events, which name the pod a reclaim made room for;
  times from the events' ``eventTime``, when the scheduler decided): a ping-pong. The
  replicas run with the shipped configuration (no ``minRuntimeSeconds`` of the soak's
  own unless its settings give one). Later, shares have moved with demand (the hot
  queue changes every ``hot_queue_seconds``) and a reclaim back is fair share at work,
  not a ping-pong: such pairs are reported (:attr:`SoakChecks.reclaimed_back_later`),
  not counted.

:meth:`SoakChecks.tick` runs every second too, so a state that holds with no event is
judged on time. Evictions are counted here, each victim once: preemptions, reclaims and
dissolutions, from the victims' ``Preempted`` events (``Preempted by ...``, ``Reclaimed
by ...``) and ``Dissolved`` events, and
from the ``DisruptionTarget`` condition the scheduler sets on a victim before it goes
(either may be missed: an event is best effort, a deletion seen only in a relist shows the
pod as last watched).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from harness import Cluster, ListWatch, condition, core_path, name_of, node_of, unix_seconds

from soak.disturbances import Disturbances
from soak.settings import SoakSettings
from soak.workload import SoakJob
from soak.world import JOB_LABEL

INVARIANTS: Final = (
    "node_over_allocatable",
    "pod_moved",
    "device_given_twice",
    "gang_below_minimum",
    "preemptor_gated",
    "reclaimed_back",
    "pending_without_reason",
    "replica_crashed",
)
"""Every invariant the soak counts, in the report's order."""

_RECLAIMED_BY: Final = re.compile(r"^Reclaimed by queue '([^']*)' for pod ([^/\s]+)/(\S+) on node")
_RECLAIM_MESSAGE: Final = "reclaiming resources for queue"
_DISSOLVE_MESSAGE: Final = "ran below its minimum"


class Jobs(Protocol):
    """What the checks read of the workload (:class:`soak.workload.Workload`)."""

    jobs: dict[str, SoakJob]

    def job_of(self, pod_name: str) -> SoakJob | None: ...


@dataclass
class Violation:
    invariant: str
    subject: str
    detail: str
    at: float = field(default_factory=time.monotonic)


class SoakChecks:
    """See the module docstring. Feed it pods (:meth:`on_pod`, :meth:`on_sync`) and the
    namespace's events (:attr:`events`, a list+watch to run)."""

    def __init__(self, workload: Jobs, settings: SoakSettings, disturbances: Disturbances) -> None:
        self.workload = workload
        self.settings = settings
        self.disturbances = disturbances
        self.violations: list[Violation] = []
        self._flagged: set[tuple[str, str]] = set()
        self.pods: dict[str, dict[str, Any]] = {}
        self.first_bound: dict[str, float] = {}
        """Pod uid -> when the watch first showed it bound."""
        self._victims: dict[str, str] = {}
        """Victim pod name -> ``preempt`` or ``reclaim`` (module docstring)."""
        self._pending_since: dict[str, float] = {}
        self._nominated_since: dict[str, float] = {}
        self._gang_below_since: dict[str, float] = {}
        self.reclaims: list[tuple[str, str, float]] = []
        """(reclaiming job, victim job, when) of every reclaim seen in the events."""
        self._reclaimed_from: dict[tuple[str, str], float] = {}
        self._first_note: dict[tuple[str, str], str] = {}
        """(reclaiming job, victim job) -> the note of its first reclaim event, for the
        story of a reclaim back."""
        self.reclaimed_back_later: list[dict[str, Any]] = []
        """Reclaims back after the minimum runtime: the two jobs, their queues, and the
        seconds between the two reclaims."""
        self._seen_events: set[str] = set()

    def event_watch(self, cluster: Cluster) -> ListWatch:
        """The list+watch of ``cluster``'s namespace's Events that feeds :meth:`on_event`."""
        return ListWatch(
            cluster.api,
            core_path("events", cluster.namespace, group="events.k8s.io/v1"),
            self.on_events_sync,
            self.on_event,
        )

    # ----------------------------------------------------------------- violations

    def violate(self, invariant: str, subject: str, detail: str) -> None:
        """Count ``invariant`` broken by ``subject`` (once per subject)."""
        if (invariant, subject) in self._flagged:
            return
        self._flagged.add((invariant, subject))
        self.violations.append(Violation(invariant, subject, detail))

    def counts(self, recorder_violations: list[str], claim_violations: list[str]) -> dict[str, int]:
        """Every invariant's count of violations, the harness's own checks included."""
        out = dict.fromkeys(INVARIANTS, 0)
        for v in recorder_violations:
            out["pod_moved" if "was on" in v else "node_over_allocatable"] += 1
        out["device_given_twice"] = len(claim_violations)
        for v in self.violations:
            out[v.invariant] += 1
        return out

    # ----------------------------------------------------------------- pods

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        listed = {name_of(p) for p in pods}
        for name in [n for n in self.pods if n not in listed]:
            self.on_pod("DELETED", self.pods[name])
        for p in pods:
            self.on_pod("MODIFIED", p)

    def on_pod(self, kind: str, pod: dict[str, Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        name = name_of(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if kind == "DELETED":
            self.pods.pop(name, None)
            self._pending_since.pop(uid, None)
            self._nominated_since.pop(uid, None)
            self._count_eviction(name, pod)
        else:
            self.pods[name] = pod
            self._follow_pod(uid, pod, now)
        job = self.workload.job_of(name) or self._job_by_label(pod)
        if job is not None and job.group:
            self._follow_gang(job.name, now)
        self.tick(now)

    def _job_by_label(self, pod: Mapping[str, Any]) -> SoakJob | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return self.workload.jobs.get(str(labels.get(JOB_LABEL, "")))

    def _follow_pod(self, uid: str, pod: dict[str, Any], now: float) -> None:
        status = pod.get("status") or {}
        meta = pod.get("metadata") or {}
        if node_of(pod):
            self.first_bound.setdefault(uid, now)
            self._pending_since.pop(uid, None)
            self._nominated_since.pop(uid, None)
            return
        if meta.get("deletionTimestamp"):
            self._pending_since.pop(uid, None)
            self._nominated_since.pop(uid, None)
            return
        if _told_why(pod):
            self._pending_since.pop(uid, None)
        else:
            self._pending_since.setdefault(uid, now)
        if status.get("nominatedNodeName"):
            self._nominated_since.setdefault(uid, now)
        else:
            self._nominated_since.pop(uid, None)

    def _count_eviction(self, name: str, pod: Mapping[str, Any]) -> None:
        target = condition(pod, "DisruptionTarget")
        if not target or target.get("status") != "True":
            return
        if target.get("reason") != "PreemptionByScheduler":
            return
        message = str(target.get("message", ""))
        kind = (
            "reclaim"
            if _RECLAIM_MESSAGE in message
            else "dissolve"
            if _DISSOLVE_MESSAGE in message
            else "preempt"
        )
        self._victims.setdefault(name, kind)

    @property
    def evictions(self) -> Counter[str]:
        """Victims so far by kind (``preempt``, ``reclaim``, and ``dissolve``: what was
        left of a gang below its minimum), each counted once."""
        return Counter(self._victims.values())

    # ----------------------------------------------------------------- gangs

    def _follow_gang(self, job_name: str, now: float) -> None:
        job = self.workload.jobs.get(job_name)
        if job is None or job.finishing:
            self._gang_below_since.pop(job_name, None)
            return
        bound = len(job.bound)
        if 0 < bound < job.min_member:
            self._gang_below_since.setdefault(job_name, now)
        else:
            self._gang_below_since.pop(job_name, None)

    # ----------------------------------------------------------------- events

    def on_events_sync(self, items: list[dict[str, Any]]) -> None:
        for e in items:
            self.on_event("ADDED", e)

    def on_event(self, kind: str, event: dict[str, Any], now: float | None = None) -> None:
        if kind != "DELETED" and event.get("reason") == "Dissolved":
            victim_pod = str((event.get("regarding") or {}).get("name") or "")
            self._victims[victim_pod] = "dissolve"
            return
        if kind == "DELETED" or event.get("reason") != "Preempted":
            return
        uid = str((event.get("metadata") or {}).get("uid") or "")
        if uid in self._seen_events:  # a series update of one we saw
            return
        self._seen_events.add(uid)
        match = _RECLAIMED_BY.match(str(event.get("note") or ""))
        victim_pod = str((event.get("regarding") or {}).get("name") or "")
        self._victims[victim_pod] = "preempt" if match is None else "reclaim"
        if match is None:
            return
        reclaimer = self.workload.job_of(match.group(3))
        victim = self.workload.job_of(victim_pod)
        if reclaimer is None or victim is None or reclaimer.name == victim.name:
            return
        decided = unix_seconds(event.get("eventTime"))
        now = decided or (time.time() if now is None else now)
        self.reclaims.append((reclaimer.name, victim.name, now))
        self._reclaimed_from.setdefault((reclaimer.name, victim.name), now)
        self._first_note.setdefault((reclaimer.name, victim.name), str(event.get("note") or ""))
        first = self._reclaimed_from.get((victim.name, reclaimer.name))
        if first is None:
            return
        gap = round(now - first, 1)
        if gap >= self.settings.reclaim_back_window:
            later = {
                "jobs": [reclaimer.name, victim.name],
                "queues": [reclaimer.queue, victim.queue],
                "seconds": gap,
            }
            if later not in self.reclaimed_back_later:  # one per pair and time, not per pod
                self.reclaimed_back_later.append(later)
            return
        self.violate(
            "reclaimed_back",
            f"{victim.name}<->{reclaimer.name}",
            f"job {victim.name} (queue {victim.queue}) reclaimed from {reclaimer.name} "
            f"(queue {reclaimer.queue}), and {reclaimer.name} from it {gap} s later; first "
            f"at {_utc(first)}: {self._first_note.get((victim.name, reclaimer.name), '')!r}, "
            f"then at {_utc(now)}: {event.get('note')!r}",
        )

    # ----------------------------------------------------------------- every second

    def tick(self, now: float | None = None) -> None:
        """Judge the states that have held too long (see the module docstring)."""
        now = time.monotonic() if now is None else now
        s, d = self.settings, self.disturbances
        for job_name, since in list(self._gang_below_since.items()):
            if d.held_settled(since, now, s.settle_seconds) > s.gang_partial_limit:
                job = self.workload.jobs[job_name]
                self.violate(
                    "gang_below_minimum",
                    job_name,
                    f"gang {job_name} has {len(job.bound)} of its minimum {job.min_member} "
                    f"bound ({sorted(job.bound)}) for {now - since:.0f} s",
                )
        for uid, since in list(self._nominated_since.items()):
            if d.held_settled(since, now, s.settle_seconds) > s.gated_limit:
                pod = self.pod_by_uid(uid)
                self.violate(
                    "preemptor_gated",
                    uid,
                    f"pod {name_of(pod)} nominated to "
                    f"{(pod.get('status') or {}).get('nominatedNodeName')} and unbound for "
                    f"{now - since:.0f} s: {_scheduled_message(pod)}",
                )
        for uid, since in list(self._pending_since.items()):
            if d.held_settled(since, now, s.settle_seconds) > s.reason_limit:
                pod = self.pod_by_uid(uid)
                self.violate(
                    "pending_without_reason",
                    uid,
                    f"pod {name_of(pod)} pending {now - since:.0f} s without a reason",
                )

    def pod_by_uid(self, uid: str) -> dict[str, Any]:
        for p in self.pods.values():
            if str((p.get("metadata") or {}).get("uid")) == uid:
                return p
        return {"metadata": {"name": f"(uid {uid})"}}

    def pending_now(self) -> list[str]:
        """Names of the scheduler's pods not bound and not being deleted."""
        return sorted(
            n
            for n, p in self.pods.items()
            if not node_of(p) and not (p.get("metadata") or {}).get("deletionTimestamp")
        )


def _told_why(pod: Mapping[str, Any]) -> bool:
    scheduled = condition(pod, "PodScheduled")
    return bool(scheduled and scheduled.get("status") == "False" and scheduled.get("reason"))


def _scheduled_message(pod: Mapping[str, Any]) -> str:
    scheduled = condition(pod, "PodScheduled") or {}
    return str(scheduled.get("message") or scheduled.get("reason") or "no PodScheduled")


def _utc(epoch: float) -> str:
    """``epoch`` as the report's times are written (to set beside its ``chaos`` log)."""
    return time.strftime("%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 10) % 10}Z"
