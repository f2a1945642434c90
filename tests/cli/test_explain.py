"""``sluice explain`` (issue 15 point 1): what the next cycle would do for a pod or a
PodGroup and why, from scenario files and from a cluster; it never writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.main import main
from scheduler.explanation import with_namespace
from tests.builders import HOSTNAME, node, pod
from tests.volume_builders import claim_volumes, pv, pvc, storage_class

SCENARIOS = Path(__file__).parents[1] / "scenarios"
NODE = {"apiVersion": "v1", "kind": "Node"}


def objects_of(name: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((SCENARIOS / name).read_text()) if d]
    out: list[dict[str, Any]] = []
    for d in docs:
        if d.get("kind") == "List":
            out.extend(d["items"])
        elif d.get("kind") != "Expectation":
            out.append(d)
    return out


def explain(
    tmp_path: Path, objects: list[dict[str, Any]], *args: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    code = main(["explain", *args, "-f", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_gang_preemption_shows_its_victims_by_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = objects_of("gang_evict_one_gang_not_four.yaml")
    code, out, err = explain(tmp_path, objects, "podgroup", "high", "-o", "json", capsys=capsys)
    assert code == 0, err
    e = json.loads(out)
    [eviction] = e["next_cycle"]["evictions"]
    assert eviction["node"] == "n2" and eviction["how"] == "preempted"
    assert sorted(v["pod"] for v in eviction["victims"]) == [f"default/e-{i}" for i in range(4)]
    assert {v["bundle"] for v in eviction["victims"]} == {"whole"}
    assert set(e["next_cycle"]["nominations"].values()) == {"n2"}
    assert e["reason"] == "nominated to node n2; waiting for the pods evicted for it to terminate"
    assert e["gang"]["minMember"] == 4 and e["gang"]["byStatus"] == {"Pending": 4}


def test_nodes_are_grouped_by_reason_and_named_with_v(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects: list[dict[str, Any]] = [
        {
            **NODE,
            "metadata": {"name": "small"},
            "status": {"allocatable": {"cpu": "1", "pods": "10"}},
        },
        {
            **NODE,
            "metadata": {"name": "tainted"},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "pods": "10"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "schedulerName": "sluice",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            },
        },
    ]
    code, out, err = explain(tmp_path, objects, "pod", "p", "-v", capsys=capsys)
    assert code == 0, err
    assert "0/2 nodes are available" in out
    assert "1 node(s): Insufficient cpu: small" in out
    assert "1 node(s): node(s) had untolerated taint: tainted" in out
    code, out, err = explain(tmp_path, objects, "pod", "p", "-o", "json", capsys=capsys)
    [pod] = json.loads(out)["pods"]
    assert pod["nodes"] == {
        "Insufficient cpu": ["small"],
        "node(s) had untolerated taint": ["tainted"],
    }


def test_a_gang_short_of_members_and_its_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects: list[dict[str, Any]] = [
        {**NODE, "metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "4", "pods": "10"}}},
        {
            "apiVersion": "scheduling.sluice.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 3},
        },
        *(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"g-{i}", "labels": {"scheduling.sluice.dev/pod-group": "g"}},
                "spec": {
                    "schedulerName": "sluice",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                },
            }
            for i in range(2)
        ),
    ]
    code, out, err = explain(tmp_path, objects, "podgroup", "default/g", capsys=capsys)
    assert code == 0, err
    assert "Why: pod group default/g has 2 pod(s), fewer than its minMember 3" in out
    assert "Gang: minMember 3; 2 pod(s): 2 Pending" in out
    assert "Queue default: deserves" in out and "this job asks cpu 2" in out


def test_a_job_that_would_be_bound_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects: list[dict[str, Any]] = [
        {**NODE, "metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "4", "pods": "10"}}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"schedulerName": "sluice", "containers": [{"name": "c"}]},
        },
    ]
    code, out, _ = explain(tmp_path, objects, "pod", "p", capsys=capsys)
    assert code == 0
    assert "Next cycle: would bind default/p to n0" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pod", "nope"], "error: pod default/nope: not found (or not of this scheduler)\n"),
        (
            ["podgroup", "x/nope"],
            "error: PodGroup x/nope: not found (or not of this scheduler); another API's "
            "PodGroup is named with its API: volcano:x/nope, scheduler-plugins:x/nope, "
            "kubernetes:x/nope\n",
        ),
    ],
    ids=["pod", "podgroup"],
)
def test_what_is_not_there_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = explain(tmp_path, [], *args, capsys=capsys)
    assert (code, out, err) == (2, "", message)


def test_another_apis_pod_group_is_found_by_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``explain podgroup NS/NAME`` finds a Volcano (or scheduler-plugins, or Workload
    API) PodGroup by its name; a name two APIs share asks for the API's prefix."""
    objects = objects_of("volcano_job_gang.yaml")  # Volcano's ml/train, ml/big; Sluice's ml/train
    code, out, err = explain(tmp_path, objects, "podgroup", "ml/big", "-o", "json", capsys=capsys)
    assert code == 0, err
    assert json.loads(out)["name"] == "volcano:ml/big"
    code, out, err = explain(
        tmp_path, objects, "podgroup", "volcano:ml/train", "-o", "json", capsys=capsys
    )
    assert (code, json.loads(out)["name"]) == (0, "volcano:ml/train"), err
    code, out, err = explain(tmp_path, objects, "podgroup", "ml/train", "-o", "json", capsys=capsys)
    assert (code, json.loads(out)["name"]) == (0, "ml/train"), err  # Sluice's own id
    code, out, err = explain(tmp_path, objects, "podgroup", "volcano:big", capsys=capsys)
    assert code == 2 and "volcano:default/big" in err  # no namespace: default


