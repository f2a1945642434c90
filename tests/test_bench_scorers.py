"""bench/scorers.py: the micro-benchmark of filters and scores runs every shape and times
the plugins each registers (its figures are not checked: a command, not a timed test)."""

from __future__ import annotations

import json

import pytest

from bench import scorers

PLACEMENT_PLUGINS = {"podtopologyspread", "interpodaffinity"}


def test_every_shape_times_the_plugins_its_pods_ask_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert scorers.main(["--scale", "0.002", "--pods", "5", "--rounds", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by = {line["shape"]: line for line in lines}
    assert list(by) == list(scorers.SHAPES)
    for line in lines:
        assert (line["nodes"], line["pods_timed"], line["placed"]) == (10, 5, 5)
        assert len(line["per_round_us"]) == 2
    # Pods without placement fields keep the fast path: neither plugin is asked.
    basic = by["scheduling-basic"]
    assert not PLACEMENT_PLUGINS & (set(basic["filters_us"]) | set(basic["scorers_us"]))
    assert "podtopologyspread" in by["topology-spreading"]["filters_us"]
    assert "podtopologyspread" not in by["topology-spreading"]["scorers_us"]
    assert "podtopologyspread" in by["preferred-topology-spreading"]["scorers_us"]
    assert "interpodaffinity" in by["preferred-pod-affinity"]["scorers_us"]
    assert "interpodaffinity" in by["preferred-pod-anti-affinity"]["scorers_us"]


@pytest.mark.parametrize(
    "argv",
    [["--shapes", "gang"], ["--pods", "0"], ["--scale", "0"]],
    ids=["shape", "pods", "scale"],
)
def test_bad_options_are_one_line_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        scorers.shapes_of(scorers._parser().parse_args(argv))
    assert "\n" not in str(caught.value)
