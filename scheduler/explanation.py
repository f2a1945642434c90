"""``sluice explain``: why a pod or a PodGroup is where it is (layer 3, beside the loop).

Given a cache filled with the cluster's objects (by the command line, from a cluster or a
scenario file), :func:`explain` runs one scheduling cycle in memory, exactly as the loop
would (the configured actions and plugins over a snapshot), and reads off what it says of
one job: the decision it would make now (binds, nominations, the victims preemption or
reclaim would evict, node by node, in the order chosen), why each pod still pending is
not placed, node by node (nodes grouped by reason, as kube-scheduler counts them: a node
is charged to the first filter that refuses it), its gang, its queue (deserved,
allocated, what the job asks), what it waits for (a nomination and the victims still
terminating on that node, a reservation, the pod grouper), each DRA claim of its pods
(the devices it holds or would get; the nodes that cannot give them are among the
reasons, naming the claim) and each PersistentVolumeClaim (the PV it is bound to, the PV
or node the next cycle would write for it, or what it waits for). Nothing is written
anywhere: the session is thrown away.

What only a running scheduler knows (its preemption gates and backoffs, a job parked or
elected for starvation protection between its cycles) is not in the objects; the
PodGroup's conditions, which the scheduler writes, stand for it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from scheduler.actions.dissolve import below_minimum_since
from scheduler.api import reasons
from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.dra.pods import claims_of_pod
from scheduler.api.errors import InvalidInputError
from scheduler.api.group_apis import APIS, SLUICE, api_of_job, split_job_id
from scheduler.api.holds import QueueView
from scheduler.api.job import JobInfo
from scheduler.api.resource import ResourceSum
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.volumes.claims import claims_of_pod as volume_claims_of_pod
from scheduler.api.volumes.view import VolumeView
from scheduler.cache import SchedulerCache
from scheduler.framework.effects import Bind, Dissolution, Evict, Nominate, parts
from scheduler.framework.fit import Fit
from scheduler.framework.registry import ResolvedConfiguration
from scheduler.framework.session import Session, open_session

KINDS = ("pod", "podgroup")


def explain(
    cache: SchedulerCache,
    resolved: ResolvedConfiguration,
    kind: str,
    key: str,
    *,
    now: float = 0.0,
    wall: float = 0.0,
) -> dict[str, Any]:
    """What the next cycle would do for the pod or PodGroup ``key`` (``namespace/name``),
    and why, as a cycle at ``now`` (the loop's clock) and ``wall`` (Unix seconds) would
    see it: the first cycle of a scheduler started on ``cache``, with no holds yet, each
    gang below its minimum counted from ``now``. Raises InvalidInputError naming the
    object when it is not there."""
    snapshot = cache.snapshot(now=now, wall=wall)
    snapshot.queue = QueueView(below_minimum_since=below_minimum_since(snapshot.jobs, {}, now))
    return explain_snapshot(snapshot, resolved, kind, key)


def explain_snapshot(
    snapshot: Snapshot, resolved: ResolvedConfiguration, kind: str, key: str
) -> dict[str, Any]:
    """:func:`explain` on a snapshot of the caller's (the live page's: a full copy, with
    the scheduling queue's holds attached). Uses it up: the session changes it."""
    if kind not in KINDS:
        raise InvalidInputError(
            "explain", "kind", f"must be one of {', '.join(KINDS)}, not {kind!r}"
        )
    key = with_namespace(key, "default")
    session = open_session(snapshot, resolved)
    try:
        job, chosen = _find(session, kind, key)
        before = {t.uid: (t.status, t.node_name) for t in job.tasks.values()}
        for action in resolved.actions:
            session.run_action(action)
        return _describe(
            session, job, chosen, before, kind=kind, key=job.uid if kind == "podgroup" else key
        )
    finally:
        session.close()


def with_namespace(key: str, namespace: str) -> str:
    """``key`` (``[API:][NS/]NAME``: a job id, or a name) with ``namespace`` when it names
    none (``volcano:train`` in ``ml`` is ``volcano:ml/train``)."""
    if "/" in key:
        return key
    prefix, sep, name = key.partition(":")
    if sep and any(api.name == prefix for api in APIS):
        return f"{prefix}:{namespace}/{name}"
    return f"{namespace}/{key}"


def _find_group(session: Session, key: str) -> JobInfo:
    """The gang of the PodGroup ``key``: a job id (``ns/name`` for Sluice's,
    ``volcano:ns/name`` for another API's), or ``ns/name`` of another API's PodGroup when
    no other API has a PodGroup of that name; else an error saying which to use."""
    job = session.jobs.get(key)
    if job is not None and job.has_pod_group:
        return job
    _, ns, name = split_job_id(key)
    if api_of_job(key) is SLUICE:
        named = sorted(
            j.uid
            for j in session.jobs.values()
            if j.has_pod_group and (j.namespace, j.name) == (ns, name)
        )
        if len(named) == 1:
            return session.jobs[named[0]]
        if named:
            raise InvalidInputError(
                f"PodGroup {key}",
                None,
                f"is the name of PodGroups of {len(named)} APIs: explain one of {', '.join(named)}",
            )
    prefixes = ", ".join(f"{api.prefix}{ns}/{name}" for api in APIS if api.prefix)
    raise InvalidInputError(
        f"PodGroup {key}",
        None,
        f"not found (or not of this scheduler); another API's PodGroup is named with its "
        f"API: {prefixes}",
    )


def _find(session: Session, kind: str, key: str) -> tuple[JobInfo, list[TaskInfo]]:
    ns, _, name = key.partition("/")
    if kind == "podgroup":
        job = _find_group(session, key)
        return job, sorted(job.tasks.values(), key=lambda t: t.name)
    for job in session.jobs.values():
        for t in job.tasks.values():
            if t.namespace == ns and t.name == name:
                return job, [t]
    raise InvalidInputError(f"pod {key}", None, "not found (or not of this scheduler)")


def nodes_by_reason(session: Session, fit: Fit) -> dict[str, list[str]]:
    """The nodes refused, by reason, each node charged to the first filter that refuses
    it (as :meth:`Fit.reasons` counts them), names in table order."""
    names = [n.name for n in session.table.nodes]
    out: dict[str, list[str]] = {}
    unexplained = ~fit.feasible
    for _, rejections in fit.groups:
        if not unexplained.any():
            break
        hit = np.zeros_like(unexplained)
        for r in rejections:
            mine = r.nodes & unexplained
            if mine.any():
                out.setdefault(r.reason, []).extend(names[i] for i in np.flatnonzero(mine))
                hit |= mine
        unexplained &= ~hit
    return out


def _describe(
    session: Session,
    job: JobInfo,
    chosen: list[TaskInfo],
    before: dict[str, tuple[TaskStatus, str]],
    *,
    kind: str,
    key: str,
) -> dict[str, Any]:
    mine = {t.uid for t in job.tasks.values()}
    binds = {
        e.task.key: e.node for e in session.effects if isinstance(e, Bind) and e.task.uid in mine
    }
    nominations = {
        e.task.key: e.node
        for e in parts(session.effects)
        if isinstance(e, Nominate) and e.task.uid in mine
    }
    evictions: dict[str, dict[str, Any]] = {}
    for e in parts(session.effects):
        if isinstance(e, Evict) and e.preemptor is not None and e.preemptor.uid in mine:
            where = evictions.setdefault(
                e.node,
                {"node": e.node, "for": e.preemptor.key, "how": e.reason.value, "victims": []},
            )
            where["victims"].append(
                {"pod": e.task.key, "priority": e.task.priority, "bundle": e.bundle.value}
            )
    bind_of = {e.task.uid: e for e in session.effects if isinstance(e, Bind)}
    pods = []
    for t in chosen:
        status, node = before[t.uid]
        entry: dict[str, Any] = {"pod": t.key, "status": status.value, "node": node}
        told = session.task_reasons.get(t.uid) or session.job_reasons.get(job.uid)
        if t.sluice and status in (TaskStatus.PENDING, TaskStatus.PIPELINED):
            entry["reason"] = told.message if told is not None else ""
            entry["reasonCode"] = told.code.value if told is not None else ""
            if t.key not in binds:
                entry["nodes"] = nodes_by_reason(session, session.fit(t))
        if t.sluice and status is TaskStatus.GATED:
            gated = reasons.scheduling_gated(t.scheduling_gates)
            entry["schedulingGates"] = list(t.scheduling_gates)
            entry["reason"], entry["reasonCode"] = gated.message, gated.code.value
        if t.nominated_node:
            entry["nominatedNode"] = t.nominated_node
        claims = _claims(session, t, bind_of.get(t.uid))
        if claims:
            entry["claims"] = claims
        volumes = _volumes(session, t, bind_of.get(t.uid))
        if volumes:
            entry["volumes"] = volumes
        pods.append(entry)
    return {
        "kind": kind,
        "name": key,
        "job": job.uid,
        "reason": told.message if (told := session.job_reasons.get(job.uid)) else "",
        "reasonCode": told.code.value if told else "",
        "next_cycle": {
            "binds": binds,
            "nominations": nominations,
            "evictions": list(evictions.values()),
            "dissolves": [
                e.task.key
                for d in session.effects
                if isinstance(d, Dissolution)
                for e in d.evictions
                if e.task.uid in mine
            ],
        },
        "pods": pods,
        "gang": _gang(session, job, before),
        "queue": _queue(session, job),
        "waits_for": _waits(session, job, before),
    }


def _claims(session: Session, task: TaskInfo, bind: Bind | None) -> list[dict[str, Any]]:
    """Each DRA claim of ``task``: its devices (allocated in the API, or what the next
    cycle would allocate), whom it is reserved for; or why the pod waits for it."""
    view = session.snapshot.dra
    found = claims_of_pod(task, view.claims, view.invalid) if view else claims_of_pod(task, {})
    if found.problem:
        return [{"problem": found.problem}]
    assert view is not None or not found.keys
    written = {b.key: b for b in bind.claims} if bind is not None else {}
    out: list[dict[str, Any]] = []
    keys = list(found.keys)
    made = view.extended_claims.get(task.uid) if view is not None else None
    if made is not None:
        keys.append(made)  # the claim made for its extended resources (KEP-5004)
    for b in written.values():
        if b.extended is not None:  # the one the next cycle would make
            out.append({"claim": f"{b.namespace}/<extended-resources>", "nextCycle": _devices(b)})
    for key in keys:
        claim = view.claims[key]  # type: ignore[union-attr]
        entry: dict[str, Any] = {"claim": key}
        planned = written.get(key)
        if claim.allocation is not None:
            entry["devices"] = [str(d) for d in claim.allocation.devices]
            entry["reservedFor"] = [c.name for c in claim.reserved_for]
        elif planned is not None and planned.allocation is not None:
            entry["nextCycle"] = _devices(planned)
        else:
            entry["devices"] = []
        out.append(entry)
    return out


def _volumes(session: Session, task: TaskInfo, bind: Bind | None) -> list[dict[str, Any]]:
    """Each PersistentVolumeClaim of ``task``: the PV it is bound to, or what the next
    cycle would write for it (a PV's claimRef, the node to provision on), or what it
    waits for; or why the pod cannot be placed with it (kube's words)."""
    if not task.spec.volumes or not any(v.disk is None for v in task.spec.volumes):
        return []
    view = session.snapshot.volumes or VolumeView()
    found = volume_claims_of_pod(task.namespace, task.name, task.uid, task.spec.volumes, view)
    if found.problem:
        return [{"problem": found.problem}]
    planned = bind.volumes if bind is not None else None
    static = {b.claim.key: b.volume for b in planned.static} if planned else {}
    provisions = {p.claim.key for p in planned.provisions} if planned else set()
    out: list[dict[str, Any]] = []
    for claim in found.all:
        entry: dict[str, Any] = {"claim": claim.key}
        if claim.fully_bound:
            entry["volume"] = claim.volume_name
        elif claim.key in static:
            entry["nextCycle"] = f"bind PersistentVolume {static[claim.key]}"
        elif claim.key in provisions and planned is not None:
            entry["nextCycle"] = f"provision a PersistentVolume on node {planned.node}"
        elif claim.provisioning:
            entry["waits"] = f"a PersistentVolume provisioned on node {claim.selected_node}"
        else:
            entry["waits"] = "its first consumer (WaitForFirstConsumer)"
        out.append(entry)
    return out


def _devices(binding: ClaimBinding) -> list[str]:
    return [str(d) for d in binding.allocation.devices] if binding.allocation else []


def _gang(
    session: Session, job: JobInfo, before: dict[str, tuple[TaskStatus, str]]
) -> dict[str, Any]:
    counts = Counter(status.value for status, _ in before.values())
    out: dict[str, Any] = {
        "podGroup": job.has_pod_group,
        "minMember": job.min_member,
        "minTaskMember": dict(job.min_task_member),
        "pods": len(job.tasks),
        "byStatus": dict(sorted(counts.items())),
    }
    since = session.below_minimum.get(job.uid)
    if since is not None:  # the dissolve action's count, as the scheduling queue has it
        out["belowMinimumSeconds"] = round(session.now - since, 1)
    return out


def _queue(session: Session, job: JobInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"name": job.queue}
    queue = session.queues.get(job.queue)
    if queue is None:
        out["problem"] = f"queue {job.queue!r} does not exist"
        return out
    share = session.queue_share(queue)
    if share is not None:
        out["deserved"] = share.deserved.to_quantities()
        out["allocated"] = share.allocated.to_quantities()
    asks = ResourceSum()
    for t in job.tasks.values():
        if t.status in (TaskStatus.PENDING, TaskStatus.PIPELINED) and t.sluice:
            asks.add(t.request)
    out["jobAsks"] = asks.result().to_quantities()
    return out


def _waits(session: Session, job: JobInfo, before: dict[str, tuple[TaskStatus, str]]) -> list[str]:
    out: list[str] = []
    for t in job.tasks.values():
        if t.awaits_grouper and before[t.uid][0] is TaskStatus.PENDING:
            out.append(
                f"{t.key} waits for the pod grouper of sluice controller to group it by its "
                f"owner {t.awaits_grouper}"
            )
        node_name = t.nominated_node or (
            before[t.uid][1] if before[t.uid][0] is TaskStatus.PIPELINED else ""
        )
        if not node_name or node_name not in session.nodes:
            continue
        leaving = [
            x.key
            for x in session.nodes[node_name].tasks.values()
            if x.terminating or x.status is TaskStatus.RELEASING
        ]
        what = f"{t.key} is nominated to node {node_name}"
        if leaving:
            what += f"; {len(leaving)} pod(s) still terminating there: {', '.join(sorted(leaving))}"
        out.append(what)
    for t in sorted(job.tasks.values(), key=lambda t: t.name):
        if t.sluice and before[t.uid][0] is TaskStatus.GATED:
            out.append(f"{t.key}: {reasons.scheduling_gated(t.scheduling_gates).message}")
    for ctype, status, _, message in job.conditions:
        if ctype == "Reserved" and status == "True":
            out.append(f"starvation protection: {message}")
    return out


def render(e: dict[str, Any], *, verbose: bool = False) -> str:
    """``e`` as text for people; ``verbose`` lists the nodes of each reason."""
    lines = [f"{e['kind']} {e['name']} (job {e['job']}, queue {e['queue']['name']})"]
    nxt = e["next_cycle"]
    if nxt["binds"]:
        lines.append(
            "Next cycle: would bind " + ", ".join(f"{p} to {n}" for p, n in nxt["binds"].items())
        )
    for ev in nxt["evictions"]:
        victims = ", ".join(
            f"{v['pod']} (priority {v['priority']}, {v['bundle']})" for v in ev["victims"]
        )
        lines.append(f"Next cycle: {ev['how']} on node {ev['node']} for {ev['for']}: {victims}")
    if nxt["nominations"]:
        lines.append(
            "Next cycle: would nominate "
            + ", ".join(f"{p} to {n}" for p, n in nxt["nominations"].items())
        )
    if nxt["dissolves"]:
        lines.append(
            "Next cycle: would dissolve the gang (below its minimum too long), evicting "
            + ", ".join(nxt["dissolves"])
        )
    if e["reason"]:
        lines.append(f"Why: {e['reason']}")
    for p in e["pods"]:
        head = f"  pod {p['pod']}: {p['status']}" + (f" on {p['node']}" if p["node"] else "")
        lines.append(head)
        if p.get("reason"):
            lines.append(f"    {p['reason']}")
        for reason, names in sorted((p.get("nodes") or {}).items()):
            shown = f": {', '.join(names)}" if verbose else ""
            lines.append(f"    {len(names)} node(s): {reason}{shown}")
        for c in p.get("claims") or ():
            lines.append(f"    {_claim_line(c)}")
        for c in p.get("volumes") or ():
            lines.append(f"    {_volume_line(c)}")
    g = e["gang"]
    if g["podGroup"]:
        statuses = ", ".join(f"{n} {s}" for s, n in g["byStatus"].items())
        roles = f", minTaskMember {g['minTaskMember']}" if g["minTaskMember"] else ""
        below = (
            f"; running below its minimum for {g['belowMinimumSeconds']:g} s"
            if "belowMinimumSeconds" in g
            else ""
        )
        lines.append(
            f"Gang: minMember {g['minMember']}{roles}; {g['pods']} pod(s): {statuses}{below}"
        )
    q = e["queue"]
    if "problem" in q:
        lines.append(f"Queue: {q['problem']}")
    elif "deserved" in q:
        lines.append(
            f"Queue {q['name']}: deserves {_fmt(q['deserved'])}, holds {_fmt(q['allocated'])}; "
            f"this job asks {_fmt(q['jobAsks'])}"
        )
    for w in e["waits_for"]:
        lines.append(f"Waits for: {w}")
    return "\n".join(lines)


def _claim_line(c: dict[str, Any]) -> str:
    if "problem" in c:
        return f"claims: {c['problem']}"
    if "nextCycle" in c:
        return f"claim {c['claim']}: next cycle would allocate {', '.join(c['nextCycle'])}"
    if c["devices"]:
        who = ", ".join(c["reservedFor"]) or "nobody"
        return f"claim {c['claim']}: allocated {', '.join(c['devices'])}; reserved for {who}"
    return f"claim {c['claim']}: not allocated"


def _volume_line(c: dict[str, Any]) -> str:
    if "problem" in c:
        return f"volumes: {c['problem']}"
    if "volume" in c:
        return f"volume claim {c['claim']}: bound to PersistentVolume {c['volume']}"
    if "nextCycle" in c:
        return f"volume claim {c['claim']}: next cycle would {c['nextCycle']}"
    return f"volume claim {c['claim']}: waits for {c['waits']}"


def _fmt(quantities: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in quantities.items()) or "nothing"
