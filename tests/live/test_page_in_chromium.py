"""The live page of ``sluice simulate --serve`` in headless Chromium (issue 27 point 1):
the example cluster of ``examples/live`` runs on the real clock (grace periods and
deletions shortened), the page is opened while it runs and read back from the browser's
DOM: it redraws by itself as the preemption's gate closes and opens, and once the run
settles it shows what the embedded API server holds (queue status, pod and PodGroup
conditions, the pods on each node, DRA allocations, the pods evicted). A click on the
pending gang shows its ``explain``; a pod created afterwards appears without a reload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from scheduler import app
from scheduler.live import LivePage
from scheduler.live.page_server import serve_page
from scheduler.logging import quiet
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import load_scenario
from tests.browser import CHROMIUM, Page, chromium

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install chromium`"),
]

EXAMPLE = Path(__file__).parents[2] / "examples" / "live" / "cluster.yaml"

ROWS = """(() => {
  const text = (r, c) => (r.querySelector(c) || {textContent: ""}).textContent;
  return {
    cycle: Number(document.getElementById("status").dataset.cycle || -1),
    queues: [...document.querySelectorAll("#queues tr.queue")].map((r) => ({
      name: r.dataset.queue, deserved: text(r, ".deserved"), allocated: text(r, ".allocated"),
      guarantee: text(r, ".guarantee"), capability: text(r, ".capability")})),
    jobs: [...document.querySelectorAll("#queues tr.job")].map((r) => ({
      job: r.dataset.job, queue: r.dataset.queue, reason: text(r, ".reason .why"),
      hold: text(r, ".held")})),
    nodes: [...document.querySelectorAll("#nodes tr.node")].map((r) => ({
      name: r.dataset.node, cpu: text(r, ".cpu"), devices: text(r, ".devices"),
      nominated: text(r, ".nominated")})),
    holds: [...document.querySelectorAll("#holds tr.hold")].map((r) => ({
      job: r.dataset.job, kind: text(r, ".kind")})),
    decisions: [...document.querySelectorAll("#decisions tr.decision")].map((r) => ({
      kind: text(r, ".kind"), pod: text(r, ".pod"), victims: text(r, ".victims")})),
  };
})()"""


def _scenario(tmp_path: Path) -> Path:
    """The example, faster: victims go 1 s after their deletion, which takes 0.5 s."""
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for doc in docs:
        for obj in doc.get("items", [doc]):
            if obj.get("kind") == "Pod":
                obj["spec"]["terminationGracePeriodSeconds"] = 1
            if obj.get("kind") == "Simulation":
                obj["apiLatency"] = {"delete": "0.5s"}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def quantities(text: str) -> dict[str, str]:
    """``cpu 4, pods 2`` (a page's cell) as a map; ``—`` is empty."""
    if text in ("—", ""):
        return {}
    return dict(part.split(" ", 1) for part in text.split(", "))


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"].get("conditions") or () if c["type"] == kind)


def _cpu_milli(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


async def test_the_page_shows_what_the_api_shows(tmp_path: Path) -> None:
    quiet()
    resolved = app.resolve()
    sim = Simulation(
        load_scenario([str(_scenario(tmp_path))]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        real_time=True,
        until=120.0,
    )
    settled: list[SimulationResult] = []
    sim.serving = True
    sim.on_settled = settled.append
    page = LivePage(sim.loop)
    async with (
        serve_page(page) as url,
        chromium() as browser,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(sim.run)
        async with browser.open(f"{url}?refresh=1") as tab:
            # while it runs: the trainer waits behind its preemption's gate, and the page
            # redraws by itself as the gate closes (nothing reloads it)
            await tab.wait_for(
                "[...document.querySelectorAll('#holds tr.hold')].some("
                "r => r.dataset.job === 'team-a/trainer' && r.textContent.includes('evictions'))"
            )
            gpu = await tab.wait_for(
                "[...document.querySelectorAll('#nodes tr.node')].find("
                "r => r.dataset.node === 'gpu-0' && r.textContent.includes('team-a/trainer "
                "(behind its gate)'))?.textContent"
            )
            assert "team-a/trainer" in gpu
            with anyio.fail_after(60):
                while not settled:
                    await anyio.sleep(0.1)
            settled_at = sim.loop.cycles
            await tab.wait_for(
                f"Number(document.getElementById('status').dataset.cycle) > {settled_at}"
            )
            shown = await tab.evaluate(ROWS)
            _check_against_the_api(sim, shown)
            await _check_explain(tab)
            # a pod created now appears without a reload
            sim.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": "late",
                        "namespace": "team-b",
                        "labels": {"scheduling.sluice.dev/queue": "eng-b"},
                    },
                    "spec": {
                        "schedulerName": "sluice",
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "64"}}}
                        ],
                    },
                }
            )
            sim.loop.wake()
            await tab.wait_for(
                "!!document.querySelector('#queues tr.job[data-job=\"team-b/late\"]')"
            )
            shot = tmp_path / "live.png"
            await tab.screenshot(str(shot))
            assert shot.stat().st_size > 10_000
        sim.loop.stop()
        tg.cancel_scope.cancel()


