"""Other schedulers' APIs on the embedded cluster: the scenarios of tests/scenarios run
through the real loop, and the status each API's objects end with, as its own scheduler
or controller writes it (checked against the store, as a client would read it)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import anyio
import yaml

from scheduler import app
from scheduler.api.group_apis import KUBERNETES, SCHEDULER_PLUGINS, VOLCANO
from scheduler.cli.kubectl import _jobs
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

SCENARIOS = Path(__file__).parents[1] / "scenarios"


def _run(name: str, tmp_path: Path) -> Simulation:
    docs = [
        d
        for d in yaml.safe_load_all((SCENARIOS / name).read_text())
        if d and d.get("kind") != "Expectation"
    ]
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    resolved = app.resolve()
    sim = Simulation(
        load_scenario([str(path)]), lambda cache, ports: app.build_loop(resolved, cache, ports)
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim


def _status(sim: Simulation, kind: str, ns: str, name: str) -> dict[str, Any]:
    return dict(sim.store.get(kind, ns, name).get("status") or {})


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_volcano_status_as_volcano_writes_it(tmp_path: Path) -> None:
    sim = _run("volcano_job_gang.yaml", tmp_path)
    train = _status(sim, VOLCANO.pod_group_key, "ml", "train")
    assert (train["phase"], train["running"], train["succeeded"], train["failed"]) == (
        "Running",
        3,
        0,
        0,
    )
    assert _conditions(train) == {
        "Scheduled": ("True", "tasks in gang are ready to be scheduled", ""),
    }
    big = _status(sim, VOLCANO.pod_group_key, "ml", "big")
    assert big["phase"] == "Inqueue"
    state, reason, message = _conditions(big)["Unschedulable"]
    assert (state, reason) == ("True", "NotEnoughResources")
    assert message.startswith("4/4 tasks in gang unschedulable: the cluster has")
    team = _status(sim, VOLCANO.queue_key, "", "team")
    assert team == {
        "state": "Open",
        "allocated": {"cpu": "3", "pods": "3"},
        "pending": 0,
        "inqueue": 1,
        "running": 1,
        "unknown": 0,
        "completed": 0,
    }
    # the Sluice PodGroup of the same name keeps Sluice's shape
    sluice = _status(sim, "PodGroup", "ml", "train")
    assert sluice["phase"] == "Running" and "Scheduled" in _conditions(sluice)


def _events(sim: Simulation, name: str) -> list[tuple[str, str, str]]:
    """The events on the object called ``name``: (type, reason, note)."""
    events, _ = sim.store.list("Event")
    return [
        (e["type"], e["reason"], e["note"])
        for e in events
        if (e.get("regarding") or {}).get("name") == name
    ]


def test_a_volcano_pod_group_left_pending_says_why(tmp_path: Path) -> None:
    """Its PodGroup not admitted, Volcano's job controller makes no pod: the PodGroup is
    where users look, and says why there (Volcano's condition and event shapes)."""
    sim = _run("volcano_pending_says_why.yaml", tmp_path)
    name = "big-job-0f6e1c2a-7d3b-4e59-8a10-3c5d7e9b2f41"
    status = _status(sim, VOLCANO.pod_group_key, "default", name)
    assert status["phase"] == "Pending"
    state, reason, message = _conditions(status)["Unschedulable"]
    assert (state, reason) == ("True", "NotEnoughResources")
    assert "minResources" in message and "cpu" in message, message
    assert _events(sim, name) == [("Warning", "Unschedulable", message)]
    # and ``kubectl sluice jobs`` shows it, as it reads the PodGroup
    listed = {VOLCANO.pod_group_key: [sim.store.get(VOLCANO.pod_group_key, "default", name)]}
    out = io.StringIO()
    _jobs(listed, argparse.Namespace(output="wide", all_namespaces=False), out)
    header, row = out.getvalue().splitlines()
    assert row[header.index("REASON") :] == message


def test_gangs_whose_pods_are_all_gated_say_so(tmp_path: Path) -> None:
    """Admitted before their pods came, then every pod held by Kueue's gate: no action
    tries them, and each PodGroup's own status names the gate."""
    sim = _run("gangs_all_gated_say_so.yaml", tmp_path)
    held = "held by scheduling gates (kueue.x-k8s.io/admission)"
    state, reason, message = _conditions(_status(sim, "PodGroup", "ml", "train"))["Unschedulable"]
    assert (state, reason) == ("True", "SchedulingGated") and held in message, message
    kube = _conditions(_status(sim, KUBERNETES.pod_group_key, "ml", "ktrain-workers-0"))
    state, reason, message = kube["PodGroupScheduled"]
    assert (state, reason) == ("False", "SchedulingGated") and held in message, message
    volcano = _conditions(_status(sim, VOLCANO.pod_group_key, "ml", "vtrain"))
    state, reason, message = volcano["Unschedulable"]
    assert (state, reason) == ("True", "NotEnoughResources") and held in message, message


def test_volcanos_root_and_default_queues_get_their_status(tmp_path: Path) -> None:
    """Volcano's default Queue, beside Sluice's of the same name (the one used), gets its
    status in Volcano's shape; Volcano's root holds every queue's."""
    sim = _run("volcano_root_and_default_queues.yaml", tmp_path)
    default = _status(sim, VOLCANO.queue_key, "", "default")
    assert (default["state"], default["running"], default["allocated"]) == (
        "Open",
        1,
        {"cpu": "2", "pods": "2"},
    )
    assert _status(sim, "Queue", "", "default")["running"] == 1  # Sluice's, its own shape
    team = _status(sim, VOLCANO.queue_key, "", "team")
    assert (team["running"], team["allocated"]) == (1, {"cpu": "1", "pods": "1"})
    root = _status(sim, VOLCANO.queue_key, "", "root")
    assert (root["state"], root["running"], root["allocated"]) == (
        "Open",
        2,
        {"cpu": "3", "pods": "3"},
    )


def test_scheduler_plugins_status_as_its_controller_writes_it(tmp_path: Path) -> None:
    sim = _run("coscheduling_gang.yaml", tmp_path)
    nginx = _status(sim, SCHEDULER_PLUGINS.pod_group_key, "default", "nginx")
    assert (nginx["phase"], nginx["running"]) == ("Running", 3)
    assert "scheduleStartTime" in nginx
    big = _status(sim, SCHEDULER_PLUGINS.pod_group_key, "default", "big")
    assert (big["phase"], big["running"]) == ("Scheduling", 0)


def test_kubernetes_conditions_as_kube_scheduler_writes_them(tmp_path: Path) -> None:
    sim = _run("kubernetes_workload_gang.yaml", tmp_path)
    kind = KUBERNETES.pod_group_key
    assert _conditions(_status(sim, kind, "ml", "train-workers-0")) == {
        "PodGroupScheduled": ("True", "Scheduled", "")
    }
    state, reason, message = _conditions(_status(sim, kind, "ml", "greedy"))["PodGroupScheduled"]
    assert (state, reason) == ("False", "Unschedulable")
    assert "too little for 3 pods of 3 CPU" in message
    assert _conditions(_status(sim, kind, "ml", "loose")) == {
        "PodGroupScheduled": ("True", "Scheduled", "")
    }
