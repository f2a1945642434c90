"""The live page's data (issue 27 point 1): what a cycle leaves in the summary, what the
page's document says of queues, jobs, nodes and holds, that it is computed once per cycle,
and that an explanation runs off the event loop, once per job and cycle."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api import reasons
from scheduler.api.errors import InvalidInputError
from scheduler.api.holds import Hold, HoldKind, QueueView, Reservation
from scheduler.api.queue import QueueShare
from scheduler.api.resource import Resource
from scheduler.framework.effects import (
    Bind,
    Dissolution,
    Evict,
    EvictReason,
    Nominate,
    Preemption,
)
from scheduler.live import LivePage
from scheduler.live import service as live_service
from scheduler.live.state import page_state
from scheduler.live.summary import RECENT, LiveSummary
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.decisions import Decision, decisions_of
from tests.builders import HOSTNAME, ZONE, cache_with, node, pod, pod_group, queue
from tests.live.loops import loop_of, running
from tests.volume_builders import pv, pvc

pytestmark = pytest.mark.anyio


def _task(name: str, node_name: str = "") -> Any:
    cache = cache_with(pod(name, node=node_name or None))
    return cache.tasks[f"default/{name}"]


PRE, V1, V2, V3 = (_task(n) for n in ("pre", "v1", "v2", "v3"))
PRE2 = replace(_task("pre-2"), job_id=PRE.job_id)
"""Another member of the preemptor's gang."""


@pytest.mark.parametrize(
    ("effects", "decisions"),
    [
        (
            [
                Preemption(
                    (Nominate(PRE, "n1"),),
                    (
                        Evict(V1, "n1", EvictReason.PREEMPTED, PRE),
                        Evict(V2, "n1", EvictReason.PREEMPTED, PRE),
                    ),
                )
            ],
            [Decision("preempt", "default/pre", "n1", ("default/v1", "default/v2"))],
        ),
        (
            [Preemption((Nominate(PRE, "n2"),), (Evict(V1, "n1", EvictReason.RECLAIMED, PRE),))],
            [Decision("reclaim", "default/pre", "n2", ("default/v1",))],
        ),
        ([Preemption((Nominate(PRE, "n1"),))], []),  # waits for room already being released
        (
            [
                Preemption(
                    (Nominate(PRE, "n1"), Nominate(PRE2, "n2")),
                    (Evict(V1, "n1", EvictReason.PREEMPTED, PRE),),
                )
            ],
            [
                Decision("preempt", "default/pre", "n1", ("default/v1",)),
                Decision("preempt", "default/pre-2", "n2", ()),
            ],
        ),
        (
            [Dissolution("default/g", (Evict(V3, "n3", EvictReason.DISSOLVED),)), Bind(V2, "n2")],
            [Decision("dissolve", None, "n3", ("default/v3",))],
        ),
    ],
    ids=["preempt", "reclaim", "nomination-alone", "gang-member-with-none", "dissolution"],
)
def test_decisions_of_a_cycle(effects: list[Any], decisions: list[Decision]) -> None:
    assert decisions_of(effects) == decisions


def test_the_summary_keeps_the_last_cycle_that_ran_and_the_recent_decisions() -> None:
    summary = LiveSummary()
    for n in range(1, RECENT + 5):
        preemption = Preemption(
            (Nominate(PRE, "n1"),), (Evict(V1, "n1", EvictReason.PREEMPTED, PRE),)
        )
        report = CycleReport(n, float(n), effects=[preemption])
        report.task_reasons = {"default/p": reasons.nodes_unavailable(f"reason {n}")}
        summary.observe(report)
    assert len(summary.recent) == RECENT and summary.recent[-1].cycle == RECENT + 4
    failed = CycleReport(RECENT + 5, 99.0, failed="open")
    summary.observe(failed)
    assert summary.cycle == RECENT + 5 and summary.failed == "open"
    assert summary.task_reasons == {"default/p": reasons.nodes_unavailable(f"reason {RECENT + 4}")}


def _summary(**fields: Any) -> LiveSummary:
    s = LiveSummary(cycle=3)
    for k, v in fields.items():
        setattr(s, k, v)
    return s