def test_a_name_two_other_apis_share_asks_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``explain podgroup NS/NAME`` of a name that PodGroups of two other APIs have (and
    Sluice's none) names both job ids to choose from."""
    groups = [
        {
            "apiVersion": api_version,
            "kind": "PodGroup",
            "metadata": {"name": "shared", "namespace": "ml"},
            "spec": {"minMember": 1},
        }
        for api_version in ("scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1")
    ]
    node = {**NODE, "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}}
    code, out, err = explain(tmp_path, [node, *groups], "podgroup", "ml/shared", capsys=capsys)
    assert (code, out) == (2, "")
    assert err == (
        "error: PodGroup ml/shared: is the name of PodGroups of 2 APIs: explain one of "
        "scheduler-plugins:ml/shared, volcano:ml/shared\n"
    )


@pytest.mark.parametrize(
    ("key", "namespace", "expected"),
    [
        ("train", "ml", "ml/train"),
        ("team/train", "ml", "team/train"),
        ("volcano:train", "ml", "volcano:ml/train"),
        ("volcano:team/train", "ml", "volcano:team/train"),
        ("odd:name", "ml", "ml/odd:name"),
    ],
)
def test_a_name_without_a_namespace_gets_one(key: str, namespace: str, expected: str) -> None:
    assert with_namespace(key, namespace) == expected


def test_a_gang_waiting_for_gated_pods_says_which_gates_hold_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = [
        o for o in objects_of("gates_never_tried_until_removed.yaml") if o["kind"] != "Node"
    ] + [{**NODE, "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}}]
    code, out, err = explain(tmp_path, objects, "podgroup", "gang", "-o", "json", capsys=capsys)
    assert code == 0, err
    e = json.loads(out)
    assert e["next_cycle"] == {"binds": {}, "nominations": {}, "evictions": [], "dissolves": []}
    assert "1 held by scheduling gates (kueue.x-k8s.io/admission)" in e["reason"]
    gated = next(p for p in e["pods"] if p["pod"] == "default/g-2")
    assert gated["status"] == "Gated"
    assert gated["schedulingGates"] == ["kueue.x-k8s.io/admission"]
    assert "nodes" not in gated  # never tried, so no node is charged a reason
    assert e["waits_for"] == [
        "default/g-2: not tried until its scheduling gates are removed: kueue.x-k8s.io/admission"
    ]
    code, text, _ = explain(tmp_path, objects, "podgroup", "gang", capsys=capsys)
    assert "Waits for: default/g-2: not tried until its scheduling gates are removed" in text


@pytest.mark.parametrize("wait", [True, False], ids=["waits", "switched-off"])
def test_a_pod_waiting_for_the_pod_grouper_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wait: bool
) -> None:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0",
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "u1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "sluice",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    node = {
        **NODE,
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: scheduling.sluice.dev/v1alpha1\nkind: SchedulerConfiguration\n"
        f"waitForPodGrouper: {str(wait).lower()}\n"
    )
    code, out, err = explain(
        tmp_path,
        [node, pod],
        "pod",
        "train-0",
        "-o",
        "json",
        "--config",
        str(config),
        capsys=capsys,
    )
    assert code == 0, err
    e = json.loads(out)
    if wait:
        assert e["reason"].startswith(
            "waiting for sluice controller to group this pod by its owner Job default/train"
        )
        assert e["waits_for"] == [
            "default/train-0 waits for the pod grouper of sluice controller to group it by its "
            "owner Job default/train"
        ]
        assert e["next_cycle"]["binds"] == {}
    else:
        assert e["next_cycle"]["binds"] == {"default/train-0": "n1"}
        assert e["waits_for"] == []


def test_a_pod_asking_an_extended_resource_shows_the_claim_it_would_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """KEP-5004: the claim the next cycle would make for the pod's example.com/gpu, with
    its devices, on the node serving it through the devices of the class naming it."""
    names = {"n1", "gpu.example.com", "low-gpu-b"}  # the node, the class, one pod
    objects = [
        o
        for o in objects_of("dra_extended_resource_preempt.yaml")
        if o["metadata"]["name"] in names
    ]
    code, out, err = explain(tmp_path, objects, "pod", "low-gpu-b", capsys=capsys)
    assert code == 0, err
    assert "Next cycle: would bind default/low-gpu-b to n1" in out
    assert (
        "claim default/<extended-resources>: next cycle would allocate gpu.example.com/n1/gpu-0"
        in out
    ), out


def test_a_gang_running_below_its_minimum_says_so_and_when_it_is_dissolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two of gang g's three members run, the third is gone: the gang runs below its
    minimum, and with a grace of 0 the next cycle would dissolve it."""
    objects = [
        {
            "apiVersion": "scheduling.sluice.dev/v1alpha1",
            "kind": "SchedulerConfiguration",
            "actionArguments": {"dissolve": {"graceSeconds": 0}},
        },
        *[
            o
            for o in objects_of("dissolve_a_gang_left_below_its_minimum.yaml")
            if o["metadata"]["name"] != "g-2"
        ],
    ]
    code, out, err = explain(tmp_path, objects, "podgroup", "default/g", capsys=capsys)
    assert code == 0, err
    assert "Gang: minMember 3; 2 pod(s): 2 Running; running below its minimum for 0 s" in out
    assert (
        "Next cycle: would dissolve the gang (below its minimum too long), evicting "
        "default/g-0, default/g-1"
    ) in out


def _later_gang() -> list[dict[str, Any]]:
    """One 4-CPU node held by a pod from the start; a gang of two 2-CPU pods arriving at
    5 s, which cannot start while the first pod runs (it runs for 60 s)."""
    node = {
        **NODE,
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "pods": "9"}},
    }

    def pod(name: str, arrival: str, **extra: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "ml",
                "annotations": {"sim.sluice.dev/arrival": arrival, **extra.get("ann", {})},
                "labels": extra.get("labels", {}),
            },
            "spec": {
                "schedulerName": "sluice",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": extra["cpu"]}}}],
            },
        }

    group = {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "late",
            "namespace": "ml",
            "annotations": {"sim.sluice.dev/arrival": "5s"},
        },
        "spec": {"minMember": 2},
    }
    member = {"scheduling.sluice.dev/pod-group": "late"}
    return [
        node,
        pod("first", "0s", cpu="3", ann={"sim.sluice.dev/run-for": "60s"}),
        group,
        pod("late-0", "5s", cpu="2", labels=member),
        pod("late-1", "5s", cpu="2", labels=member),
    ]


def test_a_group_that_arrives_later_in_a_story_is_explained_at_a_moment_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scenario files are read at their start; a PodGroup that arrives later says when,
    and ``--at`` explains the cluster as the story's simulation left it then."""
    objects = _later_gang()
    code, out, err = explain(tmp_path, objects, "podgroup", "ml/late", capsys=capsys)
    assert (code, out) == (2, "")
    assert err == (
        "error: PodGroup ml/late: not there at 0s of the scenario, where it arrives at 5s: "
        "explain it then, with --at 5s\n"
    )
    code, out, err = explain(
        tmp_path, objects, "podgroup", "ml/late", "--at", "10s", "-o", "json", capsys=capsys
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["name"] == "ml/late"
    assert [(p["pod"], p["status"]) for p in result["pods"]] == [
        ("ml/late-0", "Pending"),
        ("ml/late-1", "Pending"),
    ]
    assert result["pods"][0]["nodes"] == {"Insufficient cpu": ["n1"]}  # "first" holds 3 of 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--at", "soon"],
            "error: --at: invalid duration 'soon': expected a number with a unit "
            "(ns, us, ms, s, m, h), like 10ms, 1m30s or 1.5h\n",
        ),
        (["--at=-5s"], "error: --at: invalid duration '-5s': must not be negative\n"),
    ],
    ids=["not-a-duration", "negative"],
)
def test_a_moment_that_is_not_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = explain(tmp_path, _later_gang(), "podgroup", "ml/late", *args, capsys=capsys)
    assert (code, out, err) == (2, "", message)


