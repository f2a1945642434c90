"""Parking (issue 16 point 2): an unschedulable job is not searched again until something
that could help it happens, and says the same thing meanwhile.

Through the real loop on the embedded cluster and the virtual clock: a gang that can never
fit beside a cluster that is full, and the searches made for it counted cycle by cycle
(the gang search of the preempt action is where an idle cluster spent its CPU).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions import allocate
from scheduler.api import labels as L
from scheduler.api import reasons
from scheduler.framework.awaited_pods import PlacedPod
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.queue.parking import Parking
from scheduler.sim.runner import Simulation
from tests import simulated
from tests.builders import cached_session

Obj = dict[str, Any]


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


def pod(
    name: str, cpu: str, *, group: str | None = None, on: str | None = None, **annotations: str
) -> Obj:
    """A pod; ``on`` runs it on that node; ``annotations`` are the simulator's
    (``arrival="20s"``, ``departure="30s"``)."""
    meta: Obj = {"name": name, "namespace": "default"}
    if group:
        meta["labels"] = {L.POD_GROUP_LABEL: group}
    if annotations:
        meta["annotations"] = {f"sim.sluice.dev/{k}": v for k, v in annotations.items()}
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": L.SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
    }
    if on is not None:
        obj["spec"]["nodeName"] = on
        obj["status"] = {"phase": "Running"}
    return obj


def group(name: str, members: int) -> Obj:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": members},
    }


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The virtual time of every attempt to place the gang ``big`` (allocate's)."""
    made: list[float] = []
    original = allocate.place_job

    def counting(session: Any, queue: Any, job: Any, *args: Any, **kw: Any) -> Any:
        if job.uid == "default/big":
            made.append(session.now)
        return original(session, queue, job, *args, **kw)

    monkeypatch.setattr(allocate, "place_job", counting)
    return made


def simulate(objects: list[Obj], until: float, reports: list[CycleReport]) -> Simulation:
    def keep(report: CycleReport, fresh: list[dict[str, Any]]) -> None:
        del fresh
        reports.append(report)

    return simulated.simulate(objects, on_cycle=keep, until=until)


def full_cluster() -> list[Obj]:
    # Two full nodes of pods of the gang's priority (0): no victim anywhere.
    return [
        node("n0"),
        node("n1"),
        # (each ends after 100 s: the run goes on, a cycle a second, until then)
        *(pod(f"run-{i}", "1", on=f"n{i % 2}", **{"run-for": "100s"}) for i in range(8)),
        group("big", 2),
        *(pod(f"big-{i}", "4", group="big") for i in range(2)),
    ]


def test_a_parked_gang_is_not_searched_while_nothing_changes(searches: list[float]) -> None:
    reports: list[CycleReport] = []
    simulate(full_cluster(), until=60.0, reports=reports)
    # tried once (the cycle that found it unschedulable), then parked: the running pods
    # and the cluster do not change for 60 s, though a cycle runs every second
    assert searches == [0.0], searches
    # and it says the same thing all along
    reasons = {r.task_reasons.get("default/big-0") for r in reports if r.number > 3}
    assert len(reasons) == 1 and None not in reasons, reasons


def test_a_pod_that_leaves_wakes_the_parked_gang(searches: list[float]) -> None:
    objects = full_cluster()
    objects[2]["metadata"]["annotations"]["sim.sluice.dev/departure"] = "30s"
    reports: list[CycleReport] = []
    simulate(objects, until=60.0, reports=reports)
    assert searches[0] == 0.0 and len(searches) == 2 and 30.0 <= searches[1] <= 31.0, searches


def test_a_new_member_wakes_its_own_gang_only() -> None:
    """A gang waiting for its members (fewer pods than minMember) is parked; the last
    member arriving lets it go, and it is bound at once."""
    objects = [
        node("n0"),
        group("g", 3),
        pod("g-0", "1", group="g"),
        pod("g-1", "1", group="g"),
        pod("g-2", "1", group="g", arrival="20s"),
    ]
    reports: list[CycleReport] = []
    sim = simulate(objects, until=30.0, reports=reports)
    assert sim.result.bindings.get("default/g-0") == "n0"
    bound = next(e["t"] for e in sim.result.timeline if e["event"] == "bind")
    assert 20.0 <= bound <= 21.0, bound


