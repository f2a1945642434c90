"""The gang victim search does no work that cannot succeed (found by issue 26's soak).

The soak's reclaim took 2 to 11 s a cycle on 12 nodes: a gang of three pods whose queue
had room for one more pod only was made room for by trying every set of
the ten pods of its own above the other queue's share (1,024 sets, a dry run of allocate
each), although no set could do: the queue, not the nodes, refuses the gang. The search now
asks whether the gang fits with every candidate of the domain gone (eviction never makes
a gang fit that does not fit then, so when it does not, nothing more is tried), before
any search over many sets, and when its greedy fill has found room on the nodes that
still does not fit; not before a fill that fits at its first try (that question cost the
gang-preemption benchmark half its speed: 2,500 evictions rolled back per gang).

The work is counted (dry runs of allocate), not timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions.victims import gang_dry_run, gang_search
from scheduler.actions.victims.gang_search import GangSearch
from scheduler.api import labels as L
from scheduler.config import SchedulerConfiguration
from tests.actions.test_preempt import decide, evicted, nominated
from tests.builders import node, pod, pod_group, queue

Obj = dict[str, Any]
RECLAIM = SchedulerConfiguration(actions=("enqueue", "allocate", "reclaim"))


def world(gang_size: int) -> list[Obj]:
    """Three nodes of 4 CPU, full: queue ``b`` (deserving 2 CPU) runs ten one-CPU pods of
    its own, queue ``a`` (deserving 4, capable of 4) runs two; ``a``'s gang of
    ``gang_size`` one-CPU pods waits. ``a``'s capability has room for two more pods (a
    gang larger than what is left of its share alone could reclaim: the capability
    is what refuses it)."""
    objects: list[Obj] = [
        queue("a", deserved={"cpu": "4"}, capability={"cpu": "4"}),
        queue("b", deserved={"cpu": "2"}),
    ]
    objects += [node(f"n{i}", cpu="4") for i in range(3)]
    placed = [("a", 2), ("b", 10)]
    slot = 0
    for name, count in placed:
        for i in range(count):
            objects.append(
                pod(
                    f"{name}{i}",
                    cpu="1",
                    memory=None,
                    node=f"n{slot // 4}",
                    labels={L.QUEUE_LABEL: name},
                )
            )
            slot += 1
    objects.append(pod_group("g", min_member=gang_size, queue="a"))
    objects += [pod(f"g{i}", cpu="1", memory=None, group="g") for i in range(gang_size)]
    return objects


def _counting(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """Counts the calls of ``GangSearch.<method>`` (in the list's one item)."""
    count = [0]
    original = getattr(GangSearch, method)

    def counted(self: GangSearch, *args: Any, **kwargs: Any) -> bool:
        count[0] += 1
        return bool(original(self, *args, **kwargs))

    monkeypatch.setattr(GangSearch, method, counted)
    return count


@pytest.fixture
def dry_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the search's dry runs of allocate (``gang_dry_run.place``, wherever it is
    called from: the dry run's own module and the search's)."""
    count = [0]
    original = gang_dry_run.place

    def counted(*args: Any, **kwargs: Any) -> bool:
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(gang_dry_run, "place", counted)
    monkeypatch.setattr(gang_search, "place", counted)
    return count


def test_a_gang_its_queue_cannot_take_is_not_searched_for(dry_runs: list[int]) -> None:
    session = decide(world(gang_size=3), RECLAIM)
    assert evicted(session) == []
    assert dry_runs[0] <= 2, f"{dry_runs[0]} dry runs for a gang no eviction can place"


def test_a_gang_its_queue_can_take_is_still_made_room_for(dry_runs: list[int]) -> None:
    session = decide(world(gang_size=2), RECLAIM)
    assert sorted(evicted(session)) == ["b0", "b1"]
    assert nominated(session) == {"g0": "n0", "g1": "n0"}


@pytest.fixture
def hopeless_asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the dry runs with every candidate gone (``GangSearch._fits_without_all``)."""
    return _counting(monkeypatch, "_fits_without_all")


def test_a_gang_the_greedy_fill_places_never_pays_for_the_question(
    hopeless_asked: list[int], dry_runs: list[int]
) -> None:
    """Twelve nodes, each full with a low gang of four one-CPU pods (twelve gangs to break:
    beyond every-set search); a high gang of two node-sized pods. The greedy fill breaks
    two gangs and the gang fits at its first dry run: the question whether it would fit
    with all twelve gangs gone (48 evictions rolled back; 2,500 per gang in the
    gang-preemption benchmark, which it halved) is never asked."""
    objects: list[Obj] = [node(f"n{i}", cpu="4") for i in range(12)]
    for i in range(12):
        objects.append(pod_group(f"low{i}", min_member=4, phase="Running"))
        objects += [
            pod(f"low{i}-{k}", cpu="1", memory=None, node=f"n{i}", group=f"low{i}")
            for k in range(4)
        ]
    objects.append(pod_group("high", min_member=2))
    objects += [
        pod(f"high-{k}", cpu="4", memory=None, group="high", priority=100) for k in range(2)
    ]
    session = decide(objects)
    assert len(evicted(session)) == 8
    assert sorted(nominated(session)) == ["high-0", "high-1"]
    assert hopeless_asked[0] == 0
    assert dry_runs[0] <= 2


def test_a_greedy_fill_that_finds_room_but_no_fit_asks_once(
    hopeless_asked: list[int], dry_runs: list[int]
) -> None:
    """Queue ``b`` (deserving 4 CPU) fills twelve nodes with twelve gangs of four one-CPU
    pods: eleven may be taken, beyond every-set search; queue ``a`` (deserving 4, capable
    of 4) runs one CPU on a thirteenth node and waits with a gang of two 2-CPU pods: its
    capability has room for one of them only. Once the greedy fill has broken a gang the
    nodes have room for both, the dry run fails, and the question, asked then, ends the
    search: no eviction, and not a dry run per gang."""
    objects: list[Obj] = [
        queue("a", deserved={"cpu": "4"}, capability={"cpu": "4"}),
        queue("b", deserved={"cpu": "4"}),
    ]
    objects += [node(f"n{i}", cpu="4") for i in range(13)]
    for i in range(12):
        objects.append(pod_group(f"b{i}", min_member=4, phase="Running", queue="b"))
        objects += [
            pod(f"b{i}-{k}", cpu="1", memory=None, node=f"n{i}", group=f"b{i}") for k in range(4)
        ]
    objects.append(pod("a-running", cpu="1", memory=None, node="n12", labels={L.QUEUE_LABEL: "a"}))
    objects.append(pod_group("g", min_member=2, queue="a"))
    objects += [pod(f"g{i}", cpu="2", memory=None, group="g") for i in range(2)]
    session = decide(objects, RECLAIM)
    assert evicted(session) == []
    assert hopeless_asked[0] == 1
    assert dry_runs[0] <= 2
