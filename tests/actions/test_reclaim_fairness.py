"""Max-min fairness with whole pods (issue 38 point 1), a property of the reclaim action,
through the real loop on the embedded cluster.

The worlds are static, as in :mod:`tests.actions.test_reclaim_hierarchy`: every pod is
there at the start and an evicted pod comes back pending under a new name (as a Job
controller recreates it), so the queues' demand, and with it their deserved shares, stand
still. They mix what makes fair shares hard with indivisible pods: queues of one pod,
pods larger than any queue's share (a whole node's GPUs), queues whose pods ask only GPUs,
explicit ``deserved`` shares, and a parent queue with two children.

Once nothing more happens, and in one more cycle with no job parked (what the retry of
parked jobs would do five minutes later):

- **nothing is reclaimed back**: a pod is never evicted for a pod (or a copy of it) that
  it, or a copy of it, was evicted for before, unless a third queue took from the first
  victim's queue in between (the queues then stand elsewhere: see
  :func:`test_two_reclaims_apart`);
- **no queue is left below its share beside a queue that could give**: no pending pod
  waits whose queue is below its deserved share in a contended resource the pod asks for,
  while some other queue runs pods on one node whose eviction makes room for it there and
  leaves that queue (and each of its ancestors below the branch it shares with the
  waiting queue) at or above its share in every contended resource they free: above its
  own by at least what the pod takes of it.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.api import labels as L
from scheduler.api.resource import Resource
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import HOLDS_ROOM
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Evict, EvictReason, parts
from scheduler.framework.session import Session, open_session
from scheduler.loop.cycle_report import CycleReport
from scheduler.plugins.proportion import ProportionPlugin
from scheduler.sim.runner import Simulation
from scheduler.sim.store import ObjectStore, WatchEvent
from tests import simulated
from tests.builders import node, pod, queue

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
EXAMPLES = int(os.environ.get("SLUICE_FAIRNESS_EXAMPLES", "60"))
"""How many worlds hypothesis draws (``SLUICE_FAIRNESS_EXAMPLES`` for a longer run)."""


@dataclass(frozen=True)
class Shape:
    """What every pod of a queue asks: whole CPUs, whole GPUs (one of them may be 0)."""

    cpu: int
    gpu: int

    def requests(self) -> Obj:
        out: Obj = {}
        if self.cpu:
            out["cpu"] = str(self.cpu)
        if self.gpu:
            out[GPU] = str(self.gpu)
        return out


@dataclass
class World:
    objects: list[Obj]
    queue_of: dict[str, str]
    """Pod name (copies included, as they come) -> its leaf queue."""
    leaves: list[str]
    summary: str


NODE_CPU = 16
NODE_GPU = 8


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """1-2 nodes of 16 CPU and 8 GPUs; 2-4 leaf queues (weights 1-3), two of them under
    a parent queue ``p`` when ``hierarchy``; each leaf's pods of one shape: GPU-only (1, 2,
    4 or 8 GPUs: 8 is a whole node, larger than any share), CPU-only (1-8 CPU) or both
    (all leaves of one kind, or each its own);
    some leaves with an explicit ``deserved`` of GPUs or CPU; one leaf (the hog) runs as
    many pods as fit and waits with 0-2, the others run 0-3 (placed first-fit from a
    random node, as long as they fit) and wait with 1-3, and any leaf may instead be a
    queue of a single pod, running or waiting."""
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 2), label="nodes"))]
    objects: list[Obj] = [node(n, cpu=str(NODE_CPU), memory="64Gi", gpus=NODE_GPU) for n in nodes]
    free = {n: [NODE_CPU, NODE_GPU] for n in nodes}
    count = draw(st.integers(2, 4), label="leaves")
    leaves = [f"q{i}" for i in range(count)]
    hierarchy = count >= 3 and draw(st.booleans(), label="hierarchy")
    if hierarchy:
        objects.append(queue("p", weight=draw(st.integers(1, 3), label="weight p")))
    queue_of: dict[str, str] = {}
    notes = []
    hog = draw(st.integers(0, count - 1), label="hog")
    kinds = draw(st.sampled_from(["gpu", "cpu", "both", "mixed"]), label="kinds")
    for i, q in enumerate(leaves):
        kind = kinds if kinds != "mixed" else draw(st.sampled_from(["gpu", "cpu", "both"]))
        gpu = draw(st.sampled_from([1, 2, 4, 8]), label="gpus") if kind != "cpu" else 0
        cpu = draw(st.integers(1, 8), label="cpus") if kind != "gpu" else 0
        shape = Shape(cpu, gpu)
        deserved = None
        if draw(st.integers(0, 3), label="explicit deserved") == 0:
            resource = GPU if gpu else "cpu"
            limit = NODE_GPU if gpu else NODE_CPU
            deserved = {resource: str(draw(st.integers(0, limit * len(nodes)), label="d"))}
        parent = "p" if hierarchy and i < 2 else None
        objects.append(
            queue(
                q,
                weight=draw(st.integers(1, 3), label="weight"),
                deserved=deserved,
                parent=parent,
            )
        )
        if draw(st.booleans(), label="single pod"):
            running, pending = (1, 0) if draw(st.booleans(), label="runs") else (0, 1)
        elif i == hog:
            running, pending = 16, draw(st.integers(0, 2), label="pending")
        else:
            running = draw(st.integers(0, 3), label="running")
            pending = draw(st.integers(1, 3), label="pending")
        notes.append(f"{q}{'<p' if parent else ''}:{cpu}c{gpu}g r{running} w{pending}")
        for k in range(running + pending):
            where = None
            if k < running:
                start = draw(st.sampled_from(nodes), label="node")
                for n in sorted(nodes, key=lambda n: (n != start, n)):
                    if free[n][0] >= cpu and free[n][1] >= gpu:
                        free[n][0] -= cpu
                        free[n][1] -= gpu
                        where = n
                        break
                if where is None:
                    continue  # no room left: the pod is not there at all
            name = f"{q}-{k}"
            queue_of[name] = q
            objects.append(_pod(name, q, shape, where))
    return World(objects, queue_of, leaves, " ".join(notes))


def _pod(name: str, q: str, shape: Shape, where: str | None) -> Obj:
    requests = shape.requests()
    limits = {GPU: requests[GPU]} if GPU in requests else {}
    container: Obj = {"name": "c", "resources": {"requests": requests}}
    if limits:
        container["resources"]["limits"] = limits
    return pod(
        name,
        node=where,
        labels={L.QUEUE_LABEL: q},
        containers=[container],
        terminationGracePeriodSeconds=0,
    )


def lineage(name: str) -> str:
    """The pod a copy was made from (``q1-3-r2`` -> ``q1-3``)."""
    return name.split("-r", maxsplit=1)[0]


@dataclass
class Recorder:
    """The reclaims of a run, as (victim, reclaiming pod) lineages; plays the Job
    controller: every pod deleted comes back pending as ``NAME-rN``."""

    world: World
    reclaims: list[tuple[str, str]] = field(default_factory=list)
    copies: dict[str, int] = field(default_factory=dict)

    def attach(self, store: ObjectStore) -> None:
        store.subscribe(lambda ev: self._recreate(store, ev), kinds=["Pod"])

    def _recreate(self, store: ObjectStore, ev: WatchEvent) -> None:
        if ev.type != "DELETED":
            return
        old = ev.obj
        base = lineage(old["metadata"]["name"])
        n = self.copies[base] = self.copies.get(base, 0) + 1
        again = f"{base}-r{n}"
        self.world.queue_of[again] = self.world.queue_of[base]
        spec = copy.deepcopy(old["spec"])
        spec.pop("nodeName", None)
        meta = {
            "name": again,
            "namespace": old["metadata"]["namespace"],
            "labels": dict(old["metadata"].get("labels") or {}),
        }
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})

    def __call__(self, report: CycleReport, fresh: list[Obj]) -> None:
        del fresh
        for e in parts(report.effects):
            if isinstance(e, Evict) and e.reason is EvictReason.RECLAIMED:
                by = e.preemptor.name if e.preemptor is not None else "?"
                self.reclaims.append((lineage(e.task.name), lineage(by)))


def check_nothing_reclaimed_back(
    reclaims: Sequence[tuple[str, str]], queue_of: Mapping[str, str]
) -> None:
    """No pod is evicted for a pod (or a copy of it) that it, or a copy of it, was
    evicted for before, unless a third queue took from the first victim's queue in
    between: the allocation then moved on, and taking back is no return to where the
    queues were (by the rule's order the queues are fairer for it; ``two reclaims
    apart`` below)."""
    for i, (victim, reclaimer) in enumerate(reclaims):
        for j in range(i + 1, len(reclaims)):
            if reclaims[j] != (reclaimer, victim):
                continue
            third = [
                (v, r)
                for v, r in reclaims[i + 1 : j]
                if queue_of[v] == queue_of[victim]
                and queue_of[r] not in (queue_of[victim], queue_of[reclaimer])
            ]
            assert third, (
                f"{victim} was reclaimed for {reclaimer}, then {reclaimer} for {victim}: {reclaims}"
            )


def final_session(sim: Simulation, config: SchedulerConfiguration | None = None) -> Session:
    """A session (the default plugins; no actions unless ``config`` says) on what the
    run's cache holds at the end, nothing parked: the shares as the scheduler sees them."""
    from scheduler.app import builtin_registry

    config = config or SchedulerConfiguration(actions=())
    return open_session(sim.cache.snapshot(), builtin_registry().resolve(config))


