"""One runner for every YAML scenario: tests/scenarios/ (run here) and tests/conformance/
(the peers' test tables ported, see tests/conformance/README.md: run by its index test,
tests/conformance/test_conformance_index.py, with these functions).

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
      claims: {ns/claim: pv}      # bound at the end to that PV ("*": any)
      claimsBesidePods: true      # every bound pod's bound claims have PVs its node can use
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
      plugin:                     # one plugin's filter verdicts and scores for one pod on
        name: podtopologyspread   # the cluster at time 0 (tests/plugin_tables.py)
        pod: ns/pod
        filter: {node: Success}
        scores: {node: 100}

A conformance scenario's ``metadata`` also names the case it ports (``source: {file,
test, case}``) and, for a deliberate departure from the peer's expectation, says why
(``departure: ...``) and what the peer expects (``peerExpect``, keys as ``expect``).

An Expectation with no ``expect``, an empty one, or a key (of ``expect``, ``metadata`` or
the document) the runner does not know is refused: a scenario that checks nothing, or a
misspelt key, would pass whatever happened. An ``error`` does not end the checks: the
other keys are checked too, against the result printed (a run that printed none cannot
meet them, and fails).

A run that succeeds must log nothing (errors are the only lines a simulation logs). The
scenario is run without its Expectation document, so the document numbers in an
``error`` line count from the first document after it.

Each ``timeline`` entry is matched by the first event after the previous entry's match
that has all its fields; then ``atLeast`` / ``atMost`` (bounds on that event's ``t``)
and ``cycle`` (its cycle) must hold for that event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.main import main
from tests.plugin_tables import check_plugin

HERE = Path(__file__).parent
SCENARIOS = sorted((HERE / "scenarios").glob("*.yaml"))

EXPECT_KEYS = frozenset(
    {
        "exitCode",
        "error",
        "stoppedBy",
        "seconds",
        "bindings",
        "notBound",
        "boundCount",
        "boundPerGroup",
        "spread",
        "pending",
        "pendingCodes",
        "podGroups",
        "claims",
        "claimsBesidePods",
        "evictions",
        "evictionSet",
        "nominations",
        "timeline",
        "never",
        "plugin",
    }
)
"""Every key an ``expect`` (or a departure's ``peerExpect``) may have."""
DOCUMENT_KEYS = frozenset({"kind", "apiVersion", "metadata", "args", "expect"})
METADATA_KEYS = frozenset({"name", "source", "departure", "peerExpect"})
RESULT_KEYS = {
    "cycles",
    "stoppedBy",
    "seconds",
    "bindings",
    "evictions",
    "nominations",
    "pending",
    "pendingCodes",
    "podGroups",
    "claims",
    "timeline",
}


def split(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The scenario's Expectation (checked: see the module docstring) and its other
    documents."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    expectations = [d for d in docs if d.get("kind") == "Expectation"]
    assert len(expectations) == 1, f"{path.name}: needs exactly one Expectation document"
    [expectation] = expectations
    unknown = set(expectation) - DOCUMENT_KEYS
    assert not unknown, f"{path.name}: unknown keys of the Expectation: {sorted(unknown)}"
    metadata = expectation.get("metadata") or {}
    unknown = set(metadata) - METADATA_KEYS
    assert not unknown, f"{path.name}: unknown keys of its metadata: {sorted(unknown)}"
    check_keys(path.name, "expect", expectation.get("expect"))
    if "peerExpect" in metadata:
        check_keys(path.name, "metadata.peerExpect", metadata["peerExpect"])
    return expectation, [d for d in docs if d.get("kind") != "Expectation"]


def check_keys(name: str, where: str, expect: object) -> None:
    """``expect`` is a map of known keys with at least one."""
    assert isinstance(expect, dict) and expect, f"{name}: {where} says nothing to check"
    unknown = set(expect) - EXPECT_KEYS
    assert not unknown, f"{name}: unknown keys in {where}: {sorted(unknown)}"


@dataclass(frozen=True)
class Outcome:
    """What ``sluice simulate --output json`` did with a scenario."""

    code: int
    err: str
    result: dict[str, Any] | None
    """The JSON printed, None when the run printed none."""
    docs: list[Any]


def simulate(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Outcome:
    """Run the scenario at ``path`` (its Expectation left out) as ``sluice simulate
    --output json`` with the Expectation's ``args``."""
    expectation, docs = split(path)
    scenario = tmp_path / path.name
    scenario.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    capsys.readouterr()
    code = main(["simulate", str(scenario), "--output", "json", *expectation.get("args", [])])
    out, err = capsys.readouterr()
    try:
        result = json.loads(out) if out.strip() else None
    except json.JSONDecodeError:
        result = None
    return Outcome(code, err, result, docs)


def check(expect: dict[str, Any], outcome: Outcome) -> None:
    """``outcome`` meets every key of ``expect`` (AssertionError naming the first that it
    does not meet)."""
    err = outcome.err
    assert outcome.code == expect.get("exitCode", 0), err
    if "error" in expect:
        assert expect["error"] in err, err
        assert len(err.strip().splitlines()) == 1, f"one error line expected, got:\n{err}"
        assert "Traceback" not in err
    else:
        assert err == "", f"a successful run logs no errors:\n{err}"
    rest = set(expect) - {"exitCode", "error"}
    if not rest:
        return
    result = outcome.result
    assert result is not None, f"no result printed to check {sorted(rest)} against"
    assert set(result) == RESULT_KEYS
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
        check_spread(expect["spread"], bindings, outcome.docs)
    if "boundPerGroup" in expect:
        assert bound_per_group(bindings, outcome.docs) == expect["boundPerGroup"], bindings
    for pod, reason in (expect.get("pending") or {}).items():
        assert pod in result["pending"], f"{pod} is not pending"
        assert reason in result["pending"][pod], result["pending"][pod]
    for pod, code in (expect.get("pendingCodes") or {}).items():
        assert result["pendingCodes"].get(pod) == code, (pod, result["pendingCodes"].get(pod))
    for pg, phase in (expect.get("podGroups") or {}).items():
        assert result["podGroups"].get(pg) == phase, result["podGroups"]
    for claim, volume in (expect.get("claims") or {}).items():
        assert claim in result["claims"], f"{claim} not bound: {result['claims']}"
        if volume != "*":
            assert result["claims"][claim]["volume"] == volume, result["claims"][claim]
    if expect.get("claimsBesidePods"):
        check_claims_beside_pods(result, outcome.docs)
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
    if "plugin" in expect:
        check_plugin(expect["plugin"], outcome.docs)


def _id(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("path", SCENARIOS, ids=[_id(p) for p in SCENARIOS])
def test_scenario(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expectation, _ = split(path)
    check(expectation["expect"], simulate(path, tmp_path, capsys))


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


def check_claims_beside_pods(result: dict[str, Any], docs: list[Any]) -> None:
    """Every bound pod's claims that are bound have PVs its node can use, and every bound
    pod has its claims bound."""
    checked = 0
    for d in docs:
        for obj in d.get("items", [d]) if d.get("kind") == "List" else [d]:
            if obj.get("kind") != "Pod":
                continue
            ns = obj["metadata"].get("namespace", "default")
            key = f"{ns}/{obj['metadata']['name']}"
            node = result["bindings"].get(key)
            if node is None:
                continue
            for v in obj["spec"].get("volumes") or ():
                claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if claim is None:
                    continue
                bound = result["claims"].get(f"{ns}/{claim}")
                assert bound is not None, f"{key} is bound but its claim {claim} is not"
                assert node in bound["nodes"], (key, node, claim, bound)
                checked += 1
    assert checked, "no bound pod with a claim"


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
