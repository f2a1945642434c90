"""``sluice simulate``: --until and the text summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli.main import main

SCENARIO = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: long, annotations: {sim.sluice.dev/run-for: 10m}}
spec: {schedulerName: sluice, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
"""


@pytest.fixture
def scenario(tmp_path: Path) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--until: must be a positive duration, like 90s or 1h; got '0'"),
        ("0s", "--until: must be a positive duration"),
        ("-5s", "--until: invalid duration '-5s': must not be negative"),
        ("soon", "--until: invalid duration 'soon'"),
        ("", "--until: invalid duration '': empty"),
    ],
    ids=["zero", "zero-s", "negative", "not-a-duration", "empty"],
)
def test_a_bad_until_is_one_error_line_naming_the_flag(
    scenario: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", scenario, f"--until={value}"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {message}"), err
    assert len(err.strip().splitlines()) == 1
    assert out == ""


@pytest.mark.parametrize(
    ("args", "stopped_by", "seconds"),
    [
        ([], "idle", 601.0),
        (["--until", "90s"], "until", 90.0),
        (["--until", "1m30s"], "until", 90.0),
        (["--cycles", "2"], "cycles", 1.0),
    ],
    ids=["idle", "until", "until-compound", "cycles"],
)
def test_json_says_what_stopped_the_run_and_when(
    scenario: str,
    args: list[str],
    stopped_by: str,
    seconds: float,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", scenario, "--output", "json", *args]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["stoppedBy"], result["seconds"]) == (stopped_by, seconds)


def test_the_text_summary_names_what_stopped_the_run(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", scenario, "--until", "90s"]) == 0
    out = capsys.readouterr().out
    assert "cycles over 90.000s; stopped by until (the horizon was reached)" in out
    assert "1 pods bound, 0 evicted, 0 nominated, 0 pending" in out


def test_until_applies_on_the_real_clock(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", scenario, "--output", "json", "--real-time", "--until", "200ms"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["stoppedBy"] == "until"
    assert 0.2 <= result["seconds"] < 5.0
