"""What the live page shows, as one JSON document (layer 4, live).

:func:`page_state` reads the scheduler's cache (queues, nodes, pods, PodGroups, DRA
devices, as the watch events left them) and the :class:`~scheduler.live.summary.
LiveSummary` of the last cycle (reasons, the scheduling queue's holds, queue shares, recent
preemptions) and returns plain data:

* ``queues``: the tree, parents before children, each with its spec (weight,
  ``guarantee``, ``capability``), what it deserved in the last cycle and holds (the
  numbers its status gets), its share as the scheduler counts it (allocated over
  deserved), whether it is closed and why, and its pending jobs, each
  with the pods that wait, its reason (the PodGroup's, else its first pod's), the
  scheduling queue's hold on it, and what to ask ``explain`` for it;
* ``nodes``: each node's allocatable and use (requests of the pods on it, and what is
  being released or is nominated there), its DRA devices and how many are allocated, its
  local PersistentVolumes and how many are bound (:mod:`scheduler.live.local_volumes`), the
  starving job it is reserved for, and the pods nominated to it (those whose job waits
  behind a preemption's gate marked);
* ``holds``: every job the scheduling queue holds back, with why and until when;
* ``reservation``: starvation protection's target and nodes; ``decisions``: the recent
  preemptions and reclaims with their victims.

It costs one pass over the cache's pods and nodes; the page's handler memoizes it per
cycle (:class:`~scheduler.live.service.LivePage`). Nothing is changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.api.holds import Hold, HoldKind
from scheduler.api.job import PodGroupPhase
from scheduler.api.membership import pod_queue
from scheduler.api.queue import QueueInfo
from scheduler.api.queue_tree import ROOT, queue_tree
from scheduler.api.resource import ZERO, Resource, ResourceSum
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import HOLDS_ROOM
from scheduler.cache import SchedulerCache
from scheduler.live.local_volumes import local_volumes
from scheduler.live.summary import LiveSummary
from scheduler.loop.status import WAITING

Json = dict[str, Any]

UNPLACED = WAITING | {TaskStatus.GATED}
"""Pods of Sluice that wait to be placed: pending, nominated, or held by scheduling gates."""


def page_state(cache: SchedulerCache, summary: LiveSummary, now: float) -> Json:
    """The page's document; ``now`` is the loop clock's time (holds count down to it)."""
    unplaced: dict[str, list[TaskInfo]] = {}
    held: dict[str, ResourceSum] = {}
    for t in cache.tasks.values():
        if t.sluice and t.status in UNPLACED:
            unplaced.setdefault(t.job_id, []).append(t)
        elif t.status in HOLDS_ROOM:
            held.setdefault(_queue_of(cache, t), ResourceSum()).add(t.request)
    waiting = _waiting_jobs(cache, summary, unplaced)
    holding = {q: total.result() for q, total in held.items()}
    return {
        "scheduler": cache.scheduler_name,
        "cycle": summary.cycle,
        "cycleStarted": summary.started,
        "cycleSeconds": round(summary.seconds, 4),
        "cycleFailed": summary.failed,
        "now": now,
        "queues": _queues(cache, summary, waiting, holding),
        "nodes": _nodes(cache, summary),
        "holds": [_hold(job, hold, now) for job, hold in sorted(summary.queue_view.holds.items())],
        "reservation": _reservation(summary),
        "decisions": [
            {
                "cycle": r.cycle,
                "at": r.at,
                "kind": r.decision.kind,
                "pod": r.decision.pod,
                "node": r.decision.node,
                "victims": list(r.decision.victims),
            }
            for r in reversed(summary.recent)
        ],
    }


def _quantities(amounts: Mapping[str, int] | None) -> dict[str, str] | None:
    return None if amounts is None else Resource(amounts).to_quantities()


def _queue_of(cache: SchedulerCache, t: TaskInfo) -> str:
    group = cache.pod_groups.get(t.job_id)
    return group.queue if group is not None else pod_queue(t.labels or {}, t.annotations or {})


def _waiting_jobs(
    cache: SchedulerCache, summary: LiveSummary, pods: dict[str, list[TaskInfo]]
) -> dict[str, list[Json]]:
    """The pending jobs of each queue, by queue name: jobs with pods of Sluice that wait
    to be placed (``pods``, by job), and PodGroups still Pending (another API's may have
    no pods yet)."""
    for job_id, pg in cache.pod_groups.items():
        if pg.phase is PodGroupPhase.PENDING and job_id not in pods:
            pods[job_id] = []
    out: dict[str, list[Json]] = {}
    holds = summary.queue_view.holds
    for job_id, tasks in pods.items():
        tasks.sort(key=lambda t: t.name)
        group = cache.pod_groups.get(job_id)
        if group is not None:
            queue, name, min_member = (
                group.queue,
                f"{group.namespace}/{group.name}",
                group.min_member,
            )
            explain = {"kind": "podgroup", "name": job_id}
        else:
            t = tasks[0]
            queue = pod_queue(t.labels or {}, t.annotations or {})
            name, min_member = t.key, 1
            explain = {"kind": "pod", "name": t.key}
        # what the API shows: a PodGroup's Unschedulable condition, a lone pod's own
        told = next(
            (summary.task_reasons[t.key] for t in tasks if t.key in summary.task_reasons), None
        )
        pod_reason = told.message if told is not None else ""
        said = summary.job_reasons.get(job_id)
        job_reason = said.message if said is not None else ""
        if group is not None:
            reason = job_reason or pod_reason or group.problem
        else:
            reason = pod_reason or job_reason
        hold = holds.get(job_id)
        out.setdefault(queue, []).append(
            {
                "job": job_id,
                "name": name,
                "podGroup": group is not None,
                "minMember": min_member,
                "pending": [
                    t.key for t in tasks if t.status is TaskStatus.PENDING and not t.nominated_node
                ],
                "nominated": {t.key: t.nominated_node for t in tasks if t.nominated_node},
                "gated": [t.key for t in tasks if t.status is TaskStatus.GATED],
                "reason": reason,
                "hold": hold.kind.value if hold is not None else "",
                "explain": explain,
            }
        )
    for jobs in out.values():
        jobs.sort(key=lambda j: j["name"])
    return out


def _queues(
    cache: SchedulerCache,
    summary: LiveSummary,
    waiting: dict[str, list[Json]],
    holding: dict[str, Resource],
) -> list[Json]:
    """The queue rows. ``allocated`` is what the Queue's status says (the requests of the
    pods holding room, summed over its leaves); ``share`` is the ratio the scheduler
    orders and reclaims by, which also counts nominated pods and DRA devices."""
    tree = queue_tree(cache.queues)
    rows: list[Json] = []

    def row(q: QueueInfo, depth: int) -> Json:
        share = summary.queue_shares.get(q.name)
        leaves = [q.name] if q.name in tree.closed else tree.leaves(q.name)
        allocated = ResourceSum()
        for leaf in leaves:
            allocated.add(holding.get(leaf, ZERO))
        return {
            "name": q.name,
            "parent": q.parent,
            "depth": depth,
            "leaf": tree.is_leaf(q.name),
            "weight": q.weight,
            "priority": q.priority,
            "reclaimable": q.reclaimable,
            "state": "Closed" if q.name in tree.closed else q.state,
            "closed": tree.closed.get(q.name, ""),
            "deserved": share.deserved.to_quantities() if share is not None else {},
            "allocated": allocated.result().to_quantities(),
            "share": _ratio(share.share) if share is not None else None,
            "guarantee": q.guarantee.to_quantities(),
            "capability": _quantities(q.capability),
            "jobs": waiting.get(q.name, []),
        }

    for name in tree.top_down():
        depth = len(tree.ancestors(name))
        rows.append(row(cache.queues[name], depth))
    for name in sorted(tree.closed):
        rows.append(row(cache.queues[name], 0))
    named = set(cache.queues) | {ROOT}
    for missing in sorted(set(waiting) - named):  # jobs naming a queue that does not exist
        rows.append(
            {
                "name": missing,
                "missing": True,
                "depth": 0,
                "leaf": True,
                "state": "Missing",
                "closed": f"queue {missing!r} does not exist",
                "deserved": {},
                "allocated": holding.get(missing, ZERO).to_quantities(),
                "share": None,
                "guarantee": {},
                "capability": None,
                "jobs": waiting[missing],
            }
        )
    return rows


def _ratio(value: float) -> float | str:
    return "inf" if math.isinf(value) else round(value, 3)


def _nodes(cache: SchedulerCache, summary: LiveSummary) -> list[Json]:
    gated = {job for job, h in summary.queue_view.holds.items() if h.kind is HoldKind.EVICTIONS}
    reservation = summary.queue_view.reservation
    reserved = reservation.nodes if reservation is not None else frozenset()
    nominated: dict[str, list[Json]] = {}
    for t in cache.tasks.values():
        if t.nominated_node and t.status in WAITING:
            nominated.setdefault(t.nominated_node, []).append(
                {"pod": t.key, "job": t.job_id, "gated": t.job_id in gated}
            )
    devices = _device_use(cache)
    local = local_volumes(cache.volumes.volumes, cache.nodes) if cache.volumes.volumes else {}
    out: list[Json] = []
    for name in sorted(cache.nodes):
        n = cache.nodes[name]
        total, used = devices.get(name, (0, 0))
        pvs, bound = local.get(name, (0, 0))
        out.append(
            {
                "name": name,
                "ready": n.ready,
                "unschedulable": n.unschedulable,
                "allocatable": n.allocatable.to_quantities(),
                "fractions": {
                    r: round(n.used.get(r) / amount, 4)
                    for r, amount in n.allocatable.items()
                    if amount > 0
                },
                "used": n.used.to_quantities(),
                "releasing": n.releasing.to_quantities(),
                "nominatedRequests": n.nominated.to_quantities(),
                "pods": _pods_on(n.tasks.values()),
                "devices": {"total": total, "allocated": used},
                "localVolumes": {"total": pvs, "bound": bound},
                "reservedFor": reservation.job if name in reserved and reservation else "",
                "nominated": sorted(nominated.get(name, []), key=lambda x: x["pod"]),
            }
        )
    return out


def _pods_on(tasks: Iterable[TaskInfo]) -> int:
    return sum(1 for t in tasks if t.status not in (TaskStatus.PIPELINED, TaskStatus.PENDING))


def _device_use(cache: SchedulerCache) -> dict[str, tuple[int, int]]:
    """Per node: its DRA devices (those its ResourceSlices and the shared slices that
    reach it offer) and how many of them are allocated to a claim."""
    dra = cache.dra
    if dra.empty:
        return {}
    inventory = dra.inventory()
    allocated: set[int] = set()
    for claim in dra.claims.values():
        if claim.allocation is not None:
            allocated.update(inventory.devices_of(claim.allocation.devices))
    out: dict[str, tuple[int, int]] = {}
    for name, node in cache.nodes.items():
        mine = inventory.node_devices(name, node.labels)
        if mine:
            out[name] = (len(mine), sum(1 for i in mine if i in allocated))
    return out


def _hold(job: str, hold: Hold, now: float) -> Json:
    return {
        "job": job,
        "kind": hold.kind.value,
        "reason": hold.text,
        "endsIn": None if math.isinf(hold.until) else round(max(0.0, hold.until - now), 3),
        "victimsLeft": len(hold.victims),
        "devicesLeft": len(hold.devices),
        "callsLeft": hold.calls_left,
    }


def _reservation(summary: LiveSummary) -> Json | None:
    r = summary.queue_view.reservation
    if r is None:
        return None
    return {"job": r.job, "priority": r.priority, "nodes": sorted(r.nodes)}
