"""The Grafana dashboard (``manifests/grafana-dashboard.json``, issue 15 point 6) asks only
for metric names and labels the scheduler exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scheduler.metrics import Metrics

DASHBOARD = Path(__file__).parents[2] / "manifests" / "grafana-dashboard.json"
NAME = re.compile(r"\b((?:scheduler|sluice)_[a-z_]+)")
SELECTOR = re.compile(r"\b((?:scheduler|sluice)_[a-z_]+)\{([^}]*)\}")
BY = re.compile(r"by \(([^)]*)\) \((?:\w+\()?((?:scheduler|sluice)_[a-z_]+)")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def exported() -> dict[str, set[str]]:
    """Every sample name the scheduler exports, with the label names it declares."""
    out: dict[str, set[str]] = {}
    for collector in vars(Metrics()).values():
        name = getattr(collector, "_name", None)
        labels = getattr(collector, "_labelnames", None)
        if name is None or labels is None:
            continue
        kind = getattr(collector, "_type", "")
        names = {name}
        if kind == "counter":
            names.add(f"{name}_total")
        if kind == "histogram":
            names |= {name + part for part in HISTOGRAM_PARTS}
        for n in names:
            out[n] = set(labels)
    return out


def expressions() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for wanted in ("scheduled per second", "pending pods per queue", "preemption", "per action"):
        assert wanted in titles, wanted


def test_every_metric_of_the_dashboard_is_exported() -> None:
    names = exported()
    for expr in expressions():
        for metric in NAME.findall(expr):
            assert metric in names, f"{metric} (in {expr!r}) is not exported"


def test_every_label_of_the_dashboard_is_one_the_metric_has() -> None:
    names = exported()
    for expr in expressions():
        for metric, selector in SELECTOR.findall(expr):
            for label in re.findall(r"(\w+)\s*=", selector):
                assert label in names[metric], f"{metric} has no label {label!r}"
        for labels, inner in BY.findall(expr):
            metric = NAME.findall(inner)[-1]
            for label in (x.strip() for x in labels.split(",")):
                if label != "le":
                    assert label in names[metric], f"{metric} has no label {label!r} ({expr})"