def _check_against_the_api(sim: Simulation, shown: dict[str, Any]) -> None:
    store = sim.store
    queues, _ = store.list("Queue")
    rows = {q["name"]: q for q in shown["queues"]}
    assert set(rows) == {q["metadata"]["name"] for q in queues}
    for q in queues:
        row, status = rows[q["metadata"]["name"]], q["status"]
        assert quantities(row["deserved"]) == status["deserved"], q["metadata"]["name"]
        assert quantities(row["allocated"]) == status["allocated"], q["metadata"]["name"]
    assert quantities(rows["eng-a"]["guarantee"]) == {"cpu": "3"}
    assert quantities(rows["research"]["capability"]) == {"cpu": "9"}
    assert rows["eng"]["capability"] == "unbounded"

    jobs = {j["job"]: j for j in shown["jobs"]}
    pods, _ = store.list("Pod")
    pending = [
        p
        for p in pods
        if p["spec"].get("schedulerName") == "sluice" and not p["spec"].get("nodeName")
    ]
    assert pending, "the example leaves pods pending"
    for p in pending:
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        message = _condition(p, "PodScheduled")["message"]
        group = (p["metadata"].get("labels") or {}).get("scheduling.sluice.dev/pod-group")
        if group:
            [pg] = [g for g in store.list("PodGroup")[0] if g["metadata"]["name"] == group]
            job = jobs[f"{p['metadata']['namespace']}/{group}"]
            assert job["reason"] == _condition(pg, "Unschedulable")["message"]
        else:
            assert jobs[key]["reason"] == message, key

    nodes = {n["name"]: n for n in shown["nodes"]}
    for node in store.list("Node")[0]:
        name = node["metadata"]["name"]
        used = sum(
            _cpu_milli(c["resources"]["requests"]["cpu"])
            for p in pods
            if p["spec"].get("nodeName") == name
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            for c in p["spec"]["containers"]
        )
        shown_used = nodes[name]["cpu"].split(" / ")[0]
        assert _cpu_milli(shown_used) == used, (name, nodes[name])
    claims, _ = store.list("ResourceClaim")
    allocated = sum(
        len(c["status"]["allocation"]["devices"]["results"])
        for c in claims
        if (c.get("status") or {}).get("allocation")
    )
    assert nodes["gpu-0"]["devices"] == f"{allocated} / 2"

    evicted = {v for d in shown["decisions"] for v in d["victims"].split(", ") if v}
    assert evicted == set(sim.result.evictions)
    assert {d["kind"] for d in shown["decisions"]} == {"preempt", "reclaim"}
    assert {d["pod"] for d in shown["decisions"]} == {"team-a/trainer", "team-b/notebook"}


async def _check_explain(tab: Page) -> None:
    await tab.click("#queues tr.job[data-job='research/sweep'] a.explain-link")
    await tab.wait_for(
        "document.getElementById('explain').dataset.loaded === 'podgroup:research/sweep'"
    )
    explained = json.loads(
        await tab.evaluate(
            "JSON.stringify({hash: location.hash, "
            "rows: [...document.querySelectorAll('#explain tr.node-reason')]"
            ".map(r => r.textContent), "
            "text: document.querySelector('#explain pre.explain-text').textContent})"
        )
    )
    assert explained["hash"] == "#explain=podgroup:research/sweep"
    assert explained["text"].startswith(
        "podgroup research/sweep (job research/sweep, queue research)"
    )
    # each of the three pods: every node charged to one reason
    assert len(explained["rows"]) >= 3
    assert all("Insufficient cpu" in r for r in explained["rows"])
