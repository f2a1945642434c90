"""Gang-aware eviction (issue 12), on generated clusters: invariants of the domain-wide
search that makes room for a gang preemptor, checked against an exhaustive search.

A cluster is 1-4 nodes of 2-4 CPU, filled by up to five running low-priority jobs (gangs
of 1-3 one-CPU members with a minMember of 1 to their size, or pods of their own) and
some free room; a high-priority gang of 2-4 members of one size (1 or 2 CPU) arrives.
One cycle of enqueue, allocate and preempt decides. Because the preemptor's members are
of one size, whether it fits is a count (each node holds ``free // size`` of them), so
the checks below need nothing of the scheduler's. Then:

- no victim has the preemptor's priority or more;
- when something is evicted, every member of the gang is nominated, and the nominations
  fit with the pods left (no node over its CPU);
- the victim set is minimal: putting back any one victim taken as a gang's surplus (a
  Safe bundle), or every victim of a gang broken (its Whole bundle, a unit), or a pod of
  its own, makes the gang not fit;
- priority first: the highest priority among the victims is the lowest an exhaustive
  search over every choice of victims finds (no choice that makes room takes only pods
  of lower priority), as kube-scheduler's choice of node takes the lowest highest-victim
  priority before the fewest victims (seed 001: preemption never trades priority for
  efficiency); then, among the choices of that priority, the number of jobs broken
  (gangs taken below their minimum, pods of their own) is the least; nothing is evicted
  when no choice makes room.

The scenarios ``tests/scenarios/gang_evict_*.yaml`` show the choices one by one.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.framework.effects import Evict, Nominate, VictimBundle, parts
from tests.actions.test_preempt import NO_PROPORTION, decide
from tests.builders import node, pod, pod_group

Obj = dict[str, Any]
HIGH = 10


@dataclass
class Job:
    name: str
    members: list[tuple[str, str]]
    """(pod name, node) of each running member."""
    min_member: int
    lone: bool = False
    priority: int = 1

    @property
    def spare(self) -> int:
        """Members that can go without breaking it (none for a pod of its own)."""
        return 0 if self.lone else len(self.members) - self.min_member


@dataclass
class World:
    capacity: dict[str, int]
    jobs: list[Job]
    size: int
    members: int
    objects: list[Obj] = field(default_factory=list, repr=False)

    def fits(self, evicted: set[str]) -> bool:
        """Do the preemptor's members fit once ``evicted`` (pod names) are gone?"""
        used: Counter[str] = Counter()
        for job in self.jobs:
            for name, where in job.members:
                if name not in evicted:
                    used[where] += 1
        room = sum((cap - used[n]) // self.size for n, cap in self.capacity.items())
        return room >= self.members


@st.composite
def worlds(draw: st.DrawFn) -> World:
    capacity = {
        f"n{i}": draw(st.sampled_from([2, 3, 4]), label="cpu")
        for i in range(draw(st.integers(1, 4), label="nodes"))
    }
    free = dict(capacity)
    jobs: list[Job] = []
    for j in range(draw(st.integers(1, 5), label="jobs")):
        lone = draw(st.integers(0, 3), label="lone?") == 0
        size = 1 if lone else draw(st.integers(1, 3), label="gang size")
        members: list[tuple[str, str]] = []
        for m in range(size):
            open_nodes = [n for n, f in free.items() if f > 0]
            if not open_nodes:
                break
            where = draw(st.sampled_from(open_nodes), label="where")
            free[where] -= 1
            members.append((f"j{j}-{m}", where))
        if not members:
            break
        min_member = 1 if lone else draw(st.integers(1, len(members)), label="minMember")
        jobs.append(Job(f"j{j}", members, min_member, lone))
    world = World(
        capacity,
        jobs,
        size=draw(st.sampled_from([1, 2]), label="preemptor size"),
        members=draw(st.integers(2, 4), label="preemptor members"),
    )
    objects: list[Obj] = [node(n, cpu=str(c), pods=50) for n, c in capacity.items()]
    for job in jobs:
        job.priority = prio = draw(st.integers(1, 3), label="low priority")
        if not job.lone:
            objects.append(pod_group(job.name, min_member=job.min_member, phase="Running"))
        for i, (name, where) in enumerate(job.members):
            p = pod(name, cpu="1", node=where, priority=prio, group=None if job.lone else job.name)
            p["status"]["startTime"] = f"2026-01-01T00:00:{i:02d}Z"
            objects.append(p)
    objects.append(pod_group("high", min_member=world.members))
    for i in range(world.members):
        objects.append(pod(f"high-{i}", cpu=str(world.size), priority=HIGH, group="high"))
    world.objects = objects
    return world


NONE = 0
"""The highest victim priority of a choice that evicts nothing (below every priority)."""


def choices(world: World) -> list[tuple[int, int]]:
    """(highest victim priority, jobs broken) of every choice of victims that lets the
    gang fit, sorted. Each job gives up any of its members up to its spare count, or all
    of them (broken)."""
    options: list[list[tuple[frozenset[str], int, int]]] = []
    for job in world.jobs:
        names = [n for n, _ in job.members]
        job_options = [
            (frozenset(c), 0, job.priority if c else NONE)
            for k in range(job.spare + 1)
            for c in itertools.combinations(names, k)
        ]
        if job.spare < len(names):
            job_options.append((frozenset(names), 1, job.priority))
        options.append(job_options)
    found: set[tuple[int, int]] = set()
    for combo in itertools.product(*options):
        cost = (max(top for _, _, top in combo), sum(b for _, b, _ in combo))
        if cost not in found and world.fits(set().union(*(c for c, _, _ in combo))):
            found.add(cost)
    return sorted(found)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_gang_eviction_invariants(world: World) -> None:
    session = decide(world.objects, config=NO_PROPORTION)
    evictions = [e for e in parts(session.effects) if isinstance(e, Evict)]
    nominations = {e.task.name: e.node for e in parts(session.effects) if isinstance(e, Nominate)}
    evicted = {e.task.name for e in evictions}
    priority = {t.name: t.priority for j in session.jobs.values() for t in j.tasks.values()}

    assert all(priority[e.task.name] < HIGH for e in evictions)
    if world.fits(set()):
        assert not evictions, "the gang fits without evicting anything"
        return
    possible = choices(world)
    if not possible:
        assert not evictions, "nothing can make room, yet pods were evicted"
        return
    assert evictions, f"a choice of victims {possible[0]} makes room, none was made"

    # Every member nominated, and the nominations fit with what is left.
    assert sorted(nominations) == [f"high-{i}" for i in range(world.members)]
    used: Counter[str] = Counter()
    for job in world.jobs:
        for name, where in job.members:
            if name not in evicted:
                used[where] += 1
    for where in nominations.values():
        used[where] += world.size
    assert all(used[n] <= cap for n, cap in world.capacity.items()), (used, world.capacity)

    # Minimal: each unit put back makes the gang not fit.
    units: list[set[str]] = []
    whole: dict[str, set[str]] = defaultdict(set)
    for e in evictions:
        if e.bundle is VictimBundle.WHOLE:
            whole[e.task.job_id].add(e.task.name)
        else:
            units.append({e.task.name})
    units.extend(whole.values())
    for unit in units:
        assert not world.fits(evicted - unit), f"{sorted(unit)} need not have been evicted"

    # Priority first: no choice that makes room breaking no more jobs takes only victims
    # of lower priority; and the least (priority, jobs broken) an exhaustive search finds.
    top = max(priority[name] for name in evicted)
    broken = len(whole) + sum(1 for e in evictions if e.bundle is VictimBundle.POD)
    lower = [c for c in possible if c[0] < top and c[1] <= broken]
    assert not lower, f"victims up to priority {top} breaking {broken}; {lower[0]} would do"
    assert (top, broken) == possible[0], f"(priority, broken) {(top, broken)}; {possible[0]}"