def reclaims_of_a_fresh_cycle(sim: Simulation) -> list[tuple[str, str]]:
    """The reclaims one more cycle (the default actions) would decide at the end with no
    job parked, as the retry of parked jobs (5 minutes) would: a settled run must have
    none left (parking must not be what keeps a reclaim back from happening)."""
    session = final_session(sim, SchedulerConfiguration())
    for action in session.resolved.actions:
        session.run_action(action)
    return [
        (lineage(e.task.name), lineage(e.preemptor.name if e.preemptor else "?"))
        for e in parts(session.effects)
        if isinstance(e, Evict) and e.reason is EvictReason.RECLAIMED
    ]


def _proportion(session: Session) -> ProportionPlugin:
    found = next(p for _, p in session.plugins if isinstance(p, ProportionPlugin))
    assert isinstance(found, ProportionPlugin)
    return found


def _subsets(tasks: Sequence[TaskInfo], limit: int = 6) -> Iterator[tuple[TaskInfo, ...]]:
    """Every non-empty subset of ``tasks`` (their first ``limit``), smallest first."""
    head = list(tasks)[:limit]
    for k in range(1, len(head) + 1):
        yield from itertools.combinations(head, k)


def could_give(session: Session, waiting: TaskInfo, queue: str) -> str | None:
    """A way some queue other than ``queue`` could make room for ``waiting`` on one node,
    staying (with its ancestors below the shared branch) at or above its share in every
    resource it frees that is contended or that ``waiting`` asks; None when there is none.
    A queue at its share in a resource nobody contends is not made to move a pod to
    defragment a node (:func:`test_a_queue_at_its_share_is_not_moved_to_defragment_a_node`)."""
    prop = _proportion(session)
    mine = set(prop._paths[queue])
    for other in prop.attrs:
        if other in mine or not session.queue_tree.is_leaf(other):
            continue
        below = [q for q in prop._paths[other] if q not in mine]
        if not below or other in mine:
            continue
        for n in session.nodes.values():
            held = [
                t
                for t in n.tasks.values()
                if t.status in HOLDS_ROOM and session.jobs[t.job_id].queue == other
            ]
            idle = n.idle
            for chosen in _subsets(held):
                freed = Resource()
                for t in chosen:
                    freed = freed + t.request
                room = idle + freed
                if any(room[r] < amount for r, amount in waiting.request.items()):
                    continue
                if all(
                    prop.attrs[q].allocated[r] - freed[r] >= prop.attrs[q].deserved[r]
                    for q in below
                    for r in {*prop.contended, *waiting.request}
                    if freed[r] > 0
                ):
                    names = ", ".join(t.name for t in chosen)
                    return f"{other} could give {names} on {n.name}"
    return None


