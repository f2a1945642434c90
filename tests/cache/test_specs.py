"""scheduler/cache/specs.py: a spec parsed once for every pod that has it."""

from __future__ import annotations

import pytest

from scheduler.api.pod import parse_pod_spec
from scheduler.cache.specs import SpecMemo
from tests.builders import cache_with, pod


def test_pods_of_one_template_share_one_parse() -> None:
    cache = cache_with(*(pod(f"p{i}", cpu="1") for i in range(50)), pod("big", cpu="2"))
    specs = {id(t.spec) for t in cache.tasks.values()}
    assert len(specs) == 2
    assert len(cache.ingest.specs) == 2


def test_a_changed_spec_gets_its_own_parse() -> None:
    cache = cache_with(pod("a", cpu="1"), pod("b", cpu="1"))
    changed = pod("b", cpu="3")
    cache.handle("Pod", "MODIFIED", changed)
    a, b = sorted(cache.tasks.values(), key=lambda t: t.name)
    assert a.spec is not b.spec
    assert b.spec.request.to_quantities()["cpu"] == "3"


def test_a_problem_names_its_own_pod() -> None:
    """A spec asking more than any node holds says so naming the pod: never shared."""
    memo = SpecMemo()
    huge = pod("x", cpu="100000000000000")["spec"]
    key = memo.key(huge)
    first = memo.view(key, lambda: parse_pod_spec(huge, obj="Pod default/x"))
    second = memo.view(key, lambda: parse_pod_spec(huge, obj="Pod default/y"))
    assert "default/x" in first.problem and "default/y" in second.problem
    assert len(memo) == 0


def test_the_memo_keeps_the_most_recent_specs() -> None:
    memo = SpecMemo(limit=2)
    specs = [pod("p", cpu=f"{i}")["spec"] for i in (1, 2, 3)]
    for spec in specs:
        memo.view(memo.key(spec), lambda spec=spec: parse_pod_spec(spec, obj="p"))
    assert len(memo) == 2


def test_a_spec_json_cannot_hold_is_parsed_each_time() -> None:
    memo = SpecMemo()
    spec = pod("p")["spec"]
    spec["containers"][0]["env"] = [{"name": "D", "value": object()}]
    key = memo.key(spec)
    assert not isinstance(key, bytes)
    assert memo.view(key, lambda: parse_pod_spec(spec, obj="p")) is not memo.view(
        key, lambda: parse_pod_spec(spec, obj="p")
    )
    assert memo.key(spec) == key  # still tells whether the spec changed


SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("resources", {"requests": {"cpu": "2"}}, id="pod-level-resources"),
        pytest.param("topologySpreadConstraints", SPREAD, id="topology-spread"),
    ],
)
def test_pods_differing_only_in_a_field_the_parse_reads_do_not_share_it(
    field: str, value: object
) -> None:
    plain = pod("plain", cpu="1")
    other = pod("other", cpu="1")
    other["spec"][field] = value
    cache = cache_with(plain, other)
    tasks = {t.name: t for t in cache.tasks.values()}
    assert tasks["plain"].spec is not tasks["other"].spec
    assert tasks["other"].spec == parse_pod_spec(other["spec"], obj="Pod default/other")
