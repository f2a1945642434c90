"""``sluice doctor``'s pure parts: what ``manifests/`` grants each ServiceAccount (read
from the RBAC objects, so the list cannot drift), CRDs compared with ``crds/``, feature
gates read from ``/metrics``, and the lines it prints."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.errors import InvalidInputError
from scheduler.doctor.crds import crd_differences, established
from scheduler.doctor.feature_gates import feature_gates, minor_version
from scheduler.doctor.findings import Finding, Level, exit_code, render_json, render_text
from scheduler.doctor.manifests import Access, crd_documents, load_install, manifests_directory

ROOT = Path(__file__).resolve().parents[2]


def _rules(path: str, name: str) -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "manifests" / path).read_text())
    return next(d for d in docs if d and d["metadata"]["name"] == name)["rules"]


def _count(rules: list[dict[str, Any]]) -> int:
    return sum(len(r["apiGroups"]) * len(r["resources"]) * len(r["verbs"]) for r in rules)


def test_every_rule_of_the_manifests_is_checked() -> None:
    install = load_install()
    scheduler = install.accounts["sluice-scheduler"]
    cluster_wide = [a for a in scheduler if not a.namespace]
    assert len(cluster_wide) == _count(_rules("clusterrole.yaml", "sluice-scheduler"))
    leases = [a for a in scheduler if a.namespace]
    assert len(leases) == _count(_rules("role.yaml", "sluice-scheduler-leader-election"))
    assert {a.namespace for a in leases} == {"sluice-system"}
    controller = install.accounts["sluice-controller"]
    assert len(controller) == _count(_rules("controller-rbac.yaml", "sluice-controller"))
    assert Access("create", "", "pods", "binding", "", "clusterrole.yaml") in scheduler
    assert Access(
        "create", "authentication.k8s.io", "tokenreviews", "", "", "clusterrole.yaml"
    ) in (scheduler)
    assert str(Access("update", "coordination.k8s.io", "leases", "", "ns")) == (
        "update coordination.k8s.io/leases in ns"
    )
    assert str(Access("create", "", "pods", "binding")) == "create pods/binding"


def test_the_install_moves_to_another_namespace() -> None:
    install = load_install("sched")
    leases = {a.namespace for a in install.accounts["sluice-scheduler"] if a.namespace}
    assert leases == {"sched"}
    assert install.webhook is not None
    services = {h["clientConfig"]["service"]["namespace"] for h in install.webhook["webhooks"]}
    assert services == {"sched"}
    assert install.scheduler_selector == {"app.kubernetes.io/name": "sluice-scheduler"}
    assert load_install().webhook["webhooks"][0]["clientConfig"]["service"]["namespace"] == (  # type: ignore[index]
        "sluice-system"
    )


def test_a_binding_to_a_role_not_in_the_manifests_is_refused(tmp_path: Path) -> None:
    source = manifests_directory()
    for entry in source.iterdir():  # type: ignore[union-attr]
        if entry.name.endswith(".yaml"):
            (tmp_path / entry.name).write_text(entry.read_text())
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "deployment.yaml").write_text(
        (source / "scheduler" / "deployment.yaml").read_text()  # type: ignore[operator]
    )
    binding = yaml.safe_load((tmp_path / "clusterrolebinding.yaml").read_text())
    binding["roleRef"]["name"] = "system:auth-delegator"
    (tmp_path / "clusterrolebinding.yaml").write_text(yaml.safe_dump(binding))
    with pytest.raises(InvalidInputError, match=r"clusterrolebinding.yaml.*system:auth-delegator"):
        load_install(directory=tmp_path)


def _queue_crd() -> dict[str, Any]:
    ((_, crd),) = [(n, d) for n, d in crd_documents() if n == "queue.yaml"]
    return crd


@pytest.mark.parametrize(
    ("change", "differences"),
    [
        pytest.param(
            lambda s: s.update(conversion={"strategy": "None"}), [], id="the server's default"
        ),
        pytest.param(lambda s: None, [], id="the same"),
        pytest.param(
            lambda s: s["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                "properties"
            ].pop("weight"),
            [
                "spec.versions[v1alpha1].schema.openAPIV3Schema.properties.spec.properties.weight "
                "(missing on the server)"
            ],
            id="a field missing",
        ),
        pytest.param(
            lambda s: s["versions"].append({"name": "v1", "served": True, "storage": False}),
            ["spec.versions[v1] (not in the file)"],
            id="a version more",
        ),
        pytest.param(
            lambda s: s["names"].update(shortNames=["q", "qu"]),
            ["spec.names.shortNames (2 items on the server, 1 in the file)"],
            id="a short name more",
        ),
        pytest.param(
            lambda s: s["names"].update(shortNames=["qu"]),
            ["spec.names.shortNames[0]"],
            id="a short name changed",
        ),
        pytest.param(
            lambda s: s.update(conversion={"strategy": "Webhook"}),
            ["spec.conversion.strategy"],
            id="a conversion webhook",
        ),
    ],
)
def test_crd_differences(change: Any, differences: list[str]) -> None:
    crd = _queue_crd()
    server = copy.deepcopy(crd["spec"])
    server.setdefault("conversion", {"strategy": "None"})
    change(server)
    assert crd_differences(crd["spec"], server) == differences


def test_established() -> None:
    assert established({"status": {"conditions": [{"type": "Established", "status": "True"}]}})
    assert not established({"status": {"conditions": [{"type": "Established", "status": "False"}]}})
    assert not established({})


def test_feature_gates_from_metrics() -> None:
    text = (
        "# HELP kubernetes_feature_enabled [BETA] ...\n"
        'kubernetes_feature_enabled{name="PodLevelResources",stage="BETA"} 1\n'
        'kubernetes_feature_enabled{name="GenericWorkload",stage="ALPHA"} 0\n'
        'kubernetes_feature_enabled{stage="",name="DynamicResourceAllocation"} 1\n'
        'apiserver_request_total{code="200"} 5\n'
    )
    assert feature_gates(text) == {
        "PodLevelResources": True,
        "GenericWorkload": False,
        "DynamicResourceAllocation": True,
    }


@pytest.mark.parametrize(
    ("version", "minor"),
    [
        pytest.param({"major": "1", "minor": "36"}, (1, 36), id="plain"),
        pytest.param({"major": "1", "minor": "34+"}, (1, 34), id="a distribution's"),
        pytest.param({"gitVersion": "v1.36.2"}, None, id="no fields"),
    ],
)
def test_minor_version(version: dict[str, str], minor: tuple[int, int] | None) -> None:
    assert minor_version(version) == minor


def test_one_line_per_check_and_the_exit_code() -> None:
    findings = [
        Finding("api server", Level.OK, "v1.36.2"),
        Finding(
            "crd queues.scheduling.sluice.dev",
            Level.FAIL,
            "not installed",
            "kubectl apply -f crds/",
        ),
        Finding("dra", Level.WARN, "not served"),
    ]
    assert render_text(findings).splitlines() == [
        "ok    api server                        v1.36.2",
        "fail  crd queues.scheduling.sluice.dev  not installed -> kubectl apply -f crds/",
        "warn  dra                               not served",
        "3 checks: 1 ok, 1 warn, 1 fail",
    ]
    assert exit_code(findings) == 1
    assert exit_code([f for f in findings if f.level is not Level.FAIL]) == 0
    assert '"level": "fail"' in render_json(findings)
