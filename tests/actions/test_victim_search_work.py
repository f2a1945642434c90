"""The gang victim search does no work that cannot succeed (found by issue 26's soak).

The soak's reclaim took 2 to 11 s a cycle on 12 nodes: a gang of three pods whose queue
had room within its share for one more pod only was made room for by trying every set of
the ten pods of its own above the other queue's share (1,024 sets, a dry run of allocate
each), although no set could do: the queue, not the nodes, refuses the gang. The search
now asks first whether the gang fits with every candidate of the domain gone; eviction
never makes a gang fit that does not fit then, so when it does not, nothing is tried.

The work is counted (dry runs of allocate), not timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions.victims.gang import GangSearch
from scheduler.api import labels as L
from scheduler.config import SchedulerConfiguration
from tests.actions.test_preempt import decide, evicted, nominated
from tests.builders import node, pod, pod_group, queue

Obj = dict[str, Any]
RECLAIM = SchedulerConfiguration(actions=("enqueue", "allocate", "reclaim"))


def world(gang_size: int) -> list[Obj]:
    """Three nodes of 4 CPU, full: queue ``b`` (deserving 2 CPU) runs ten one-CPU pods of
    its own, queue ``a`` (deserving 4) runs two; ``a``'s gang of ``gang_size`` one-CPU pods
    waits. ``a`` has room within its share for two more pods."""
    objects: list[Obj] = [queue("a", deserved={"cpu": "4"}), queue("b", deserved={"cpu": "2"})]
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


@pytest.fixture
def dry_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the search's dry runs of allocate (``GangSearch._place``)."""
    count = [0]
    place = GangSearch._place

    def counted(self: GangSearch, *args: Any) -> bool:
        count[0] += 1
        return place(self, *args)

    monkeypatch.setattr(GangSearch, "_place", counted)
    return count


def test_a_gang_its_queue_cannot_take_is_not_searched_for(dry_runs: list[int]) -> None:
    session = decide(world(gang_size=3), RECLAIM)
    assert evicted(session) == []
    assert dry_runs[0] <= 2, f"{dry_runs[0]} dry runs for a gang no eviction can place"


def test_a_gang_its_queue_can_take_is_still_made_room_for(dry_runs: list[int]) -> None:
    session = decide(world(gang_size=2), RECLAIM)
    assert sorted(evicted(session)) == ["b0", "b1"]
    assert nominated(session) == {"g0": "n0", "g1": "n0"}
