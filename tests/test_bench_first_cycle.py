"""bench/first_cycle.py at a tiny size: both runners bind every pending pod and the JSON
line carries what bench/README.md says (the benchmark's numbers are not judged here)."""

from __future__ import annotations

import json

import pytest

from bench import first_cycle


def test_a_tiny_run_binds_every_pending_pod(capsys: pytest.CaptureFixture[str]) -> None:
    rc = first_cycle.main(["--nodes", "4", "--bound", "40", "--pending", "6", "--rounds", "2"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for runner in first_cycle.RUNNERS:
        assert out[runner]["binds"] == [6, 6]
        assert len(out[runner]["cycle_seconds"]) == first_cycle.CYCLES
    assert "allocate" in out["index"]["first_cycle_parts"]
    assert out["first_cycle_speedup"] > 0 and out["steady_cycle_speedup"] > 0