def check_no_queue_left_below_its_share(sim: Simulation) -> None:
    session = final_session(sim)
    prop = _proportion(session)
    for job in session.jobs.values():
        queue = session.queues[job.queue]
        for t in job.tasks.values():
            if t.status is not TaskStatus.PENDING or not prop.reclaims(queue, t):
                continue
            way = could_give(session, t, job.queue)
            attrs = {q: (dict(a.allocated), dict(a.deserved)) for q, a in prop.attrs.items()}
            assert way is None, (
                f"{t.name} waits, its queue {job.queue} below its share in "
                f"{sorted(prop.contended)}, while {way}; queues {attrs}; reason "
                f"{sim.result.pending.get(t.key)}"
            )


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_reclaim_is_max_min_fair_with_whole_pods(world: World) -> None:
    recorder = Recorder(world)
    sim = simulated.simulate(
        world.objects, on_cycle=recorder, on_store=recorder.attach, max_cycles=300
    )
    event(f"reclaims: {min(len(recorder.reclaims), 4)}{'+' if len(recorder.reclaims) > 3 else ''}")
    event(f"waiting at the end: {'yes' if sim.result.pending else 'no'}")
    assert sim.result.stopped_by == "idle", (world.summary, recorder.reclaims)
    again = reclaims_of_a_fresh_cycle(sim)
    check_nothing_reclaimed_back([*recorder.reclaims, *again], world.queue_of)
    assert again == [], (world.summary, recorder.reclaims, again)
    check_no_queue_left_below_its_share(sim)