@pytest.mark.parametrize(
    ("generation", "fresh", "now", "parked"),
    [
        pytest.param(5, set(), 10.0, True, id="nothing-changed"),
        pytest.param(6, set(), 10.0, False, id="the-cluster-changed"),
        pytest.param(5, {"default/big"}, 10.0, False, id="a-new-pod-of-its-own"),
        pytest.param(5, {"default/other"}, 10.0, True, id="a-new-pod-of-another-job"),
        pytest.param(5, set(), 305.0, False, id="five-minutes-passed"),
    ],
)
def test_when_parking_ends(generation: int, fresh: set[str], now: float, parked: bool) -> None:
    objects = [
        {**node("n0"), "metadata": {"name": "n0"}},
        {**group("big", 2), "metadata": {"name": "big", "namespace": "default"}},
        pod("big-0", "8", group="big"),
        pod("big-1", "8", group="big"),
    ]
    session = cached_session(objects)
    big = session.jobs["default/big"]
    session.record_job_reason(big, reasons.gang_not_ready("too big"))
    for t in big.tasks.values():
        told = reasons.nodes_unavailable("0/1 nodes are available: 1 Insufficient cpu.")
        session.record_task_reason(t, told)
    parking = Parking()
    parking.after_cycle(session, {}, generation=5, now=5.0)
    view = parking.holds(generation, fresh, now)
    assert ("default/big" in view) is parked
    if parked:
        assert view["default/big"].told == reasons.gang_not_ready("too big")
        assert {r.message for r in view["default/big"].task_reasons.values()} == {
            "0/1 nodes are available: 1 Insufficient cpu."
        }


def near_web(name: str, **annotations: str) -> Obj:
    """A pod that must run in the zone of a pod labelled app=web (required podAffinity)."""
    obj = pod(name, "1", **annotations)
    obj["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
    }
    return obj


def labelled(obj: Obj, **labels: str) -> Obj:
    obj["metadata"]["labels"] = labels
    return obj


PLACED_WEB = ("default", {"app": "web"})


@pytest.mark.parametrize(
    ("spec", "placed", "parked"),
    [
        pytest.param("affinity", (), True, id="affinity-nothing-placed"),
        pytest.param("affinity", (PLACED_WEB,), False, id="affinity-its-pod-placed"),
        pytest.param("affinity", (("other", {"app": "web"}),), True, id="affinity-other-ns"),
        pytest.param("affinity", (("default", {"app": "db"}),), True, id="affinity-other-pod"),
        pytest.param("affinity", None, False, id="affinity-too-many-to-tell"),
        pytest.param("spread", (PLACED_WEB,), False, id="hard-spread-its-pod-placed"),
        pytest.param("spread", (("default", {"app": "db"}),), True, id="spread-other-pod"),
        pytest.param("soft-spread", (PLACED_WEB,), True, id="soft-spread-waits-for-none"),
        pytest.param("anti", (PLACED_WEB,), True, id="anti-affinity-a-pod-placed"),
        pytest.param(
            "anti", (("default", {"app": "db"}, {"app": "web"}),), False, id="anti-relabelled-out"
        ),
        pytest.param(
            "anti", (("default", {"app": "web"}, {"app": "db"}),), True, id="anti-relabelled-in"
        ),
        pytest.param("none", None, True, id="no-constraint-waits-for-none"),
    ],
)
def test_placed_pods_end_the_parking_of_those_that_wait_for_them(
    spec: str, placed: tuple[tuple[Any, ...], ...] | None, parked: bool
) -> None:
    web = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    waiting = labelled(pod("p", "8"), app="web")
    if spec == "affinity":
        waiting["spec"]["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [web]}
        }
    elif spec == "anti":
        waiting["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [web]}
        }
    elif spec in ("spread", "soft-spread"):
        when = "DoNotSchedule" if spec == "spread" else "ScheduleAnyway"
        waiting["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "whenUnsatisfiable": when, **web}
        ]
    session = cached_session([node("n0"), waiting])
    job = session.jobs["default/p"]
    for t in job.tasks.values():
        session.record_task_reason(t, reasons.nodes_unavailable("0/1 nodes are available."))
    parking = Parking()
    parking.after_cycle(session, {}, generation=5, now=5.0)
    pods = None if placed is None else tuple(PlacedPod(*p) for p in placed)
    assert ("default/p" in parking.holds(5, set(), 10.0, pods)) is parked
    # news seen once stays seen: the next view (nothing placed since) does not park it again
    assert ("default/p" in parking.holds(5, set(), 11.0, ())) is parked


def test_news_during_a_round_lets_the_job_go_when_the_round_ends() -> None:
    waiting = near_web("p")
    session = cached_session([node("n0"), waiting])
    for t in session.jobs["default/p"].tasks.values():
        session.record_task_reason(t, reasons.nodes_unavailable("0/1 nodes are available."))
    session.deferred.add("default/later")  # the cycle ran out of time: its round goes on
    parking = Parking()
    parking.after_cycle(session, {}, generation=5, now=5.0)
    assert "default/p" in parking.holds(5, set(), 6.0, (PlacedPod("default", {"app": "web"}),))
    closing = cached_session([node("n0"), near_web("p")])  # the round's end: none deferred
    parking.after_cycle(closing, {}, generation=5, now=6.0)
    assert "default/p" not in parking.holds(5, set(), 7.0, ())
