"""The API server's pod rules in the embedded cluster: the SchedulingGated condition at
creation and what an update may change (each row checked against kube-apiserver
v1.36.2 with the same writes)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.errors import InvalidObjectError
from scheduler.sim.store import ObjectStore
from tests.sim.sim_builders import pod


def _store() -> ObjectStore:
    return ObjectStore(lambda: 1_767_225_600.0)


def test_a_gated_pod_is_created_with_the_servers_scheduling_gated_condition() -> None:
    created = _store().create(pod("a", gates=["kueue.x-k8s.io/admission"]))
    (condition,) = created["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "False"
    assert condition["reason"] == "SchedulingGated"
    assert condition["message"] == "Scheduling is blocked due to non-empty scheduling gates"


def test_a_pod_without_gates_gets_no_condition() -> None:
    assert "conditions" not in _store().create(pod("a"))["status"]


Spec = dict[str, Any]
UPDATES: list[tuple[str, Spec, Spec, str]] = [
    # (id, spec fields before, spec fields after, error substring or "" for accepted)
    ("gate-removed", {"schedulingGates": [{"name": "a"}, {"name": "b"}]},
     {"schedulingGates": [{"name": "b"}]}, ""),
    ("all-gates-removed", {"schedulingGates": [{"name": "a"}]}, {}, ""),
    ("gate-added", {"schedulingGates": [{"name": "a"}]},
     {"schedulingGates": [{"name": "a"}, {"name": "b"}]},
     "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new "
     "scheduling gate 'b'"),
    ("gate-added-to-ungated", {}, {"schedulingGates": [{"name": "b"}]},
     "spec.schedulingGates[0].name: Forbidden"),
    ("selector-added-while-gated", {"schedulingGates": [{"name": "a"}]},
     {"schedulingGates": [{"name": "a"}], "nodeSelector": {"pool": "x"}}, ""),
    ("selector-added-with-last-gate-removed", {"schedulingGates": [{"name": "a"}]},
     {"nodeSelector": {"pool": "x"}}, ""),
    ("selector-changed-while-gated",
     {"schedulingGates": [{"name": "a"}], "nodeSelector": {"pool": "x"}},
     {"schedulingGates": [{"name": "a"}], "nodeSelector": {"pool": "y"}},
     "only additions to spec.nodeSelector are allowed"),
    ("selector-added-ungated", {}, {"nodeSelector": {"pool": "x"}},
     "spec: Forbidden: pod updates may not change fields other than"),
    ("affinity-while-gated", {"schedulingGates": [{"name": "a"}]},
     {"schedulingGates": [{"name": "a"}], "affinity": {"nodeAffinity": {}}}, ""),
    ("toleration-added", {}, {"tolerations": [{"key": "k", "operator": "Exists"}]}, ""),
    ("toleration-changed", {"tolerations": [{"key": "k", "operator": "Exists"}]},
     {"tolerations": [{"key": "j", "operator": "Exists"}]},
     "spec.tolerations: Forbidden"),
    ("image-changed", {}, {"containers": [{"name": "main", "image": "v2"}]}, ""),
    ("container-resources-changed", {},
     {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
     "spec: Forbidden"),
    ("priority-changed", {}, {"priority": 5}, "spec: Forbidden"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "after", "error"), [u[1:] for u in UPDATES], ids=[u[0] for u in UPDATES]
)
def test_what_a_pod_update_may_change(before: Spec, after: Spec, error: str) -> None:
    store = _store()
    created = store.create({**pod("a"), "spec": {**pod("a")["spec"], **before}})
    spec = {k: v for k, v in created["spec"].items() if k not in before}
    body = {**created, "spec": {**spec, **after}}
    if not error:
        assert store.replace(body)["spec"] == body["spec"]
        return
    with pytest.raises(InvalidObjectError) as raised:
        store.replace(body)
    assert error in str(raised.value)
    assert raised.value.causes, "the refusal names the field"


def test_a_patch_through_the_main_resource_obeys_the_same_rules() -> None:
    store = _store()
    store.create(pod("a"))
    with pytest.raises(InvalidObjectError, match="spec: Forbidden"):
        store.patch("Pod", "default", "a", {"spec": {"nodeSelector": {"pool": "x"}}})
    assert store.patch("Pod", "default", "a", {"metadata": {"labels": {"x": "1"}}})


def test_label_keys_are_merged_into_the_selectors_at_creation() -> None:
    """As kube-apiserver v1.36.2 does (MatchLabelKeysInPodAffinity and
    MatchLabelKeysInPodTopologySpreadSelectorMerge): the pod's own values join its
    selectors; a key it does not have adds nothing."""
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
        "matchLabelKeys": ["version", "absent"],
        "mismatchLabelKeys": ["team"],
    }
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
        "matchLabelKeys": ["version"],
    }
    raw = pod("a")
    raw["metadata"]["labels"] = {"app": "web", "version": "v2", "team": "x"}
    raw["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    raw["spec"]["topologySpreadConstraints"] = [spread]
    created = _store().create(raw)
    anti = created["spec"]["affinity"]["podAntiAffinity"]
    [merged] = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert merged["labelSelector"]["matchExpressions"] == [
        {"key": "version", "operator": "In", "values": ["v2"]},
        {"key": "team", "operator": "NotIn", "values": ["x"]},
    ]
    [constraint] = created["spec"]["topologySpreadConstraints"]
    assert constraint["labelSelector"]["matchExpressions"] == [
        {"key": "version", "operator": "In", "values": ["v2"]}
    ]


def test_pod_level_requests_below_the_containers_are_refused() -> None:
    """As kube-apiserver v1.36.2: ``spec.resources.requests[cpu]: Invalid value: "1": must
    be greater than or equal to aggregate container requests of 64250m``."""
    raw = pod("a")
    raw["spec"]["containers"] = [
        {"name": "a", "resources": {"requests": {"cpu": "64"}}},
        {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
    ]
    raw["spec"]["resources"] = {"requests": {"cpu": "1"}}
    with pytest.raises(InvalidObjectError) as info:
        _store().create(raw)
    assert "spec.resources.requests[cpu]" in str(info.value)
    assert "aggregate container requests of 64250m" in str(info.value)
    raw["spec"]["resources"] = {"requests": {"cpu": "65"}}
    assert _store().create(raw)["spec"]["resources"]["requests"]["cpu"] == "65"