def test_the_three_queues_of_issue_38() -> None:
    """Three queues of weight 1 share one node of 8 GPUs; q1 runs two 4-GPU pods, q2 and
    q3 each wait with one. Each deserves 2 or 3 GPUs: no 4-GPU pod fits inside a share,
    and before, nothing was reclaimed (q2 and q3 waited beside a queue at three times its
    share). Now one of them takes a pod of q1's (q1 stays above its share); the third
    queue waits: taking from q1 or q2 would leave it below its share by as much as it
    gains."""
    shape = Shape(0, 4)
    objects: list[Obj] = [node("n1", cpu="64", memory="256Gi", gpus=8)]
    objects += [queue(q) for q in ("q1", "q2", "q3")]
    objects += [_pod("q1-0", "q1", shape, "n1"), _pod("q1-1", "q1", shape, "n1")]
    objects += [_pod("q2-0", "q2", shape, None), _pod("q3-0", "q3", shape, None)]
    world = World(objects, {}, ["q1", "q2", "q3"], "issue 38")
    world.queue_of.update({p: p.split("-")[0] for p in ("q1-0", "q1-1", "q2-0", "q3-0")})
    recorder = Recorder(world)
    sim = simulated.simulate(objects, on_cycle=recorder, on_store=recorder.attach)
    assert recorder.reclaims == [("q1-0", "q2-0")]  # of two alike, the first by name
    assert sorted(sim.result.bindings) == ["default/q2-0"]
    assert "reclaim:" in sim.result.pending["default/q3-0"]
    again = reclaims_of_a_fresh_cycle(sim)
    check_nothing_reclaimed_back([*recorder.reclaims, *again], world.queue_of)
    assert again == []
    check_no_queue_left_below_its_share(sim)


def test_a_surplus_still_being_placed_is_reclaimed_once_bound() -> None:
    """Found by the property test at 600 examples. q2 and q3 reclaim all of q1's 1-GPU
    pods in one cycle (q1 deserves no GPU once shares are rounded to whole devices),
    q3 taking 4 GPUs where it deserves 3; q0's 1-GPU pod, tried last, finds no candidate:
    q3's pods are nominated, waiting for their victims. Once they are bound q3 is above
    its share by a pod of 2 and q0 below its share of 1. Before, q0's job stayed parked
    until the 5-minute retry (a bind frees no room); now it is tried again soon after,
    as for pods whose bind is in flight, and takes one of q3's pods."""
    gpu1, gpu2 = Shape(0, 1), Shape(1, 2)
    objects: list[Obj] = [node("n0", cpu="16", memory="64Gi", gpus=8)]
    objects += [queue("q0"), queue("q1"), queue("q2", deserved={GPU: "7"}), queue("q3", weight=3)]
    objects += [_pod("q0-0", "q0", gpu1, None)]
    objects += [_pod(f"q1-{k}", "q1", gpu1, "n0") for k in range(8)]
    objects += [_pod(f"q{q}-{k}", f"q{q}", gpu2, None) for q in (2, 3) for k in range(2)]
    queue_of = {
        o["metadata"]["name"]: o["metadata"]["name"][:2] for o in objects if o["kind"] == "Pod"
    }
    world = World(objects, queue_of, ["q0", "q1", "q2", "q3"], "parked behind a nomination")
    recorder = Recorder(world)
    sim = simulated.simulate(objects, on_cycle=recorder, on_store=recorder.attach)
    assert sim.result.stopped_by == "idle"
    assert ("q3-0", "q0-0") in recorder.reclaims or ("q3-1", "q0-0") in recorder.reclaims
    assert "default/q0-0" in sim.result.bindings
    assert reclaims_of_a_fresh_cycle(sim) == []
    check_no_queue_left_below_its_share(sim)