def test_the_document_of_queues_jobs_nodes_and_holds() -> None:
    cache = cache_with(
        queue("org"),
        queue("team-a", parent="org", guarantee={"cpu": "1"}, capability={"cpu": "6"}),
        queue("team-b", parent="org"),
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod("run-a", cpu="2", node="n1", labels={L.QUEUE_LABEL: "team-a"}),
        pod("run-b", cpu="1", node="n2", labels={L.QUEUE_LABEL: "team-b"}),
        pod("lone", cpu="8", labels={L.QUEUE_LABEL: "team-a"}),
        pod_group("gang", min_member=2, queue="team-b"),
        pod("gang-0", cpu="3", group="gang"),
        pod("gang-1", cpu="3", group="gang", nominatedNodeName="n2"),
        pod("lost", labels={L.QUEUE_LABEL: "nowhere"}),
    )
    cache.tasks["default/gang-1"].nominated_node = "n2"
    share = QueueShare(Resource({"cpu": 3000}), Resource({"cpu": 2000}), 2 / 3)
    holds = {
        "default/gang": Hold(HoldKind.EVICTIONS, victims=frozenset({"u"}), calls_left=1),
        "default/lone": Hold(HoldKind.PARKED, told=reasons.gang_not_ready("too big"), until=130.0),
    }
    summary = _summary(
        task_reasons={
            "default/lone": reasons.nodes_unavailable(
                "0/2 nodes are available: 2 Insufficient cpu."
            )
        },
        job_reasons={
            "default/lone": reasons.gang_not_ready("0/1 tasks of gang default/lone ..."),
            "default/gang": reasons.gang_not_ready("no room"),
        },
        queue_view=QueueView(holds, Reservation("default/lone", 0, 1.0, frozenset({"n1"}))),
        queue_shares={"team-a": share},
    )
    doc = page_state(cache, summary, now=100.0)
    rows = {q["name"]: q for q in doc["queues"]}
    assert [(q["name"], q["depth"]) for q in doc["queues"][:4]] == [
        ("default", 0),
        ("org", 0),
        ("team-a", 1),
        ("team-b", 1),
    ]
    assert rows["org"]["allocated"] == {"cpu": "3", "memory": "200Mi", "pods": "2"}  # its leaves
    assert rows["team-a"]["deserved"] == {"cpu": "3"} and rows["team-a"]["share"] == 0.667
    assert rows["team-a"]["guarantee"] == {"cpu": "1"} and rows["team-a"]["capability"] == {
        "cpu": "6"
    }
    assert rows["team-b"]["capability"] is None
    [lone] = rows["team-a"]["jobs"]
    assert lone["reason"] == "0/2 nodes are available: 2 Insufficient cpu."  # the pod's own
    assert lone["hold"] == "parked" and lone["explain"] == {"kind": "pod", "name": "default/lone"}
    [gang] = rows["team-b"]["jobs"]
    assert gang["reason"] == "no room" and gang["hold"] == "evictions"  # the PodGroup's
    assert gang["pending"] == ["default/gang-0"] and gang["nominated"] == {"default/gang-1": "n2"}
    assert gang["explain"] == {"kind": "podgroup", "name": "default/gang"}
    assert (
        rows["nowhere"]["state"] == "Missing"
        and rows["nowhere"]["jobs"][0]["job"] == "default/lost"
    )
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["n1"]["used"]["cpu"] == "2" and nodes["n1"]["fractions"]["cpu"] == 0.5
    assert nodes["n1"]["reservedFor"] == "default/lone" and nodes["n2"]["reservedFor"] == ""
    assert nodes["n2"]["nominated"] == [
        {"pod": "default/gang-1", "job": "default/gang", "gated": True}
    ]
    assert {h["job"]: (h["kind"], h["endsIn"]) for h in doc["holds"]} == {
        "default/gang": ("evictions", None),
        "default/lone": ("parked", 30.0),
    }


async def test_the_page_is_computed_once_per_cycle_and_explains_off_the_eventloop_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = loop_of(node("n1", cpu="2"), pod("small", cpu="1"), pod("big", cpu="4"))
    page = LivePage(loop)
    async with running(loop):
        await _explained_once_per_cycle(loop, page, monkeypatch)


