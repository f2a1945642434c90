"""The scenario runner refuses what would let a scenario pass whatever happened (issue 38
point 4): no expectation, an empty one, a key it does not know (a misspelt key checks
nothing), and an ``error`` expectation whose other keys it could not check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_scenarios import Outcome, check, split

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
}
RESULT: dict[str, Any] = {
    "cycles": 1,
    "stoppedBy": "idle",
    "seconds": 0.0,
    "bindings": {"default/p": "n1"},
    "evictions": [],
    "nominations": {},
    "pending": {},
    "pendingCodes": {},
    "podGroups": {},
    "claims": {},
    "timeline": [],
}


@pytest.mark.parametrize(
    ("expectation", "refused"),
    [
        pytest.param({"metadata": {"name": "x"}}, "says nothing to check", id="no-expect"),
        pytest.param({"metadata": {"name": "x"}, "expect": {}}, "says nothing", id="empty"),
        pytest.param({"expect": None}, "says nothing to check", id="null"),
        pytest.param({"expect": {"bindngs": {}}}, "unknown keys in expect", id="misspelt"),
        pytest.param({"expect": {"boundCount": 1}, "expcet": {}}, "unknown keys", id="doc-key"),
        pytest.param(
            {"metadata": {"name": "a", "b": None}, "expect": {"boundCount": 1}},
            "unknown keys of its metadata",
            id="name-split-by-a-comma",
        ),
        pytest.param(
            {
                "metadata": {"peerExpect": {"evictionSet": [], "evicted": []}},
                "expect": {"boundCount": 0},
            },
            "unknown keys in metadata.peerExpect",
            id="peer-misspelt",
        ),
    ],
)
def test_the_runner_refuses_expectations_that_check_nothing(
    tmp_path: Path, expectation: dict[str, Any], refused: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump_all([{"kind": "Expectation", **expectation}, NODE]))
    with pytest.raises(AssertionError, match=refused):
        split(path)


def test_an_error_expectation_does_not_skip_the_other_keys() -> None:
    failed = Outcome(2, "sluice: bad thing\n", None, [])
    check({"exitCode": 2, "error": "bad thing"}, failed)
    with pytest.raises(AssertionError, match="no result printed"):
        check({"exitCode": 2, "error": "bad thing", "boundCount": 0}, failed)
    logged = Outcome(1, "sluice: a bind failed\n", RESULT, [])
    check({"exitCode": 1, "error": "bind failed", "boundCount": 1}, logged)
    with pytest.raises(AssertionError):
        check({"exitCode": 1, "error": "bind failed", "boundCount": 2}, logged)
