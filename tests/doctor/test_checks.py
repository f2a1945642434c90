"""``sluice doctor``'s verdicts on scripted API answers: each check's ok, warn and fail,
and what it tells to do. The real API server judges the same checks in
``e2e/test_doctor.py``."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from scheduler.api.errors import AmbiguousError, InvalidObjectError, NotFoundError, ServerError
from scheduler.doctor.findings import Level
from scheduler.doctor.install_checks import check_crds, check_rbac, check_webhook
from scheduler.doctor.manifests import crd_documents, load_install
from scheduler.doctor.running_checks import check_lease, check_other_schedulers
from scheduler.doctor.server_checks import (
    Probe,
    check_apis,
    check_dra,
    check_gates,
    check_pod_level_resources,
    check_scheduling_gates,
    check_server,
    check_workload_api,
)
from tests.doctor.fake_api import FakeApi

pytestmark = pytest.mark.anyio

NS = "sluice-system"
NOW = datetime.datetime(2026, 11, 28, 12, 0, 0, tzinfo=datetime.UTC)


def forbidden(what: str = "") -> ServerError:
    error = ServerError(f"HTTP 403 Forbidden: {what}")
    error.code = 403
    return error


def probe(replies: dict[tuple[str, str], Any]) -> Probe:
    return Probe(FakeApi(replies), NS)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the server


@pytest.mark.parametrize(
    ("reply", "level", "said"),
    [
        pytest.param(
            {"major": "1", "minor": "36", "gitVersion": "v1.36.2"}, Level.OK, "v1.36.2", id="tested"
        ),
        pytest.param(
            {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
            Level.WARN,
            "before v1.34 resource.k8s.io/v1",
            id="old",
        ),
        pytest.param(
            AmbiguousError("connection refused"), Level.FAIL, "cannot be reached", id="away"
        ),
    ],
)
async def test_the_server(reply: Any, level: Level, said: str) -> None:
    finding = await check_server(probe({("GET", "/version"): reply}))
    assert finding.level is level
    assert said in finding.said


@pytest.mark.parametrize(
    ("gates", "served", "level", "said"),
    [
        pytest.param(
            b'kubernetes_feature_enabled{name="GenericWorkload",stage="ALPHA"} 1\n',
            {"kind": "Workload", "name": "workloads"},
            Level.OK,
            "Workload and PodGroup served (GenericWorkload on)",
            id="served",
        ),
        pytest.param(
            b'kubernetes_feature_enabled{name="GenericWorkload",stage="ALPHA"} 0\n',
            None,
            Level.WARN,
            "not served (GenericWorkload off)",
            id="off",
        ),
        pytest.param(forbidden(), None, Level.WARN, "not served:", id="gates unreadable"),
    ],
)
async def test_the_workload_api(gates: Any, served: Any, level: Level, said: str) -> None:
    replies: dict[tuple[str, str], Any] = {("GET", "/metrics"): gates}
    if served is not None:
        replies[("GET", "/apis/scheduling.k8s.io/v1alpha2")] = {
            "resources": [served, {"kind": "PodGroup", "name": "podgroups"}]
        }
    p = probe(replies)
    await check_gates(p)
    finding = await check_workload_api(p)
    assert finding.level is level
    assert said in finding.said
    if level is Level.WARN:
        assert "--runtime-config scheduling.k8s.io/v1alpha2=true" in finding.fix


async def test_gates_unreadable_say_what_to_do() -> None:
    finding = await check_gates(probe({("GET", "/metrics"): forbidden("get path /metrics")}))
    assert finding.level is Level.WARN
    assert "system:monitoring" in finding.fix


async def test_dra() -> None:
    resources = [
        {"kind": k, "name": n}
        for k, n in (
            ("ResourceClaim", "resourceclaims"),
            ("ResourceClaim", "resourceclaims/status"),
            ("ResourceSlice", "resourceslices"),
            ("DeviceClass", "deviceclasses"),
        )
    ]
    on = await check_dra(probe({("GET", "/apis/resource.k8s.io/v1"): {"resources": resources}}))
    assert on.level is Level.OK
    off = await check_dra(probe({}))
    assert off.level is Level.WARN and "resourceClaims wait" in off.said


@pytest.mark.parametrize(
    ("metrics", "dry_run", "level", "said"),
    [
        pytest.param(
            b'kubernetes_feature_enabled{name="PodLevelResources",stage="BETA"} 1\n',
            None,
            Level.OK,
            "on (gate PodLevelResources)",
            id="gate on",
        ),
        pytest.param(
            b'kubernetes_feature_enabled{name="PodLevelResources",stage="BETA"} 0\n',
            None,
            Level.WARN,
            "off (gate PodLevelResources)",
            id="gate off",
        ),
        pytest.param(
            forbidden(),
            {"spec": {"resources": {"requests": {"cpu": "10m"}}}},
            Level.OK,
            "on (a dry run of a pod kept it)",
            id="kept by a dry run",
        ),
        pytest.param(
            forbidden(), {"spec": {}}, Level.WARN, "off (a dry run of a pod kept it)", id="dropped"
        ),
        pytest.param(forbidden(), forbidden(), Level.WARN, "cannot tell", id="neither"),
    ],
)
async def test_pod_level_resources(metrics: Any, dry_run: Any, level: Level, said: str) -> None:
    replies: dict[tuple[str, str], Any] = {("GET", "/metrics"): metrics}
    if dry_run is not None:
        replies[("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All")] = dry_run
    p = probe(replies)
    await check_gates(p)
    finding = await check_pod_level_resources(p)
    assert finding.level is level, finding
    assert said in finding.said


async def test_scheduling_gates() -> None:
    p = probe({})
    p.version = (1, 36)
    assert (await check_scheduling_gates(p)).level is Level.OK
    p.version = (1, 28)
    assert (await check_scheduling_gates(p)).level is Level.WARN


async def test_apis_served() -> None:
    sluice = {
        "resources": [
            {"kind": "PodGroup", "name": "podgroups"},
            {"kind": "Queue", "name": "queues"},
        ]
    }
    volcano = {"resources": [{"kind": "Queue", "name": "queues"}]}
    findings = await check_apis(
        probe(
            {
                ("GET", "/apis/scheduling.sluice.dev/v1alpha1"): sluice,
                ("GET", "/apis/scheduling.volcano.sh/v1beta1"): volcano,
            }
        )
    )
    by = {f.check: f for f in findings}
    assert by["podgroup apis"].level is Level.OK
    assert by["podgroup apis"].said.startswith("served: Sluice (scheduling.sluice.dev/v1alpha1)")
    assert "not served: Volcano" in by["podgroup apis"].said
    assert "Volcano (scheduling.volcano.sh/v1beta1)" in by["queue apis"].said.split(";")[0]
    none = await check_apis(probe({}))
    assert [f.level for f in none] == [Level.FAIL, Level.FAIL]
    assert none[0].fix == "kubectl apply -f crds/"


# ---------------------------------------------------------------------------- the install

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _served_crd(doc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "spec": {**doc["spec"], "conversion": {"strategy": "None"}, **spec},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


async def test_crds() -> None:
    docs = {d["metadata"]["name"]: d for _, d in crd_documents()}
    queues, podgroups, topologies = (
        "queues.scheduling.sluice.dev",
        "podgroups.scheduling.sluice.dev",
        "topologies.scheduling.sluice.dev",
    )
    not_established = _served_crd(docs[topologies])
    not_established["status"]["conditions"][0]["status"] = "False"
    findings = await check_crds(
        probe(
            {
                ("GET", f"{CRDS}/{queues}"): _served_crd(docs[queues]),
                ("GET", f"{CRDS}/{podgroups}"): _served_crd(docs[podgroups], scope="Cluster"),
                ("GET", f"{CRDS}/{topologies}"): not_established,
            }
        )
    )
    by = {f.check.removeprefix("crd "): f for f in findings}
    assert by[queues].level is Level.OK
    assert by[podgroups].level is Level.FAIL
    assert by[podgroups].said == "differs from this Sluice's crds/podgroup.yaml at spec.scope"
    assert by[podgroups].fix == "kubectl apply --server-side -f crds/podgroup.yaml"
    assert by[topologies].level is Level.FAIL and "not established" in by[topologies].said
    missing = await check_crds(probe({}))
    assert {f.said for f in missing} == {"not installed"}


SA = f"/api/v1/namespaces/{NS}/serviceaccounts"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _answer(refuse: set[tuple[str, str, str]]) -> Any:
    def reply(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        a = body["spec"]["resourceAttributes"]
        key = (a["verb"], a["resource"], a.get("subresource", ""))
        return {"status": {"allowed": key not in refuse}}

    return reply


async def test_rbac_names_what_is_refused_and_where_the_rule_is() -> None:
    api = FakeApi(
        {
            ("POST", WHOAMI): {"status": {"userInfo": {"username": "admin"}}},
            ("GET", f"{SA}/sluice-scheduler"): {},
            ("GET", f"{SA}/sluice-controller"): {},
            ("POST", SSAR): _answer({("create", "pods", "binding"), ("update", "leases", "")}),
        }
    )
    findings = await check_rbac(Probe(api, NS), load_install())  # type: ignore[arg-type]
    by = {f.check: f for f in findings}
    scheduler = by[f"rbac {NS}/sluice-scheduler"]
    assert scheduler.level is Level.FAIL
    assert scheduler.said.startswith(
        f"may not create pods/binding, update coordination.k8s.io/leases in {NS} (2 of "
    )
    assert "impersonating the ServiceAccount" in scheduler.said
    assert scheduler.fix == (
        "kubectl apply -k manifests (the rules are in manifests/clusterrole.yaml, "
        "manifests/role.yaml)"
    )
    assert by[f"rbac {NS}/sluice-controller"].level is Level.OK
    impersonated = {c[4].get("Impersonate-User") for c in api.calls if c[1] == SSAR}
    assert impersonated == {
        f"system:serviceaccount:{NS}:sluice-scheduler",
        f"system:serviceaccount:{NS}:sluice-controller",
    }


async def test_rbac_as_the_account_itself_asks_without_impersonation() -> None:
    me = f"system:serviceaccount:{NS}:sluice-scheduler"
    api = FakeApi(
        {
            ("POST", WHOAMI): {"status": {"userInfo": {"username": me}}},
            ("GET", f"{SA}/sluice-scheduler"): {},
            ("GET", f"{SA}/sluice-controller"): NotFoundError("no"),
            ("POST", SSAR): _answer(set()),
        }
    )
    findings = await check_rbac(Probe(api, NS), load_install())  # type: ignore[arg-type]
    by = {f.check: f for f in findings}
    assert by[f"rbac {NS}/sluice-scheduler"].level is Level.OK
    assert "asked as the ServiceAccount itself" in by[f"rbac {NS}/sluice-scheduler"].said
    assert not any(c[4] for c in api.calls if c[1] == SSAR)
    assert by[f"rbac {NS}/sluice-controller"].said == "the ServiceAccount does not exist"


@pytest.mark.parametrize(
    ("sar", "level", "said"),
    [
        pytest.param(
            _answer(set()), Level.OK, "SubjectAccessReview (impersonation refused)", id="sar"
        ),
        pytest.param(forbidden(), Level.WARN, "cannot ask what it may do", id="neither"),
    ],
)
async def test_rbac_without_impersonation(sar: Any, level: Level, said: str) -> None:
    def ssar(body: dict[str, Any], headers: dict[str, str]) -> Any:
        raise forbidden("impersonate serviceaccounts")

    api = FakeApi(
        {
            ("POST", WHOAMI): {"status": {"userInfo": {"username": "dev"}}},
            ("GET", f"{SA}/sluice-scheduler"): {},
            ("GET", f"{SA}/sluice-controller"): {},
            ("POST", SSAR): ssar,
            ("POST", SAR): sar,
        }
    )
    findings = await check_rbac(Probe(api, NS), load_install())  # type: ignore[arg-type]
    assert {f.level for f in findings} == {level}
    assert all(said in f.said for f in findings)


WEBHOOK = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sluice-validation"
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
DRY_RUN = f"/apis/scheduling.sluice.dev/v1alpha1/namespaces/{NS}/podgroups?dryRun=All"


def _webhook(ca: str = "Q0E=") -> dict[str, Any]:
    service = {"namespace": NS, "name": "sluice-controller", "path": "/validate-podgroup"}
    return {
        "webhooks": [
            {
                "name": "podgroups.scheduling.sluice.dev",
                "clientConfig": {"service": service, "caBundle": ca},
            }
        ]
    }


def _slices(ready: bool) -> dict[str, Any]:
    return {"items": [{"endpoints": [{"conditions": {"ready": ready}}]}]}


@pytest.mark.parametrize(
    ("replies", "level", "said"),
    [
        pytest.param(
            {
                ("GET", WEBHOOK): _webhook(),
                (
                    "GET",
                    f"{SLICES}?labelSelector=kubernetes.io/service-name=sluice-controller",
                ): _slices(True),
                ("POST", DRY_RUN): InvalidObjectError(
                    'admission webhook "podgroups.scheduling.sluice.dev" denied the request: ...'
                ),
            },
            Level.OK,
            "has 1 ready endpoint(s); refused an invalid PodGroup in a dry run",
            id="healthy",
        ),
        pytest.param({}, Level.FAIL, "is not installed", id="not installed"),
        pytest.param(
            {
                ("GET", WEBHOOK): _webhook(),
                (
                    "GET",
                    f"{SLICES}?labelSelector=kubernetes.io/service-name=sluice-controller",
                ): _slices(True),
                ("POST", DRY_RUN): InvalidObjectError("spec.minMember: Invalid value: 0"),
            },
            Level.FAIL,
            "refused, but not by the webhook",
            id="refused by the schema only",
        ),
        pytest.param({("GET", WEBHOOK): _webhook(ca="")}, Level.FAIL, "no caBundle", id="no CA"),
        pytest.param(
            {
                ("GET", WEBHOOK): _webhook(),
                (
                    "GET",
                    f"{SLICES}?labelSelector=kubernetes.io/service-name=sluice-controller",
                ): _slices(False),
            },
            Level.FAIL,
            "has no ready endpoint",
            id="no endpoint",
        ),
        pytest.param(
            {
                ("GET", WEBHOOK): _webhook(),
                (
                    "GET",
                    f"{SLICES}?labelSelector=kubernetes.io/service-name=sluice-controller",
                ): _slices(True),
                ("POST", DRY_RUN): AmbiguousError(
                    "HTTP 500 InternalError: Internal error occurred: failed calling webhook "
                    '"podgroups.scheduling.sluice.dev": x509: unknown authority'
                ),
            },
            Level.FAIL,
            "the API server cannot call it",
            id="unreachable",
        ),
        pytest.param(
            {
                ("GET", WEBHOOK): _webhook(),
                (
                    "GET",
                    f"{SLICES}?labelSelector=kubernetes.io/service-name=sluice-controller",
                ): _slices(True),
                ("POST", DRY_RUN): {"kind": "PodGroup"},
            },
            Level.FAIL,
            "passed a dry run: the webhook was not called",
            id="not called",
        ),
    ],
)
async def test_the_webhook(replies: dict[tuple[str, str], Any], level: Level, said: str) -> None:
    finding = await check_webhook(probe(replies), load_install())
    assert finding.level is level, finding
    assert said in finding.said


LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
ALL_LEASES = "/apis/coordination.k8s.io/v1/leases?fieldSelector=metadata.name=sluice-scheduler"


def _lease(name: str, holder: str, seconds_ago: float, namespace: str = NS) -> dict[str, Any]:
    renewed = (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15},
    }


@pytest.mark.parametrize(
    ("here", "elsewhere", "level", "said"),
    [
        pytest.param([], [], Level.OK, "no Sluice holds a Lease", id="none"),
        pytest.param(
            [_lease("sluice-scheduler", "pod-a_1", 2), _lease("kube-x", "x", 1)],
            [],
            Level.OK,
            "sluice-scheduler held by pod-a_1, renewed 2 s ago",
            id="held",
        ),
        pytest.param(
            [_lease("sluice-scheduler-a", "pod-b_2", 300)],
            [],
            Level.WARN,
            "sluice-scheduler-a last held by pod-b_2, not renewed for 300 s",
            id="stale shard",
        ),
        pytest.param(
            [_lease("sluice-scheduler", "", 5)], [], Level.OK, "no Sluice holds", id="released"
        ),
        pytest.param(
            [],
            [_lease("sluice-scheduler", "other_3", 1, namespace="team")],
            Level.WARN,
            "another Sluice runs: Lease team/sluice-scheduler held by other_3",
            id="another install",
        ),
    ],
)
async def test_the_lease(here: list[Any], elsewhere: list[Any], level: Level, said: str) -> None:
    replies = {("GET", LEASES): {"items": here}, ("GET", ALL_LEASES): {"items": elsewhere}}
    finding = await check_lease(probe(replies), load_install(), NOW)
    assert finding.level is level, finding
    assert said in finding.said


def _event(reporter: str, instance: str, pod: str, reason: str = "Scheduled") -> dict[str, Any]:
    return {
        "metadata": {"uid": f"{instance}-{pod}"},
        "reason": reason,
        "reportingComponent": reporter,
        "reportingInstance": instance,
        "involvedObject": {"namespace": "ml", "name": pod},
    }


EVENTS = "/api/v1/events"
PODS = f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io/name=sluice-scheduler"


@pytest.mark.parametrize(
    ("name", "events", "level", "said"),
    [
        pytest.param(
            "sluice",
            [
                _event("sluice", "sluice-sluice-scheduler-5d9c7-abcde", "a"),  # a replica now
                _event("sluice", "sluice-sluice-scheduler-77f8c-zzzzz", "b"),  # one rolled away
                _event("sluice", "sluice-laptop", "c"),  # holds the Lease from outside
            ],
            Level.OK,
            "no scheduler but this Sluice",
            id="only this Sluice",
        ),
        pytest.param(
            "sluice",
            [_event("sluice", "sluice-control-plane-1", "d")],
            Level.WARN,
            "another scheduler answers to 'sluice': sluice-control-plane-1: 1 event(s), e.g. "
            "Scheduled ml/d",
            id="a kube-scheduler profile named sluice",
        ),
        pytest.param(
            "gpu",
            [
                _event("gpu", "gpu-master-0", "e"),
                _event("gpu", "gpu-master-0", "f", "FailedScheduling"),
            ],
            Level.WARN,
            "gpu-master-0: 2 event(s)",
            id="another name: any reporter of it",
        ),
    ],
)
async def test_other_schedulers(name: str, events: list[Any], level: Level, said: str) -> None:
    replies = {
        ("GET", f"{EVENTS}?fieldSelector=reportingComponent={name}&limit=500"): {"items": events},
        ("GET", f"{EVENTS}?fieldSelector=source={name}&limit=500"): {"items": []},
        ("GET", PODS): {"items": [{"metadata": {"name": "sluice-scheduler-5d9c7-abcde"}}]},
        ("GET", LEASES): {"items": [_lease("sluice-scheduler", "laptop_9f", 1)]},
    }
    finding = await check_other_schedulers(probe(replies), load_install(), name)
    assert finding.level is level, finding
    assert said in finding.said


async def test_other_schedulers_unreadable() -> None:
    replies = {("GET", f"{EVENTS}?fieldSelector=reportingComponent=sluice&limit=500"): forbidden()}
    finding = await check_other_schedulers(probe(replies), load_install(), "sluice")
    assert finding.level is Level.WARN and "cannot list Events" in finding.said