async def _explained_once_per_cycle(loop: Any, page: LivePage, monkeypatch: Any) -> None:
    await loop.run_cycle()
    first = page.state()
    assert page.state() is first and first["cycle"] == 1
    [big] = [j for q in first["queues"] for j in q["jobs"]]
    assert big["job"] == "default/big" and "Insufficient cpu" in big["reason"]
    threads: list[int] = []
    real = live_service.explain_snapshot

    def recorded(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(live_service, "explain_snapshot", recorded)
    answer = await page.explain("pod", "default/big")
    assert answer["pods"][0]["nodes"] == {"Insufficient cpu": ["n1"]}
    assert "hold" not in answer and answer["text"].startswith("pod default/big")
    assert await page.explain("pod", "default/big") is answer  # kept for the cycle
    assert threads and threads[0] != threading.get_ident()
    await loop.run_cycle()
    assert page.state() is not first and page.state()["cycle"] == 2
    again = await page.explain("pod", "default/big")
    assert len(threads) == 2  # asked afresh in a new cycle
    assert again["hold"]["kind"] == "parked"  # the second cycle's view holds it parked
    assert any(w.startswith("parked: tried and left unschedulable") for w in again["waits_for"])
    with pytest.raises(InvalidInputError, match="pod default/nope: not found"):
        await page.explain("pod", "default/nope")


async def test_an_explanation_leaves_the_next_cycle_as_it_would_be() -> None:
    objects = (node("n1", cpu="2"), pod("a", cpu="1"), pod("b", cpu="1"), pod("c", cpu="2"))
    alone, watched = loop_of(*objects), loop_of(*objects)
    page = LivePage(watched)
    async with running(alone, watched):
        for loop in (alone, watched):
            await loop.run_cycle()
        await page.explain("pod", "default/c")
        for loop in (alone, watched):
            loop.cache.handle("Pod", "DELETED", pod("a", cpu="1", node="n1"))
        second = [await loop.run_cycle() for loop in (alone, watched)]
    assert [(type(e).__name__, e.task.key) for e in second[0].effects] == [
        (type(e).__name__, e.task.key) for e in second[1].effects
    ]
    assert second[0].task_reasons == second[1].task_reasons


async def test_an_explanation_names_the_victims_a_preemption_would_take() -> None:
    loop = loop_of(
        node("n1", cpu="2"),
        pod("low", cpu="2", node="n1", priority=0),
        pod("high", cpu="2", priority=100),
    )
    page = LivePage(loop)  # before any cycle: the next one would preempt
    answer = await page.explain("pod", "default/high")
    [eviction] = answer["next_cycle"]["evictions"]
    assert eviction["node"] == "n1" and eviction["for"] == "default/high"
    assert [v["pod"] for v in eviction["victims"]] == ["default/low"]
    assert "Next cycle: preempted on node n1 for default/high: default/low" in answer["text"]


def test_without_cycles_the_page_is_computed_again_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica that does not lead runs no cycle; its page still follows its cache."""
    loop = loop_of(node("n1", cpu="2"))
    page = LivePage(loop)
    clock = [1000.0]
    monkeypatch.setattr(live_service.time, "monotonic", lambda: clock[0])
    first = page.state()
    loop.cache.handle("Node", "ADDED", node("n2", cpu="2"))
    assert page.state() is first
    clock[0] += live_service.STALE_AFTER + 0.1
    assert [n["name"] for n in page.state()["nodes"]] == ["n1", "n2"]


def test_each_node_shows_its_local_volumes_and_how_many_are_bound() -> None:
    """A PV only one node can use counts on that node (a hostname term, or any affinity
    that admits it alone); a zone's PV, admitting both nodes, counts nowhere."""
    cache = cache_with(
        node("n1", labels={HOSTNAME: "host-1", ZONE: "a"}),
        node("n2", labels={HOSTNAME: "host-2", ZONE: "a"}),
        pv(
            "local-1",
            affinity=[
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["host-1"]}]}
            ],
            claim="default/c",
        ),
        pv(
            "local-2",
            affinity=[
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["host-1"]}]}
            ],
        ),
        pv(
            "by-name",
            affinity=[
                {"matchExpressions": [{"key": HOSTNAME, "operator": "NotIn", "values": ["host-1"]}]}
            ],
        ),
        pv(
            "zonal",
            affinity=[{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}],
        ),
        pvc("c", volume="local-1", bound=True),
    )
    nodes = {n["name"]: n for n in page_state(cache, _summary(), now=0.0)["nodes"]}
    assert nodes["n1"]["localVolumes"] == {"total": 2, "bound": 1}
    assert nodes["n2"]["localVolumes"] == {"total": 1, "bound": 0}
