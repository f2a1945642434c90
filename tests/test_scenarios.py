"""One runner for every YAML scenario in tests/scenarios/.

A scenario file holds ordinary Kubernetes objects plus one ``kind: Expectation``
document (only the tests read it) that says what ``sluice simulate`` must report::

    kind: Expectation
    metadata: {name: what this scenario shows}
    args: ["--feature-gates", "SchedulerAsyncPreemption=false"]   # optional
    expect:
      exitCode: 2                 # default 0
      error: "substring of the one error line"
      bindings: {ns/pod: node}    # node "*" means any node
      notBound: [ns/pod]
      boundCount: 3
      pending: {ns/pod: "substring of the reason"}
      podGroups: {ns/name: Phase}
      evictions: [ns/pod]         # exactly, in order
      nominations: {ns/pod: node}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.main import main

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))


def _split(path: Path) -> tuple[dict[str, Any], list[Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    expectations = [d for d in docs if d.get("kind") == "Expectation"]
    assert len(expectations) == 1, f"{path.name}: needs exactly one Expectation document"
    return expectations[0], [d for d in docs if d.get("kind") != "Expectation"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expectation, docs = _split(path)
    scenario = tmp_path / path.name
    scenario.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    code = main(["simulate", str(scenario), "--output", "json", *expectation.get("args", [])])
    out, err = capsys.readouterr()
    expect = expectation.get("expect") or {}
    assert code == expect.get("exitCode", 0), err
    if "error" in expect:
        assert expect["error"] in err, err
        assert len(err.strip().splitlines()) == 1, f"one error line expected, got:\n{err}"
        assert "Traceback" not in err
        return
    result = json.loads(out)
    assert set(result) == {
        "cycles",
        "bindings",
        "evictions",
        "nominations",
        "pending",
        "podGroups",
        "timeline",
    }
    bindings = result["bindings"]
    for pod, node in (expect.get("bindings") or {}).items():
        assert pod in bindings, f"{pod} not bound; pending: {result['pending'].get(pod)}"
        if node != "*":
            assert bindings[pod] == node, f"{pod} bound to {bindings[pod]}, expected {node}"
    for pod in expect.get("notBound") or ():
        assert pod not in bindings, f"{pod} was bound to {bindings.get(pod)}"
    if "boundCount" in expect:
        assert len(bindings) == expect["boundCount"], bindings
    for pod, reason in (expect.get("pending") or {}).items():
        assert pod in result["pending"], f"{pod} is not pending"
        assert reason in result["pending"][pod], result["pending"][pod]
    for pg, phase in (expect.get("podGroups") or {}).items():
        assert result["podGroups"].get(pg) == phase, result["podGroups"]
    if "evictions" in expect:
        assert result["evictions"] == expect["evictions"]
    for pod, node in (expect.get("nominations") or {}).items():
        assert result["nominations"].get(pod) == node, result["nominations"]
