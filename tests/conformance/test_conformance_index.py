"""The peers' test tables ported to Sluice (tests/conformance/README.md): the index is
complete and true, and the counts of docs/conformance.md are the index's.

``index.yaml`` lists every case of every source file ported, each with its scenario or
the reason it is not ported. Each scenario under ``tests/conformance/<peer>/`` names its
case (``metadata.source``) and, when it is a deliberate departure from the peer's
expectation, why (``metadata.departure``). The scenarios themselves run in
tests/test_scenarios.py, the one scenario runner.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

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
                else:
                    c["not ported"] += 1
    return out


def test_every_scenario_is_a_case_of_the_index_and_says_which() -> None:
    scenarios = _scenarios()
    listed: dict[str, tuple[str, str, str]] = {}
    for peer, info in INDEX.items():
        for source, entries in info["files"].items():
            for e in entries:
                assert ("scenario" in e) != ("notPorted" in e), e
                if "scenario" in e:
                    key = f"{peer}/{e['scenario']}"
                    assert key not in listed, f"{key} listed twice"
                    listed[key] = (source, e["test"], e["case"])
                else:
                    assert e["notPorted"].strip(), f"{e}: not ported needs a reason"
    assert sorted(listed) == sorted(scenarios)
    for key, meta in scenarios.items():
        source = meta.get("source") or {}
        assert (source.get("file"), source.get("test"), source.get("case")) == listed[key], key
        if "departure" in meta:
            assert len(meta["departure"]) > 80, f"{key}: a departure states its reason and measure"


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
    for key, meta in _scenarios().items():
        if "departure" in meta:
            case = meta["source"]["case"]
            label = meta["source"]["test"] if case == "(single case)" else case
            assert label in text, f"{key}: departure not in docs/conformance.md"
