"""The peers' test tables ported to Sluice (tests/conformance/README.md): the index is
complete and true, every ported case runs, and the counts of docs/conformance.md are the
index's.

``index.yaml`` lists every case of every source file ported, each with its scenario, the
unit test that holds it as a table (``unit: <test file>::<test>``, parametrized with the
case's name as its id), or the reason it is not ported. Each scenario under
``tests/conformance/<peer>/`` names its case (``metadata.source``) and, when it is a
deliberate departure from the peer's expectation, why (``metadata.departure``) and what
the peer expects (``metadata.peerExpect``). Every ported scenario is run here with the one
scenario runner (tests/test_scenarios.py): it must meet its expectation, and a
departure must still not meet the peer's (once it does, it is a passing case, and its
departure is stale). A unit case is a departure when its entry says why
(``departure``).
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_scenarios import check, simulate, split

HERE = Path(__file__).parent
INDEX: dict[str, Any] = yaml.safe_load((HERE / "index.yaml").read_text())
PAGE = HERE.parents[1] / "docs" / "conformance.md"


def _expectation(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    [expectation] = [d for d in docs if d.get("kind") == "Expectation"]
    return expectation


def _scenarios() -> dict[str, dict[str, Any]]:
    """``<peer>/<scenario>`` -> its Expectation's metadata, for every scenario file."""
    out = {}
    for peer in INDEX:
        for path in sorted((HERE / peer).glob("**/*.yaml")):
            key = f"{peer}/{path.relative_to(HERE / peer).with_suffix('')}"
            out[key] = _expectation(path)["metadata"]
    return out


def counts() -> dict[tuple[str, str], Counter[str]]:
    """Per (peer, source file): cases, ported, passing, departures, not ported."""
    scenarios = _scenarios()
    out: dict[tuple[str, str], Counter[str]] = {}
    for peer, info in INDEX.items():
        for source, entries in info["files"].items():
            c = out[peer, source] = Counter()
            for e in entries:
                c["cases"] += 1
                if "scenario" in e:
                    c["ported"] += 1
                    departure = scenarios[f"{peer}/{e['scenario']}"].get("departure")
                    c["departures" if departure else "passing"] += 1
                elif "unit" in e:
                    c["ported"] += 1
                    c["departures" if e.get("departure") else "passing"] += 1
                else:
                    c["not ported"] += 1
    return out


def test_every_scenario_is_a_case_of_the_index_and_says_which() -> None:
    scenarios = _scenarios()
    listed: dict[str, tuple[str, str, str]] = {}
    for peer, info in INDEX.items():
        for source, entries in info["files"].items():
            for e in entries:
                assert len({"scenario", "unit", "notPorted"} & set(e)) == 1, e
                if "scenario" in e:
                    key = f"{peer}/{e['scenario']}"
                    assert key not in listed, f"{key} listed twice"
                    listed[key] = (source, e["test"], e["case"])
                elif "notPorted" in e:
                    assert e["notPorted"].strip(), f"{e}: not ported needs a reason"
    assert sorted(listed) == sorted(scenarios)
    for key, meta in scenarios.items():
        source = meta.get("source") or {}
        assert (source.get("file"), source.get("test"), source.get("case")) == listed[key], key
        if "departure" in meta:
            assert len(meta["departure"]) > 80, f"{key}: a departure states its reason and measure"


def _ported() -> list[tuple[str, Path]]:
    """(``<peer>/<scenario>``, its path) of every ported scenario, in the index's order."""
    out = []
    for peer, info in INDEX.items():
        for entries in info["files"].values():
            for e in entries:
                if "scenario" in e:
                    out.append((f"{peer}/{e['scenario']}", HERE / peer / f"{e['scenario']}.yaml"))
    return out


PORTED = _ported()


@pytest.mark.parametrize("path", [p for _, p in PORTED], ids=[k for k, _ in PORTED])
def test_each_ported_case_runs_as_it_says(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scenario meets its expectation; a departure does not meet the peer's."""
    expectation, _ = split(path)
    outcome = simulate(path, tmp_path, capsys)
    check(expectation["expect"], outcome)
    metadata = expectation["metadata"]
    if "departure" not in metadata:
        return
    assert "peerExpect" in metadata, f"{path.name}: a departure records the peer's outcome"
    try:
        check(metadata["peerExpect"], outcome)
    except AssertionError:
        return
    pytest.fail(f"{path.name}: the peer's outcome is reached now: a passing case, not a departure")


def _units() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{peer}/{e['test']}/{e['case']}", e)
        for peer, info in INDEX.items()
        for entries in info["files"].values()
        for e in entries
        if "unit" in e
    ]


UNITS = _units()


@pytest.mark.parametrize("entry", [e for _, e in UNITS], ids=[k for k, _ in UNITS])
def test_each_unit_case_is_a_case_of_its_table(entry: dict[str, Any]) -> None:
    """The unit test named holds the case: one of its parametrized cases has the case's
    name for its id (and a departure says why)."""
    file, _, name = entry["unit"].partition("::")
    module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
    ids: list[str] = []
    for mark in getattr(getattr(module, name), "pytestmark", []):
        if mark.name == "parametrize":
            ids.extend(mark.kwargs.get("ids") or [])
    assert entry["case"] in ids, f"{entry['unit']} has no case {entry['case']!r}"
    if "departure" in entry:
        assert len(entry["departure"]) > 80, f"{entry}: a departure states its reason and measure"


def test_each_peer_names_its_commit() -> None:
    text = (HERE / "README.md").read_text()
    for info in INDEX.values():
        assert re.fullmatch(r"[0-9a-f]{40}", info["commit"])
        assert info["commit"] in text


def _page_rows() -> dict[tuple[str, str], tuple[int, ...]]:
    """The rows of docs/conformance.md's table: (peer, file) -> counts."""
    rows = {}
    pattern = re.compile(r"^\| (\w+) \| `([^`]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$")
    for line in PAGE.read_text().splitlines():
        m = pattern.match(line)
        if m:
            rows[m[1], m[2]] = tuple(int(x) for x in m.groups()[2:])
    return rows


def test_the_page_gives_the_counts_per_source_file() -> None:
    want = {
        key: (c["cases"], c["ported"], c["passing"], c["departures"], c["not ported"])
        for key, c in counts().items()
    }
    assert _page_rows() == want


def test_the_page_lists_each_departure() -> None:
    text = " ".join(PAGE.read_text().split())  # case names may break across lines
    sources = [meta["source"] for meta in _scenarios().values() if "departure" in meta]
    sources += [e for _, e in UNITS if "departure" in e]
    for source in sources:
        case = source["case"]
        label = source["test"] if case == "(single case)" else case
        assert label in text, f"{source}: departure not in docs/conformance.md"