def test_a_moment_is_of_a_story_not_of_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "pod", "ml/x", "--at", "5s", "--kubeconfig", "/nonexistent"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == "error: --at: needs scenario files (-f): a cluster is explained as it is now\n"


def test_a_pods_claims_say_what_they_are_bound_to_or_would_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each PersistentVolumeClaim of the pod: bound (its PV), or the PV the next cycle
    would write into the claimRef, or the node it would provision on; a claim missing is
    kube's reason."""
    klass = storage_class("nvme", provisioner="csi.example.com")
    objects = [
        node("n1", labels={HOSTNAME: "n1"}),
        storage_class(),
        klass,
        pv("data", node="n1", claim="default/bound"),
        pvc("bound", volume="data", bound=True),
        pv("free", node="n1"),
        pvc("static"),
        pvc("scratch", storage_class="nvme"),
        pod("p", volumes=claim_volumes("bound", "static", "scratch")),
        pod("q", volumes=claim_volumes("nowhere")),
    ]
    code, out, err = explain(tmp_path, objects, "pod", "p", capsys=capsys)
    assert code == 0, err
    assert "volume claim default/bound: bound to PersistentVolume data" in out, out
    assert "volume claim default/static: next cycle would bind PersistentVolume free" in out
    assert (
        "volume claim default/scratch: next cycle would provision a PersistentVolume on node n1"
        in out
    )
    code, out, err = explain(tmp_path, objects, "pod", "q", capsys=capsys)
    assert 'volumes: persistentvolumeclaim "nowhere" not found' in out, out
