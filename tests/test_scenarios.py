"""One runner for every YAML scenario: tests/scenarios/ and tests/conformance/ (the
peers' test tables ported, see tests/conformance/README.md).

A scenario file holds ordinary Kubernetes objects plus one ``kind: Expectation``
document (only the tests read it) that says what ``sluice simulate --output json`` must
report (the keys are described in scheduler/sim/runner.py and docs/tools/simulate.md)::

    kind: Expectation
    metadata: {name: what this scenario shows}
    args: ["--feature-gates", "SchedulerAsyncPreemption=false"]   # optional
    expect:
      exitCode: 2                 # default 0
      error: "substring of the one error line"
      stoppedBy: idle             # idle | cycles | until
      seconds: 30                 # clock time at the end, from the start
      bindings: {ns/pod: node}    # node "*" means any node, "a|b" either node
      notBound: [ns/pod]
      boundCount: 3
      boundPerGroup: {ns/name: 5}  # pods bound per PodGroup (the scenario's pods' label
                                  # scheduling.sluice.dev/pod-group)
      spread: {label: example.com/rack, counts: [2, 2]}   # pods bound per value of the
                                  # label on their nodes (the scenario's Nodes), largest first
      pending: {ns/pod: "substring of the reason"}
      pendingCodes: {ns/pod: GangNotReady}   # the reason's code (scheduler/api/reasons.py)
      podGroups: {ns/name: Phase}
      evictions: [ns/pod]         # exactly, in order: evictions that took effect (the
                                  # delete or evict call succeeded), in the order the
                                  # calls finished, each pod once
      evictionSet: [ns/pod]       # exactly these evictions, in any order
      nominations: {ns/pod: node} # status.nominatedNodeName as last written; null: none
      timeline:                   # events that occur in this order (others may come
                                  # between); each entry names fields the event has, e.g.
        - {event: preempt, pod: ns/pod, node: n1, victims: [ns/victim]}
        - {event: delete, pod: ns/victim, atLeast: 3}   # t >= 3 (seconds from the start)
        - {event: bind, pod: ns/pod, atMost: 5, cycle: 4}
      never:                      # events that never occur: no event has all the
        - {event: dissolve}       # fields of an entry

A conformance scenario's ``metadata`` also names the case it ports (``source: {file,
test, case}``) and, for a deliberate departure from the peer's expectation, says why
(``departure: ...``); tests/conformance/test_conformance_index.py counts them.

A run that succeeds must log nothing (errors are the only lines a simulation logs). The
scenario is run without its Expectation document, so the document numbers in an
``error`` line count from the first document after it.

Each ``timeline`` entry is matched by the first event after the previous entry's match
that has all its fields; then ``atLeast`` / ``atMost`` (bounds on that event's ``t``)
and ``cycle`` (its cycle) must hold for that event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.main import main

HERE = Path(__file__).parent
SCENARIOS = sorted((HERE / "scenarios").glob("*.yaml")) + sorted(
    (HERE / "conformance").glob("*/**/*.yaml")  # <peer>/<dir>/<case>.yaml; not index.yaml
)


def _id(path: Path) -> str:
    """``stem`` for tests/scenarios, ``conformance/<peer>/<dir>/<stem>`` for the rest."""
    rel = path.relative_to(HERE)
    return path.stem if rel.parts[0] == "scenarios" else str(rel.with_suffix(""))


def _split(path: Path) -> tuple[dict[str, Any], list[Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    expectations = [d for d in docs if d.get("kind") == "Expectation"]
    assert len(expectations) == 1, f"{path.name}: needs exactly one Expectation document"
    return expectations[0], [d for d in docs if d.get("kind") != "Expectation"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[_id(p) for p in SCENARIOS])
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
    assert err == "", f"a successful run logs no errors:\n{err}"
    result = json.loads(out)
    assert set(result) == {
        "cycles",
        "stoppedBy",
        "seconds",
        "bindings",
        "evictions",
        "nominations",
        "pending",
        "pendingCodes",
        "podGroups",
        "timeline",
    }
    bindings = result["bindings"]
    for pod, node in (expect.get("bindings") or {}).items():
        assert pod in bindings, f"{pod} not bound; pending: {result['pending'].get(pod)}"
        if node != "*":
            assert bindings[pod] in node.split("|"), f"{pod} bound to {bindings[pod]}, not {node}"
    for pod in expect.get("notBound") or ():
        assert pod not in bindings, f"{pod} was bound to {bindings.get(pod)}"
    if "boundCount" in expect:
        assert len(bindings) == expect["boundCount"], bindings
    if "spread" in expect:
        check_spread(expect["spread"], bindings, docs)
    if "boundPerGroup" in expect:
        assert bound_per_group(bindings, docs) == expect["boundPerGroup"], bindings
    for pod, reason in (expect.get("pending") or {}).items():
        assert pod in result["pending"], f"{pod} is not pending"
        assert reason in result["pending"][pod], result["pending"][pod]
    for pod, code in (expect.get("pendingCodes") or {}).items():
        assert result["pendingCodes"].get(pod) == code, (pod, result["pendingCodes"].get(pod))
    for pg, phase in (expect.get("podGroups") or {}).items():
        assert result["podGroups"].get(pg) == phase, result["podGroups"]
    if "stoppedBy" in expect:
        assert result["stoppedBy"] == expect["stoppedBy"], (result["stoppedBy"], result["seconds"])
    if "seconds" in expect:
        assert result["seconds"] == pytest.approx(expect["seconds"]), result["seconds"]
    if "evictions" in expect:
        assert result["evictions"] == expect["evictions"]
    if "evictionSet" in expect:
        assert sorted(result["evictions"]) == sorted(expect["evictionSet"]), result["evictions"]
    for pod, node in (expect.get("nominations") or {}).items():
        assert result["nominations"].get(pod) == node, result["nominations"]
    check_timeline(expect.get("timeline") or [], result["timeline"])
    for fields in expect.get("never") or ():
        seen = [e for e in result["timeline"] if all(e.get(k) == v for k, v in fields.items())]
        assert not seen, f"{fields} occurred: {seen}"


def check_spread(spread: dict[str, Any], bindings: dict[str, str], docs: list[Any]) -> None:
    """The pods bound per value of ``spread["label"]`` on their nodes, largest first, are
    ``spread["counts"]``."""
    nodes: dict[str, dict[str, str]] = {}
    for d in docs:
        for obj in d.get("items", [d]) if d.get("kind") == "List" else [d]:
            if obj.get("kind") == "Node":
                nodes[obj["metadata"]["name"]] = obj["metadata"].get("labels") or {}
    per: dict[str, int] = {}
    for node in bindings.values():
        value = nodes.get(node, {}).get(spread["label"], "")
        per[value] = per.get(value, 0) + 1
    assert sorted(per.values(), reverse=True) == spread["counts"], (per, bindings)


def bound_per_group(bindings: dict[str, str], docs: list[Any]) -> dict[str, int]:
    """How many pods of each PodGroup (``ns/name``, by the pods' group label) are bound;
    groups with none bound are listed with 0."""
    out: dict[str, int] = {}
    for d in docs:
        for obj in d.get("items", [d]) if d.get("kind") == "List" else [d]:
            meta = obj.get("metadata") or {}
            group = (meta.get("labels") or {}).get("scheduling.sluice.dev/pod-group")
            if obj.get("kind") == "Pod" and group:
                ns = meta.get("namespace", "default")
                key = f"{ns}/{group}"
                out[key] = out.get(key, 0) + (f"{ns}/{meta['name']}" in bindings)
    return out


BOUNDS = {"atLeast", "atMost", "cycle"}


def check_timeline(expected: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> None:
    """``expected`` occurs in ``timeline`` in order; see the module docstring."""
    at = 0
    for want in expected:
        fields = {k: v for k, v in want.items() if k not in BOUNDS}
        found = next(
            (
                i
                for i in range(at, len(timeline))
                if all(timeline[i].get(k) == v for k, v in fields.items())
            ),
            None,
        )
        shown = "\n".join(f"  {e}" for e in timeline if e["event"] != "arrive")
        assert found is not None, f"no event {fields} after event {at}; timeline:\n{shown}"
        event = timeline[found]
        if "atLeast" in want:
            assert event["t"] >= want["atLeast"], f"{event} before t={want['atLeast']}"
        if "atMost" in want:
            assert event["t"] <= want["atMost"], f"{event} after t={want['atMost']}"
        if "cycle" in want:
            assert event["cycle"] == want["cycle"], f"{event} not in cycle {want['cycle']}"
        at = found + 1
