"""manifests/, the Dockerfile and requirements.lock: they parse and say what they must."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scheduler.api.group_apis import APIS, GroupApi
from scheduler.config import parse_configuration
from scheduler.controllers.operator import DEFAULT_CERT_DIR
from scheduler.controllers.validation import validate_queue
from scheduler.kube.informers import SCHEDULER_RESOURCES
from scheduler.kube.resource_paths import pod_groups_of, queues_of

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "sluice-system"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "PriorityClass",
    "Queue",
}
RUNTIME_ROOTS = [
    "anyio",
    "structlog",
    "prometheus-client",
    "pyyaml",
    "numpy",
    "tqdm",
    "aiohttp",
    "kubernetes-asyncio",
    "kopf",
    "cryptography",
]


def yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def everything() -> list[dict[str, Any]]:
    return [
        doc for path in yaml_files() if path.name != "kustomization.yaml" for doc in documents(path)
    ]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in everything() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


# --------------------------------------------------------------------------------------------
# Every file


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_yaml_parses_into_named_objects(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)
        if doc["kind"] in ("Kustomization", "Component"):
            continue
        meta = doc["metadata"]
        assert meta["name"]
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{doc['kind']} {meta['name']} is cluster-scoped"
        else:
            assert meta.get("namespace") == NAMESPACE, f"{doc['kind']} {meta['name']}"


@pytest.mark.parametrize(
    "kustomization",
    sorted(MANIFESTS.rglob("kustomization.yaml")),
    ids=lambda p: str(p.relative_to(MANIFESTS)),
)
def test_kustomization_lists_existing_files(kustomization: Path) -> None:
    doc = yaml.safe_load(kustomization.read_text())
    assert doc["kind"] in ("Kustomization", "Component")
    listed = doc["resources"]
    assert len(set(listed)) == len(listed)
    root = kustomization.parent
    for entry in listed:
        target = root / entry
        if target.is_dir():  # another kustomization (the scheduler's, a shard's)
            assert (target / "kustomization.yaml").is_file(), entry
            continue
        assert target.is_file(), f"{entry} listed in {kustomization} does not exist"
        assert target.resolve().is_relative_to(root.resolve()), entry
    # Nothing forgotten: every manifest beside it is listed, except the optional certificate.
    beside = {p.name for p in root.glob("*.yaml")} - {"kustomization.yaml"}
    assert beside - set(listed) <= {"certificate.yaml"}
    for component in doc.get("components") or ():
        assert (root / component / "kustomization.yaml").is_file(), component


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def test_kustomize_builds() -> None:
    for directory in (MANIFESTS, MANIFESTS / "examples"):
        assert kustomize(directory)


def test_the_shards_component(tmp_path: Path) -> None:
    """manifests/ with its ``components: [shards]`` uncommented: the one scheduler
    Deployment gives way to one per shard, each ``--shard NAME`` with pods of its own
    label and the image of the base; the configuration is the base's with every shard
    listed (each a Deployment)."""
    overlay = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, overlay)
    kustomization = overlay / "kustomization.yaml"
    text = kustomization.read_text()
    assert "# components:\n# - shards\n" in text
    kustomization.write_text(text.replace("# components:\n# - shards\n", "components:\n- shards\n"))
    built = kustomize(overlay)
    schedulers = {
        d["metadata"]["name"]: d
        for d in built
        if d["kind"] == "Deployment" and d["metadata"]["name"] != "sluice-controller"
    }
    text = next(d for d in built if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    config = parse_configuration(yaml.safe_load(text))
    assert {f"sluice-scheduler-{s.name}" for s in config.shards} == set(schedulers)
    default = parse_configuration(
        yaml.safe_load(one("ConfigMap", "sluice-scheduler-config")["data"]["config.yaml"])
    )
    assert dataclasses.replace(config, shards=()) == default
    selectors: list[dict[str, str]] = []
    for shard in config.shards:
        deployment = schedulers[f"sluice-scheduler-{shard.name}"]
        main = container(deployment)
        assert main["args"][-4:] == ["--shard", shard.name, "-v", "2"]
        assert main["image"] == "sluice:0.1.0"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["scheduling.sluice.dev/shard"] == shard.name
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        selectors.append(selector)
    assert len({tuple(sorted(s.items())) for s in selectors}) == len(selectors)


# --------------------------------------------------------------------------------------------
# Deployments


RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("name", ["sluice-scheduler", "sluice-controller"])
def test_deployment_security_context_is_restricted(name: str) -> None:
    deployment = one("Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key, value in RESTRICTED.items():
        assert container(deployment)["securityContext"][key] == value, key
    assert pod["serviceAccountName"] == name
    assert deployment["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_scheduler_deployment() -> None:
    deployment = one("Deployment", "sluice-scheduler")
    assert deployment["spec"]["replicas"] == 2
    main = container(deployment)
    assert main["args"] == [
        "run",
        "--config",
        "/etc/sluice/config.yaml",
        "--leader-elect",
        "-v",
        "2",
    ]
    assert main["ports"] == [{"name": "metrics", "containerPort": 10259, "protocol": "TCP"}]
    # The port is TLS (issue 40 item 4); the probes' paths are always allowed.
    assert main["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "metrics",
        "scheme": "HTTPS",
    }
    assert main["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "metrics",
        "scheme": "HTTPS",
    }
    assert main["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"memory": "2Gi"},
    }
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert mounts["config"] == "/etc/sluice"
    assert volumes["config"]["configMap"]["name"] == "sluice-scheduler-config"
    assert "config.yaml" in one("ConfigMap", "sluice-scheduler-config")["data"]


def test_configmap_holds_the_default_configuration() -> None:
    text = one("ConfigMap", "sluice-scheduler-config")["data"]["config.yaml"]
    config = parse_configuration(yaml.safe_load(text))
    assert config.scheduler_name == "sluice"
    assert list(config.actions) == [
        "enqueue",
        "elect",
        "allocate",
        "preempt",
        "reclaim",
        "backfill",
        "reserve",
        "dissolve",
    ]
    assert config.plugin_names() == [
        "priority",
        "gang",
        "conformance",
        "predicates",
        "volumerestrictions",
        "nodevolumelimits",
        "volumebinding",
        "volumezone",
        "podtopologyspread",
        "gpushare",
        "dra",
        "proportion",
        "topology",
        "reservation",
        "interpodaffinity",
        "nodeorder",
    ]
    assert config.gate("SchedulerAsyncPreemption") is True


def test_controller_deployment() -> None:
    deployment = one("Deployment", "sluice-controller")
    assert deployment["spec"]["replicas"] == 1
    main = container(deployment)
    assert main["args"] == ["controller"]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"webhook": 9443, "health": 8080}
    assert main["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "health",
        "scheme": "HTTP",
    }
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert mounts["webhook-cert"] == DEFAULT_CERT_DIR
    assert volumes["webhook-cert"]["secret"]["secretName"] == "sluice-webhook-cert"


@pytest.mark.parametrize(
    ("service", "deployment"),
    [
        ("sluice-scheduler-metrics", "sluice-scheduler"),
        ("sluice-controller", "sluice-controller"),
    ],
)
def test_services_reach_their_pods(service: str, deployment: str) -> None:
    svc = one("Service", service)
    dep = one("Deployment", deployment)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    port_names = {p["name"] for p in container(dep)["ports"]}
    for port in svc["spec"]["ports"]:
        assert port["targetPort"] in port_names


# --------------------------------------------------------------------------------------------
# RBAC


def rules(name: str) -> list[dict[str, Any]]:
    return one("ClusterRole", name)["rules"]


def grants(rule_list: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rule_list
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


PORT_READERS = {"sluice-metrics-reader": ["/metrics"], "sluice-live-page-viewer": ["/ui", "/ui/*"]}
"""The ClusterRoles of clusterrole-port.yaml: the paths of the guarded port each allows."""


def test_no_role_grants_wildcards() -> None:
    roles = [d for d in everything() if d["kind"] in ("ClusterRole", "Role")]
    assert {r["metadata"]["name"] for r in roles} == {
        "sluice-scheduler",
        "sluice-controller",
        "sluice-scheduler-leader-election",
        *PORT_READERS,
    }
    for role in roles:
        if role["metadata"]["name"] in PORT_READERS:
            continue
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{role['metadata']['name']}: {key} {rule[key]}"
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule or rule["resourceNames"]


@pytest.mark.parametrize(("name", "paths"), sorted(PORT_READERS.items()))
def test_port_readers_may_get_their_paths_only(name: str, paths: list[str]) -> None:
    (rule,) = rules(name)
    assert rule == {"nonResourceURLs": paths, "verbs": ["get"]}
    assert not [d for d in everything() if d.get("roleRef", {}).get("name") == name]  # unbound


@pytest.mark.parametrize(
    "grant",
    [
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "pods/binding", "create"),
        ("", "pods/status", "patch"),
        ("", "pods/eviction", "create"),
        ("", "nodes", "watch"),
        ("", "events", "create"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("policy", "poddisruptionbudgets", "watch"),
        ("scheduling.sluice.dev", "podgroups", "watch"),
        ("scheduling.sluice.dev", "queues", "watch"),
        ("scheduling.sluice.dev", "topologies", "watch"),
        ("scheduling.sluice.dev", "podgroups/status", "patch"),
        ("scheduling.sluice.dev", "queues/status", "update"),
        # the guarded port's reviews (system:auth-delegator's rules)
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ],
    ids=lambda g: f"{g[0] or 'core'}/{g[1]}:{g[2]}",
)
def test_scheduler_role_grants(grant: tuple[str, str, str]) -> None:
    assert grant in grants(rules("sluice-scheduler"))


def test_scheduler_role_writes_no_spec_and_no_nodes() -> None:
    granted = grants(rules("sluice-scheduler"))
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    written = {g for g in granted if g[1] in ("nodes", "podgroups", "queues") and g[2] in writes}
    # Volcano's PodGroup CRD has no status subresource: its status is patched with it.
    assert written == {("scheduling.volcano.sh", "podgroups", "patch")}
    assert not {g for g in granted if g[1] == "secrets"}


@pytest.mark.parametrize(
    "grant",
    [
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("apiregistration.k8s.io", "apiservices", "watch"),
    ],
    ids=lambda g: f"{g[0]}/{g[1]}:{g[2]}",
)
def test_scheduler_role_reads_whether_other_schedulers_apis_are_installed(
    grant: tuple[str, str, str],
) -> None:
    assert grant in grants(rules("sluice-scheduler"))


@pytest.mark.parametrize("api", APIS, ids=[api.name for api in APIS])
def test_scheduler_role_reads_and_writes_the_status_of_every_gang_api(api: GroupApi) -> None:
    """Every gang API's row (scheduler/api/group_apis) has its rules: its PodGroups and
    Queues watched, their status patched (with the object where its PodGroup has no status
    subresource). A fifth API without them fails here, not with a 403 in a cluster."""
    granted = grants(rules("sluice-scheduler"))
    groups = pod_groups_of(api)
    status = f"{groups.plural}/status" if groups.status_subresource else groups.plural
    needed = {(api.group, groups.plural, "watch"), (api.group, status, "patch")}
    if api.queue_kind:
        queues = queues_of(api).plural
        needed |= {(api.group, queues, "watch"), (api.group, f"{queues}/status", "patch")}
    assert sorted(needed - granted) == []


def test_scheduler_role_only_reads_crds_and_api_services() -> None:
    granted = grants(rules("sluice-scheduler"))
    kinds = ("customresourcedefinitions", "apiservices", "workloads")
    assert {g[2] for g in granted if g[1] in kinds} == {"get", "list", "watch"}


def test_scheduler_role_watches_every_kind_the_informers_watch() -> None:
    granted = grants(rules("sluice-scheduler"))
    for resource in SCHEDULER_RESOURCES:
        for verb in ("list", "watch"):
            assert (resource.group, resource.plural, verb) in granted, (resource.plural, verb)


def test_scheduler_role_writes_of_volumes_are_patches_of_claims_and_pvs() -> None:
    """VolumeBinding's PreBind patches a PV's claimRef or a claim's selected-node and
    reads them back after a lost reply; nothing else of storage is written."""
    granted = grants(rules("sluice-scheduler"))
    storage = {
        g
        for g in granted
        if g[1] in ("persistentvolumeclaims", "persistentvolumes") or g[0] == "storage.k8s.io"
    }
    writes = {g for g in storage if g[2] not in ("get", "list", "watch")}
    assert writes == {
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumes", "patch"),
    }


def test_leases_only_in_the_own_namespace() -> None:
    role = one("Role", "sluice-scheduler-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == {
        ("coordination.k8s.io", "leases", verb)
        for verb in ("get", "list", "watch", "create", "update")  # a follower watches it
    }
    assert all(g[1] != "leases" for g in grants(rules("sluice-scheduler")))


def test_controller_role_writes_only_what_it_must() -> None:
    """The default Queue, kopf's events, and the pod grouper's PodGroups and pod labels:
    nothing else is written, nothing deleted, no CRDs read."""
    granted = grants(rules("sluice-controller"))
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    assert {g for g in granted if g[2] in writes} == {
        ("scheduling.sluice.dev", "queues", "create"),
        ("", "events", "create"),
        ("scheduling.sluice.dev", "podgroups", "create"),
        ("scheduling.sluice.dev", "podgroups", "patch"),
        ("", "pods", "patch"),
    }
    assert not {g for g in granted if g[1] == "customresourcedefinitions"}
    assert ("", "namespaces", "get") in granted


@pytest.mark.parametrize(
    ("group", "resource"),
    [
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("jobset.x-k8s.io", "jobsets"),
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "tfjobs"),
        ("kubeflow.org", "jaxjobs"),
        ("kubeflow.org", "mpijobs"),
        ("ray.io", "rayclusters"),
        ("ray.io", "rayjobs"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("", "pods"),
    ],
    ids=lambda v: v or "core",
)
def test_controller_reads_the_owners_it_knows(group: str, resource: str) -> None:
    assert (group, resource, "get") in grants(rules("sluice-controller"))


def test_every_owner_kind_with_a_gang_rule_is_readable() -> None:
    from scheduler.controllers.gang_rules import RULES

    granted = {(g, r) for g, r, v in grants(rules("sluice-controller")) if v == "get"}
    plurals = {
        "Job": "jobs",
        "JobSet": "jobsets",
        "PyTorchJob": "pytorchjobs",
        "TFJob": "tfjobs",
        "JAXJob": "jaxjobs",
        "MPIJob": "mpijobs",
        "RayCluster": "rayclusters",
        "RayJob": "rayjobs",
        "LeaderWorkerSet": "leaderworkersets",
        "Deployment": "deployments",
        "StatefulSet": "statefulsets",
    }
    assert {(group, plurals[kind]) for group, kind in RULES} <= granted


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("ClusterRoleBinding", "sluice-scheduler"),
        ("ClusterRoleBinding", "sluice-controller"),
        ("RoleBinding", "sluice-scheduler-leader-election"),
    ],
)
def test_bindings_name_existing_roles_and_accounts(kind: str, name: str) -> None:
    binding = one(kind, name)
    role_kind = binding["roleRef"]["kind"]
    one(role_kind, binding["roleRef"]["name"])
    for subject in binding["subjects"]:
        assert subject["kind"] == "ServiceAccount"
        assert subject["namespace"] == NAMESPACE
        one("ServiceAccount", subject["name"])


# --------------------------------------------------------------------------------------------
# Webhook and certificate


def test_webhook_configuration() -> None:
    config = one("ValidatingWebhookConfiguration", "sluice-validation")
    service = one("Service", "sluice-controller")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/sluice-webhook-cert"
    )
    plurals = set()
    for webhook in config["webhooks"]:
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert "caBundle" not in webhook["clientConfig"]
        ref = webhook["clientConfig"]["service"]
        assert (ref["namespace"], ref["name"]) == (NAMESPACE, "sluice-controller")
        assert ref["port"] in {p["port"] for p in service["spec"]["ports"]}
        (rule,) = webhook["rules"]
        assert rule["apiGroups"] == ["scheduling.sluice.dev"]
        assert rule["apiVersions"] == ["v1alpha1"]
        assert rule["operations"] == ["CREATE", "UPDATE"]
        plurals.update(rule["resources"])
    assert plurals == {"podgroups", "queues"}


def test_certificate_serves_the_controller_service() -> None:
    certificate = one("Certificate", "sluice-webhook-cert")
    issuer = one("Issuer", certificate["spec"]["issuerRef"]["name"])
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["secretName"] == "sluice-webhook-cert"
    assert f"sluice-controller.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]


# --------------------------------------------------------------------------------------------
# Examples


def test_example_priority_classes() -> None:
    assert one("PriorityClass", "high")["value"] == 1000
    assert one("PriorityClass", "low")["value"] == 100


def test_example_queues_pass_the_webhook() -> None:
    queues = [d for d in everything() if d["kind"] == "Queue"]
    assert len(queues) == 2
    existing = {"default": {"spec": {}}}
    for queue in queues:
        assert validate_queue(queue, existing) == [], queue["metadata"]["name"]


# --------------------------------------------------------------------------------------------
# Image and lock


def lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "requirements.lock").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        assert match, f"not an exact pin: {raw!r}"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_lock_pins_the_runtime_dependencies_and_their_requirements() -> None:
    pins = lock()
    assert {canonicalize_name(n) for n in RUNTIME_ROOTS} <= pins.keys()
    env = {"extra": ""}
    for name in pins:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            pytest.fail(f"{name} is locked but not installed in this environment")
        assert dist.version == pins[name], (
            f"{name}: locked {pins[name]}, installed {dist.version}; regenerate requirements.lock"
        )
        for requirement in map(Requirement, dist.requires or []):
            if requirement.marker is None or requirement.marker.evaluate(env):
                assert canonicalize_name(requirement.name) in pins, f"{name} needs {requirement}"


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    instructions = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    froms = [line for line in instructions if line.startswith("FROM ")]
    assert froms == ["FROM ${BUILD_IMAGE} AS builder", "FROM ${RUNTIME_IMAGE}"]
    assert "ARG BUILD_IMAGE=python:3.11-slim" in instructions
    assert "ARG RUNTIME_IMAGE=python:3.11-slim" in instructions
    # Nothing fetched while building: only the wheelhouse, with no index.
    assert "PIP_NO_INDEX=1 \\" in instructions
    assert "COPY ${WHEELHOUSE} /wheels" in instructions
    assert "RUN /opt/sluice/bin/pip install --quiet --requirement requirements.lock" in instructions
    assert any(
        i.startswith("RUN /opt/sluice/bin/pip install --quiet --no-deps .") for i in instructions
    )
    assert "&& /opt/sluice/bin/pip uninstall --quiet --yes pip setuptools \\" in instructions
    assert "COPY --from=builder /opt/sluice /opt/sluice" in instructions
    final = instructions[instructions.index("FROM ${RUNTIME_IMAGE}") :]
    assert not [i for i in final if i.startswith("RUN ")]  # the runtime base has no shell
    assert "USER 65532:65532" in final
    assert instructions[-2:] == ['ENTRYPOINT ["/opt/sluice/bin/sluice"]', 'CMD ["run"]']


def test_build_requirements_pin_the_build_backend() -> None:
    text = (ROOT / "image" / "build-requirements.lock").read_text()
    pins = dict(line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    assert "hatchling" in pins
    build_system = (ROOT / "pyproject.toml").read_text().split("[build-system]")[1]
    assert 'requires = ["hatchling' in build_system


def test_dockerignore() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv", "tests", ".git"} <= ignored
    assert (
        not {
            "scheduler",
            "crds",
            ".wheelhouse",
            "pyproject.toml",
            "README.md",
            "requirements.lock",
        }
        & ignored
    )


@pytest.mark.parametrize(
    "grant",
    [("batch", "jobs", "list"), ("scheduling.k8s.io", "podgroups", "list")],
    ids=lambda g: f"{g[0]}/{g[1]}:{g[2]}",
)
def test_controller_lists_what_tells_it_a_jobs_pods_are_in_a_group(
    grant: tuple[str, str, str],
) -> None:
    """A JobSet's Jobs and the Job controller's PodGroups (scheduler.controllers.claimed_jobs)."""
    assert grant in grants(rules("sluice-controller"))
