"""``make demo`` tells the story of the README's quick start (issue 15 point 5): reclaim
between queues, a gang waiting for its whole size, a preemption behind its gate while
the deletes run, GPU devices; everything bound in the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli.main import main

DEMO = Path(__file__).parents[2] / "examples" / "demo"


def test_the_demo_tells_its_story(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(DEMO), "--output", "json"]) == 0
    run = json.loads(capsys.readouterr().out)
    timeline = run["timeline"]

    def first(event: str, pod_prefix: str) -> dict:
        return next(e for e in timeline if e["event"] == event and e["pod"].startswith(pod_prefix))

    # the gang waits for its sixth pod (10 s), then reclaims team-a's borrowed room
    reclaim = first("reclaim", "demo/b-train-")
    assert reclaim["t"] == pytest.approx(10.0)
    assert all(v.startswith("demo/a-batch-") for v in reclaim["victims"])
    assert first("bind", "demo/b-train-")["t"] > 13.0  # after the 3 s deletes
    # the urgent job preempts team-a's own batch pods and waits behind its gate
    preempt = first("preempt", "demo/a-urgent-")
    assert preempt["t"] == pytest.approx(30.0) and preempt["victims"]
    assert 33.0 <= first("bind", "demo/a-urgent-")["t"] < 35.0
    # the GPU pods share the GPU node
    assert {run["bindings"][f"demo/b-gpu-{i}"] for i in range(2)} == {"gpu-0"}
    assert run["pending"] == {}
    assert run["podGroups"] == {"demo/b-train": "Running"}
