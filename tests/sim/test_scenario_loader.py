"""The scenario loader: departures, the Simulation document's ``until``, and their errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.errors import ScenarioError
from scheduler.sim.scenario import ARRIVAL_ANNOTATION, DEPARTURE_ANNOTATION, load_scenario

Obj = dict[str, Any]

NODE: Obj = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "10"}},
}


def pod(name: str, **annotations: str) -> Obj:
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = {
            {"arrival": ARRIVAL_ANNOTATION, "departure": DEPARTURE_ANNOTATION}[k]: v
            for k, v in annotations.items()
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "sluice",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def write(tmp_path: Path, *docs: Obj) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return str(path)


def simulation(**fields: Any) -> Obj:
    return {"apiVersion": "scheduling.sluice.dev/v1alpha1", "kind": "Simulation", **fields}


def test_departures_are_read_sorted_by_time_and_kind(tmp_path: Path) -> None:
    node = {**NODE, "metadata": {"name": "n1", "annotations": {DEPARTURE_ANNOTATION: "9s"}}}
    scenario = load_scenario(
        [
            write(
                tmp_path,
                node,
                pod("b", departure="2s"),
                pod("a", arrival="1s", departure="9s"),
                pod("c"),
            )
        ]
    )
    assert [(d.at, d.label) for d in scenario.departures] == [
        (2.0, "Pod default/b"),
        (9.0, "Node n1"),
        (9.0, "Pod default/a"),
    ]
    assert [(d.kind, d.namespace, d.name) for d in scenario.departures][1] == ("Node", "", "n1")


@pytest.mark.parametrize(
    ("annotations", "field", "message"),
    [
        ({"departure": "soon"}, DEPARTURE_ANNOTATION, "invalid duration 'soon'"),
        (
            {"departure": "0s"},
            DEPARTURE_ANNOTATION,
            "the departure (0s) must come after the arrival (0s)",
        ),
        (
            {"arrival": "5s", "departure": "5s"},
            DEPARTURE_ANNOTATION,
            "the departure (5s) must come after",
        ),
        (
            {"arrival": "5s", "departure": "2s"},
            DEPARTURE_ANNOTATION,
            "(2s) must come after the arrival (5s)",
        ),
        ({"arrival": "later"}, ARRIVAL_ANNOTATION, "invalid duration 'later'"),
    ],
    ids=["not-a-duration", "at-the-start", "same-as-arrival", "before-arrival", "bad-arrival"],
)
def test_bad_timed_annotations_name_file_object_and_field(
    tmp_path: Path, annotations: dict[str, str], field: str, message: str
) -> None:
    path = write(tmp_path, NODE, pod("p", **annotations))
    with pytest.raises(ScenarioError) as info:
        load_scenario([path])
    text = str(info.value)
    assert text.startswith(f"{path} (document 2): Pod default/p: metadata.annotations[{field}]:")
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("until", "seconds"),
    [("90s", 90.0), ("1h", 3600.0), ("1m30s", 90.0), (None, None)],
    ids=["seconds", "hour", "compound", "absent"],
)
def test_until_in_the_simulation_document(
    tmp_path: Path, until: str | None, seconds: float | None
) -> None:
    fields = {"apiLatency": {"delete": "3s"}}
    if until is not None:
        fields["until"] = until  # type: ignore[assignment]
    scenario = load_scenario([write(tmp_path, simulation(**fields), NODE)])
    assert scenario.until == seconds
    assert scenario.behaviour is not None and scenario.behaviour.latency == {"delete": 3.0}


@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("0s", "until: must be a positive duration"),
        ("-5s", "until: invalid duration '-5s': must not be negative"),
        ("forever", "until: invalid duration 'forever'"),
    ],
    ids=["zero", "negative", "not-a-duration"],
)
def test_bad_until_in_the_simulation_document(tmp_path: Path, until: str, message: str) -> None:
    path = write(tmp_path, simulation(until=until), NODE)
    with pytest.raises(ScenarioError, match=message) as info:
        load_scenario([path])
    assert str(info.value).startswith(f"{path} (document 1): until:")


def test_a_simulation_document_with_only_until_is_still_the_only_one(tmp_path: Path) -> None:
    path = write(tmp_path, simulation(until="1m"), simulation(seed=3), NODE)
    with pytest.raises(ScenarioError, match="a second Simulation document"):
        load_scenario([path])
