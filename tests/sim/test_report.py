"""``sluice simulate --report`` (issue 15 point 4): one self-contained HTML page, rendered
in headless Chromium (Debian's package; `.ci/run` installs it), showing the demo's nodes
and pods, its preemptions and reclaims, the gates, the queue shares and the pending
pods; nothing is fetched when it is viewed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from scheduler.cli.main import main
from tests.browser import CHROMIUM, FLAGS

DEMO = Path(__file__).parents[2] / "examples" / "demo"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.html"
    assert main(["simulate", str(DEMO), "--output", "json", "--report", str(path)]) == 0
    return path


def test_the_page_is_self_contained(report: Path) -> None:
    text = report.read_text()
    assert "<script" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text), "something would be fetched"
    for section in ("Nodes", "Preemption gates", "Queue shares", "Pending pods"):
        assert f"<h2>{section}" in text


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install chromium`")
def test_chromium_renders_the_demo(report: Path, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    base = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*base, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # the browser's DOM: every pod placement of the demo, each node, the marks
    assert dom.count('class="pod"') >= 42  # 42 pods bound (16 of them evicted later)
    for node in ("cpu-0", "cpu-1", "cpu-2", "cpu-3", "gpu-0"):
        assert f">{node}</text>" in dom
    assert dom.count('class="reclaim"') >= 1 and dom.count('class="preempt"') >= 2
    assert dom.count('class="victim"') == 16
    assert dom.count('class="gate"') == 3  # one reclaimer with victims, two preemptors
    assert 'class="held"' in dom and 'class="deserved"' in dom and 'class="pending"' in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [*base, "--window-size=1000,1100", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000  # something was drawn


def test_the_report_lists_dra_devices_per_node_and_their_holders(tmp_path: Path) -> None:
    path = tmp_path / "dra.html"
    examples = Path(__file__).parents[2] / "examples" / "dra"
    assert main(["simulate", str(examples), "--output", "json", "--report", str(path)]) == 0
    text = path.read_text()
    assert "<h2>Devices</h2>" in text
    row = "<td>gpu-2</td><td>gpu.example.com/gpu-2/gpu-0</td>"
    assert f"{row}<td>default/h100-holder, default/trainer</td>" in text


def test_pods_that_arrive_bound_are_drawn_from_their_arrival(tmp_path: Path) -> None:
    """A scenario's running pods (a cluster's snapshot is mostly them) have no bind in the
    run, and are drawn all the same: a replay's report shows the cluster it starts from."""
    scenario = tmp_path / "running.yaml"
    scenario.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        "status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: already, namespace: default}\n"
        "spec: {schedulerName: sluice, nodeName: n1, containers: [{name: c}]}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: new, namespace: default}\n"
        "spec: {schedulerName: sluice, containers: [{name: c}]}\n"
    )
    path = tmp_path / "running.html"
    assert main(["simulate", str(scenario), "--output", "json", "--report", str(path)]) == 0
    text = path.read_text()
    assert text.count('class="pod"') == 2
    assert "<title>default/already on n1: 0s to " in text
