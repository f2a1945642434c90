"""The API server's Priority admission of pods, as the emulator applies it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.admission import AdmissionError, admit_pod_priority

Obj = dict[str, Any]


def cls(name: str, value: int, *, default: bool = False, policy: str | None = None) -> Obj:
    obj: Obj = {"kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    if default:
        obj["globalDefault"] = True
    if policy is not None:
        obj["preemptionPolicy"] = policy
    return obj


def pod(**spec: Any) -> Obj:
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [], **spec}}


HIGH = cls("high", 1000)
NEVER = cls("batch", 10, policy="Never")
DEFAULT = cls("normal", 5, default=True, policy="PreemptLowerPriority")


@pytest.mark.parametrize(
    ("spec", "classes", "expected"),
    [
        # no class and no default class: priority 0, nothing else set
        ({}, [HIGH], {"priority": 0}),
        # no class: the global default's name, value and policy
        (
            {},
            [HIGH, DEFAULT],
            {
                "priority": 5,
                "priorityClassName": "normal",
                "preemptionPolicy": "PreemptLowerPriority",
            },
        ),
        # several defaults: the lowest value
        ({}, [cls("d1", 7, default=True), cls("d2", 3, default=True)], {"priority": 3}),
        ({"priorityClassName": "high"}, [HIGH], {"priority": 1000}),
        # the class's preemption policy is copied
        ({"priorityClassName": "batch"}, [NEVER], {"priority": 10, "preemptionPolicy": "Never"}),
        # a priority equal to the class's is accepted
        ({"priorityClassName": "high", "priority": 1000}, [HIGH], {"priority": 1000}),
        # the system classes exist even when not stored
        ({"priorityClassName": "system-node-critical"}, [], {"priority": 2_000_001_000}),
    ],
)
def test_priority_is_resolved(spec: Obj, classes: list[Obj], expected: Obj) -> None:
    admitted = admit_pod_priority(pod(**spec), classes)
    assert {k: admitted["spec"].get(k) for k in expected} == expected


@pytest.mark.parametrize(
    ("spec", "classes", "message"),
    [
        ({"priorityClassName": "nope"}, [HIGH], "no PriorityClass with name nope was found"),
        (
            {"priorityClassName": "high", "priority": 7},
            [HIGH],
            "the integer value of priority (7) must not be provided in pod spec; priority "
            "admission controller computed 1000 from the given PriorityClass name",
        ),
        (
            {"priority": 7},
            [],
            "the integer value of priority (7) must not be provided in pod spec; priority "
            "admission controller computed 0 from the given PriorityClass name",
        ),
        (
            {"priorityClassName": "batch", "preemptionPolicy": "PreemptLowerPriority"},
            [NEVER],
            "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided "
            "in pod spec; priority admission controller computed Never from the given "
            "PriorityClass name",
        ),
    ],
)
def test_contradictions_are_refused(spec: Obj, classes: list[Obj], message: str) -> None:
    with pytest.raises(AdmissionError) as err:
        admit_pod_priority(pod(**spec), classes)
    assert str(err.value) == message


def test_the_pod_given_is_not_changed() -> None:
    given = pod(priorityClassName="high")
    admit_pod_priority(given, [HIGH])
    assert "priority" not in given["spec"]