def test_two_reclaims_apart() -> None:
    """Found by the property test at 600 examples: q1 (8 pods of 1 GPU on 8 GPUs, deserving
    2) loses pods to q3 (pods of 2 GPUs, deserving 3: it ends with 4), to q2 (deserving
    its 2) and to q0 (a pod of 2; q0 deserves 2): its last two go, a trade of places at
    the bottom (q1 from its share to nothing, q0 from nothing to its share) that holds
    more within shares. Then a copy of a pod q1 lost to q3 takes one of q3's pods back:
    q1 gains its share and q3 stays above two thirds of its own, fairer than q1 with
    nothing. Not a loop: a third queue took from q1 in between (q0), and the queues
    never return to an allocation they had."""
    one, two, cpu_two = Shape(0, 1), Shape(0, 2), Shape(1, 2)
    objects: list[Obj] = [node("n0", cpu="16", memory="64Gi", gpus=8)]
    objects += [queue("q0"), queue("q1"), queue("q2", deserved={GPU: "7"}), queue("q3", weight=3)]
    objects += [_pod("q0-0", "q0", two, None)]
    objects += [_pod(f"q1-{k}", "q1", one, "n0") for k in range(8)]
    objects += [_pod(f"q2-{k}", "q2", Shape(1, 1), None) for k in range(2)]
    objects += [_pod(f"q3-{k}", "q3", cpu_two, None) for k in range(2)]
    queue_of = {
        o["metadata"]["name"]: o["metadata"]["name"][:2] for o in objects if o["kind"] == "Pod"
    }
    world = World(objects, queue_of, ["q0", "q1", "q2", "q3"], "two reclaims apart")
    recorder = Recorder(world)
    sim = simulated.simulate(objects, on_cycle=recorder, on_store=recorder.attach)
    assert sim.result.stopped_by == "idle"
    taken_back = recorder.reclaims.index(("q3-0", "q1-0"))
    assert (
        recorder.reclaims.index(("q1-0", "q3-0"))
        < recorder.reclaims.index(("q1-6", "q0-0"))
        < taken_back
    )
    again = reclaims_of_a_fresh_cycle(sim)
    check_nothing_reclaimed_back([*recorder.reclaims, *again], world.queue_of)
    assert again == []
    check_no_queue_left_below_its_share(sim)
    allocated = {
        q: a.allocated.get(GPU, 0) for q, a in _proportion(final_session(sim)).attrs.items()
    }
    assert allocated == {"default": 0, "q0": 2, "q1": 2, "q2": 2, "q3": 2}


def test_a_queue_at_its_share_is_not_moved_to_defragment_a_node() -> None:
    """Found by the property at ten times its examples (2026-11-29): q0's last pod (1 CPU,
    2 GPUs) waits below q0's CPU share; the node with CPU free has its GPUs held by q0's
    other pods and q2's 4-GPU pod, the other node has GPUs free but no CPU (q1's). GPUs
    are not contended (every queue deserves all it asks) and q2 holds exactly its share:
    evicting its pod would move it to the other node, a defragmentation no reclaim does
    (Sluice's and Volcano's proportion take only from a queue whose allocation exceeds
    its deserved share), and q1, below its CPU share, gives nothing. The pod waits."""
    data = json.loads((Path(__file__).parent / "fairness_defragment_world.json").read_text())
    world = World(data["objects"], data["queue_of"], data["leaves"], data["summary"])
    recorder = Recorder(world)
    sim = simulated.simulate(
        world.objects, on_cycle=recorder, on_store=recorder.attach, max_cycles=300
    )
    assert sim.result.stopped_by == "idle"
    assert "default/q0-2" in sim.result.pending
    assert not any(lineage(victim) == "q2-0" for victim, _ in recorder.reclaims)
    check_no_queue_left_below_its_share(sim)
