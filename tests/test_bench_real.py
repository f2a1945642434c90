"""bench/real.py, bench/real_cluster.py: the objects of a run, the figures (no API server)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench import placement_check, real, real_base, real_cluster, real_volumes
from scheduler.api import labels as L
from scheduler.api.errors import ServerError

ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize(
    ("times", "total", "expected"),
    [
        ([], 10, {"binds_per_second": None, "binds_per_second_10_90": None}),
        ([1.0], 1, {"binds_per_second": None, "binds_per_second_10_90": None}),
        # 11 binds 0.1 s apart: 10 intervals in 1 s; 10 % (index 1) to 90 % (index 8)
        (
            [i / 10 for i in range(11)],
            11,
            {"binds_per_second": 10.0, "binds_per_second_10_90": 10.0},
        ),
        # a slow start and tail do not count between 10 and 90 %
        (
            [0.0, *[5 + i / 100 for i in range(18)], 30.0],
            20,
            {"binds_per_second": 0.6, "binds_per_second_10_90": 100.0},
        ),
        # not all bound: no 10-90 figure (its 90 % is not known)
        (
            [i / 10 for i in range(5)],
            10,
            {"binds_per_second": 10.0, "binds_per_second_10_90": None},
        ),
    ],
    ids=["none", "one", "steady", "slow-ends", "incomplete"],
)
def test_throughput(times: list[float], total: int, expected: dict[str, Any]) -> None:
    assert real_cluster.throughput(times, total) == expected


@pytest.mark.parametrize(
    ("shape", "scheduler", "names", "groups", "priority_class"),
    [
        ("scheduling-basic", "default-scheduler", ["pod-0", "pod-1"], [None, None], None),
        ("preemption-basic", L.SCHEDULER_NAME, ["pod-0", "pod-1"], [None, None], "bench-high"),
        ("gang", L.SCHEDULER_NAME, ["gang-0-0", "gang-0-1"], ["gang-0", "gang-0"], None),
    ],
    ids=["basic", "preemptors", "gang"],
)
def test_measured_pods(
    shape: str, scheduler: str, names: list[str], groups: list[str | None], priority_class: str
) -> None:
    pods = real_cluster.measured_pods(real_cluster.SHAPES[shape], "run-1", scheduler)
    assert len(pods) == real_cluster.SHAPES[shape].pods
    assert [p["metadata"]["name"] for p in pods[:2]] == names
    assert [p["metadata"]["labels"].get(L.POD_GROUP_LABEL) for p in pods[:2]] == groups
    for p in pods[:2]:
        spec = p["spec"]
        assert p["metadata"]["namespace"] == "run-1"
        assert spec["schedulerName"] == scheduler
        assert spec["nodeSelector"] == {real_cluster.RUN_LABEL: "run-1"}  # only its run's nodes
        assert spec.get("priorityClassName") == priority_class
        assert "priority" not in spec  # Priority admission refuses a priority it did not set
        assert spec["containers"][0]["resources"]["requests"]["cpu"] == (
            real_cluster.SHAPES[shape].pod_cpu
        )


def test_gang_pods_fill_their_groups() -> None:
    shape = real_cluster.SHAPES["gang"]
    pods = real_cluster.measured_pods(shape, "r", L.SCHEDULER_NAME)
    groups: dict[str, int] = {}
    for p in pods:
        g = p["metadata"]["labels"][L.POD_GROUP_LABEL]
        groups[g] = groups.get(g, 0) + 1
    assert len(groups) == 500 and set(groups.values()) == {16}


def test_nodes_and_running_pods_belong_to_their_run() -> None:
    node = real_cluster.node_object("run-2", 7)
    assert node["metadata"]["name"] == "run-2-node-7"
    assert node["metadata"]["labels"][real_cluster.RUN_LABEL] == "run-2"
    running = real_cluster.pod_object(
        "run-2", "running-0", scheduler_name="x", cpu="900m", node_name="run-2-node-0"
    )
    assert running["spec"]["nodeName"] == "run-2-node-0"
    assert running["spec"]["terminationGracePeriodSeconds"] == 0  # victims go at once


def test_restart_pods_select_the_shared_base_s_nodes() -> None:
    shape = real_cluster.SHAPES["restart"]
    assert shape.shared_base and (shape.nodes, shape.running, shape.pods) == (5000, 130000, 10000)
    base = real_base.base_name(shape)
    pods = real_cluster.measured_pods(shape, "run-3", L.SCHEDULER_NAME, nodes_of=base)
    assert pods[0]["metadata"]["namespace"] == "run-3"
    assert pods[0]["spec"]["nodeSelector"] == {real_cluster.RUN_LABEL: base}
    assert base == "bench-base-restart-5000-130000"  # the sizes name it: reused only alike


def test_the_base_looks_as_a_kubelet_left_it() -> None:
    node = real_base.kubelet_node_status("n", 3)["status"]
    assert [c["type"] for c in node["conditions"]][-1] == "Ready"
    assert node["allocatable"]["cpu"] == "4" and len(node["images"]) == real_base.IMAGES
    pod = real_base.kubelet_pod_status(70000)["status"]
    assert pod["phase"] == "Running"
    assert {c["type"] for c in pod["conditions"]} >= {"Ready", "PodScheduled"}
    assert pod["containerStatuses"][0]["state"] == {"running": {"startedAt": real_base.STAMP}}
    assert pod["podIP"] != real_base.kubelet_pod_status(70001)["status"]["podIP"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [],
            [
                ("scheduling-basic", 5000, 1000, 10000),
                ("preemption-basic", 1000, 4000, 1000),
                ("gang", 1000, 0, 8000),
            ],
        ),
        (["--shapes", "gang", "--scale", "0.1"], [("gang", 100, 0, 800)]),
        (["--shapes", "gang", "--scale", "0.01"], [("gang", 10, 0, 80)]),  # whole gangs
        (["--shapes", "scheduling-basic", "--scale", "0.001"], [("scheduling-basic", 5, 1, 10)]),
    ],
    ids=["defaults", "gang-tenth", "gang-whole-groups", "tiny"],
)
def test_shapes_scale(argv: list[str], expected: list[tuple[str, int, int, int]]) -> None:
    shapes = real._shapes(real._parser().parse_args(argv))
    assert [(s.name, s.nodes, s.running, s.pods) for s in shapes] == expected


@pytest.mark.parametrize(
    "argv",
    [["--shapes", "nope"], ["--runners", "kube-scheduler,nope"], ["--scale", "0"]],
    ids=["shape", "runner", "scale"],
)
def test_bad_options_are_one_line_errors(argv: list[str]) -> None:
    args = real._parser().parse_args(argv)
    with pytest.raises(SystemExit) as caught:
        real._shapes(args)
        real._runners(args)
    assert "\n" not in str(caught.value)


def test_runners_run_in_their_fixed_order() -> None:
    args = real._parser().parse_args(["--runners", "sluice,raw,kube-scheduler"])
    assert real._runners(args) == ["kube-scheduler", "raw", "sluice"]


def test_compare_keeps_every_run_of_a_runner_and_takes_ratios_of_means() -> None:
    runs = [
        {
            "shape": "s",
            "runner": "kube-scheduler",
            "binds_per_second_10_90": 200.0,
            "first_bind_after": 2.0,
            "seconds_to_last_event": 60.0,
        },
        {
            "shape": "s",
            "runner": "sluice",
            "binds_per_second_10_90": 300.0,
            "first_bind_after": 1.0,
            "seconds_to_last_event": 40.0,
        },
        {
            "shape": "s",
            "runner": "sluice",
            "binds_per_second_10_90": 500.0,
            "first_bind_after": 1.4,
            "seconds_to_last_event": 60.0,
        },
        {
            "shape": "s",
            "runner": "kube-scheduler",
            "binds_per_second_10_90": 200.0,
            "first_bind_after": 2.2,
            "seconds_to_last_event": 40.0,
        },
    ]
    out = real.compare("s", runs)
    assert out["sluice"]["binds_per_second_10_90"] == [300.0, 500.0]
    assert out["kube-scheduler"]["first_bind_after"] == [2.0, 2.2]
    assert out["sluice_vs_kube_scheduler"] == 2.0
    assert out["sluice_vs_kube_scheduler_to_last_event"] == 1.0


def test_compare_gives_ratios_to_kube_scheduler_and_raw() -> None:
    runs = [
        {
            "shape": "s",
            "runner": "kube-scheduler",
            "binds_per_second_10_90": 200.0,
            "pods_per_second": 20.0,
        },
        {"shape": "s", "runner": "raw", "binds_per_second_10_90": 400.0, "pods_per_second": 400.0},
        {
            "shape": "s",
            "runner": "sluice",
            "binds_per_second_10_90": 300.0,
            "pods_per_second": 50.0,
        },
        {"shape": "s", "runner": "sluice-event-qps", "binds_per_second": 360.0},
        {"shape": "other", "runner": "sluice", "binds_per_second_10_90": 1.0},
    ]
    out = real.compare("s", runs)
    assert out["sluice_vs_kube_scheduler"] == 1.5
    assert out["sluice_vs_raw"] == 0.75
    assert out["sluice_vs_kube_scheduler_overall"] == 2.5
    assert out["sluice_vs_raw_overall"] == 0.12
    assert out["sluice-event-qps_vs_kube_scheduler"] == 1.8  # falls back to first-to-last
    assert out["sluice-event-qps_vs_raw"] == 0.9
    assert "sluice-event-qps_vs_raw_overall" not in out  # no figure, no ratio
    assert out["sluice"]["pods_per_second"] == 50.0


def test_metric_sum_adds_every_label_set() -> None:
    text = (
        "# HELP scheduler_events_dropped_total x\n"
        'scheduler_events_dropped_total{reason="limit"} 2.0\n'
        'scheduler_events_dropped_total{reason="queue_full"} 3.0\n'
        "scheduler_events_dropped_totalx 9.0\n"
    )
    assert real._metric_sum(text, "scheduler_events_dropped_total") == 5.0


@pytest.mark.parametrize(
    ("key_of", "obj", "expected"),
    [
        (real_cluster.bound_pod, {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}}, "p"),
        (real_cluster.bound_pod, {"metadata": {"name": "p"}, "spec": {}}, None),
        (real_cluster.scheduled_event, {"reason": "Scheduled", "regarding": {"name": "p"}}, "p"),
        (
            real_cluster.scheduled_event,
            {"reason": "FailedScheduling", "regarding": {"name": "p"}},
            None,
        ),
    ],
    ids=["bound", "pending", "scheduled", "other-reason"],
)
def test_what_the_watches_count(key_of: Any, obj: dict[str, Any], expected: str | None) -> None:
    assert key_of(obj) == expected


def test_start_phases_are_read_from_sluice_s_log(tmp_path: Any) -> None:
    lines = [
        '{"event": "serving metrics, the live page and probes", '
        '"timestamp": "2026-11-26T05:00:00.400000Z"}',
        '{"kind": "Node", "event": "informer synced", "timestamp": "2026-11-26T05:00:00.900000Z"}',
        "not json",
        '{"kind": "Pod", "event": "bound pods listed", "timestamp": "2026-11-26T05:00:01Z"}',
        '{"event": "ready to schedule", "timestamp": "2026-11-26T05:00:01.050000Z"}',
        '{"kind": "Pod", "event": "informer synced", "timestamp": "2026-11-26T05:00:01.100000Z"}',
        '{"kind": "Queue", "event": "informer synced", "timestamp": "2026-11-26T05:00:01.200000Z"}',
        '{"event": "caches synced", "timestamp": "2026-11-26T05:00:01.250000Z"}',
        '{"event": "scheduling", "timestamp": "2026-11-26T05:00:01.300000Z"}',
        '{"event": "first cycle", "timestamp": "2026-11-26T05:00:01.310000Z"}',
        '{"event": "first bind", "timestamp": "2026-11-26T05:00:01.500000Z"}',
        '{"event": "scheduling", "timestamp": "2026-11-26T05:00:09.000000Z"}',
    ]
    log = tmp_path / "sluice.log"
    log.write_text("\n".join(lines))
    t0 = datetime(2026, 11, 26, 5, 0, 0, tzinfo=UTC).timestamp()
    assert real.start_phases(log, t0) == {
        "imported": 0.4,
        "nodes_listed": 0.9,
        "bound_pods_listed": 1.0,
        "ready_to_schedule": 1.05,
        "pods_listed": 1.1,
        "synced": 1.25,
        "scheduling": 1.3,
        "first_cycle": 1.31,
        "first_bind": 1.5,
    }


def test_the_start_phases_are_lines_sluice_logs() -> None:
    """Each line the bench reads a phase from is one the scheduler writes: a message
    reworded in the scheduler would otherwise leave its phase out of every run."""
    source = "\n".join(
        p.read_text() for p in (Path(real.__file__).parent.parent / "scheduler").rglob("*.py")
    )
    for message in [*real.START_EVENTS, "informer synced"]:
        assert f'"{message}"' in source, message


@pytest.mark.parametrize(
    ("text", "cycles"),
    [
        pytest.param(
            'scheduler_cycle_duration_seconds_count{action="allocate"} 9.0\n'
            'scheduler_cycle_duration_seconds_count{action="all"} 7.0\n',
            7.0,
            id="the cycles, not an action's runs",
        ),
        pytest.param("# no cycle yet\n", 0.0, id="none"),
    ],
)
def test_the_cycles_from_metrics(text: str, cycles: float) -> None:
    assert real._cycles((200, text)) == cycles


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        (1, [("a", "kube-scheduler"), ("a", "sluice"), ("b", "kube-scheduler"), ("b", "sluice")]),
        (
            2,
            [
                ("a", "kube-scheduler"),
                ("a", "sluice"),
                ("a", "sluice"),
                ("a", "kube-scheduler"),
                ("b", "kube-scheduler"),
                ("b", "sluice"),
                ("b", "sluice"),
                ("b", "kube-scheduler"),
            ],
        ),
    ],
    ids=["one-round", "two-rounds-A-B-B-A"],
)
def test_every_other_round_runs_the_runners_in_reverse(
    rounds: int, expected: list[tuple[str, str]]
) -> None:
    order = real.run_order(["a", "b"], ["kube-scheduler", "sluice"], rounds)
    assert [(shape, runner) for shape, runner, _ in order] == expected


def test_compare_averages_the_rounds_and_says_what_work_they_did() -> None:
    runs = [
        {"shape": "s", "runner": "kube-scheduler", "binds_per_second_10_90": 100.0},
        {"shape": "s", "runner": "sluice", "binds_per_second_10_90": 200.0, "work": real.WORK_ALL},
        {
            "shape": "s",
            "runner": "sluice",
            "binds_per_second_10_90": 100.0,
            "work": real.WORK_BINDS_ONLY,
        },
        {"shape": "s", "runner": "kube-scheduler", "binds_per_second_10_90": 100.0},
    ]
    out = real.compare("s", runs)
    assert out["sluice_vs_kube_scheduler"] == 1.5
    assert out["sluice"]["runs"] == 2
    assert out["sluice"]["work"] == sorted([real.WORK_ALL, real.WORK_BINDS_ONLY])


@pytest.mark.parametrize("shape", ["bound-pvs", "local-pvs"], ids=["bound", "local"])
def test_volume_shapes_give_each_pod_a_claim_and_the_pvs_it_needs(shape: str) -> None:
    """Every measured pod names a claim of its own; the bound shape's claims get a PV
    pre-bound to their uid and are bound to it, and its nodes have an attach limit; the
    local shape's nodes each have as many local PVs as pods per node, of a
    WaitForFirstConsumer class."""
    s = real_cluster.SHAPES[shape]
    pods = real_cluster.measured_pods(s, "r", L.SCHEDULER_NAME)
    claims = {p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for p in pods}
    assert len(claims) == s.pods
    objects = list(real_volumes.storage_objects(s.volumes, "r", s.nodes, s.pods))
    kinds: dict[str, int] = {}
    for _, obj in objects:
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
    made = {o["metadata"]["name"] for _, o in objects if o["kind"] == "PersistentVolumeClaim"}
    assert made == claims
    if shape == "bound-pvs":
        assert kinds == {"CSINode": s.nodes, "PersistentVolumeClaim": s.pods}
        pv = real_volumes.bound_volume("r", 7, "uid-7")  # made once the claim's uid is known
        ref = pv["spec"]["claimRef"]
        assert (ref["namespace"], ref["name"], ref["uid"]) == ("r", "pod-7", "uid-7")
        patch = real_volumes.bind_claim("r", 7)
        assert patch["spec"]["volumeName"] == pv["metadata"]["name"]
        assert patch["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    else:
        assert kinds == {
            "StorageClass": 1,
            "PersistentVolume": s.pods,
            "PersistentVolumeClaim": s.pods,
        }
        [klass] = [o for _, o in objects if o["kind"] == "StorageClass"]
        assert klass["volumeBindingMode"] == "WaitForFirstConsumer"
        pinned = [o["spec"]["nodeAffinity"] for _, o in objects if o["kind"] == "PersistentVolume"]
        assert len(pinned) == s.pods


def test_the_local_shape_starts_the_controller_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(real_cluster.subprocess, "run", lambda argv, **kw: calls.append(argv))
    real_cluster.start_control_plane(Path("/tmp/x"), controller_manager=True)
    real_cluster.start_control_plane(Path("/tmp/y"))
    assert "--controller-manager" in calls[0] and "--controller-manager" not in calls[1]


class _RecordingApi:
    """Answers the bound shape's claim binding as the API server would, and records it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.calls.append((method, path, kw.get("body")))
        if method == "GET":
            return {"metadata": {"uid": "uid-of-" + path.rsplit("/", 1)[1]}}
        return kw.get("body") or {}


def test_the_bound_shape_binds_each_claim_as_the_pv_controller_would() -> None:
    """Per claim, in order: its uid read, its PV made naming that uid, the PV Bound, then
    the claim's volumeName and Bound: the PV controller marks Lost a claim whose PV is not
    there yet, and takes back a PV whose claimRef has no uid (seen on the real server)."""
    api = _RecordingApi()
    shape = real_cluster.Shape("b", nodes=1, running=0, pods=2, description="", volumes="bound-pvs")
    anyio.run(real_cluster.bind_claims, api, shape, "r", 1)
    claims = "/api/v1/namespaces/r/persistentvolumeclaims"
    assert [(m, p) for m, p, _ in api.calls] == [
        step
        for i in range(2)
        for step in (
            ("GET", f"{claims}/pod-{i}"),
            ("POST", "/api/v1/persistentvolumes"),
            ("PATCH", f"/api/v1/persistentvolumes/r-pv-{i}/status"),
            ("PATCH", f"{claims}/pod-{i}"),
            ("PATCH", f"{claims}/pod-{i}/status"),
        )
    ]
    made = [body for m, _, body in api.calls if m == "POST"]
    assert [pv["spec"]["claimRef"]["uid"] for pv in made] == ["uid-of-pod-0", "uid-of-pod-1"]
    statuses = [body for m, p, body in api.calls if p.endswith("/status")]
    assert statuses == [{"status": {"phase": "Bound"}}] * 4


@pytest.mark.parametrize(
    ("shape", "label", "field"),
    [
        ("topology-spreading", {"color": "blue"}, "topologySpreadConstraints"),
        ("preferred-topology-spreading", {"color": "blue"}, "topologySpreadConstraints"),
        ("pod-anti-affinity", {"color": "green"}, "affinity"),
        ("preferred-pod-affinity", {"color": "red"}, "affinity"),
        ("preferred-pod-anti-affinity", {"color": "yellow"}, "affinity"),
    ],
    ids=["spread", "preferred-spread", "anti-affinity", "preferred-affinity", "preferred-anti"],
)
def test_placement_shapes_carry_scheduler_perf_s_pod_templates(
    shape: str, label: dict[str, str], field: str
) -> None:
    s = real_cluster.SHAPES[shape]
    [pod] = real_cluster.measured_pods(replace(s, pods=1), "run-3", L.SCHEDULER_NAME)
    assert label.items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    if field == "affinity":  # one term, over hostname, selecting the template's own label
        [kind] = spec["affinity"].values()
        [terms] = kind.values()
        term = terms[0].get("podAffinityTerm", terms[0])
        assert term["labelSelector"] == {"matchLabels": label}
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["namespaces"] == ["run-3"]  # scheduler_perf's namespace is the run's
    else:
        [c] = spec[field]
        when = "DoNotSchedule" if shape == "topology-spreading" else "ScheduleAnyway"
        assert (c["whenUnsatisfiable"], c["maxSkew"], c["topologyKey"]) == (when, 5, ZONE)
        assert c["labelSelector"] == {"matchLabels": label}
        nodes = [real_cluster.node_object("r", i, s.zones) for i in range(3)]
        assert [n["metadata"]["labels"][ZONE] for n in nodes] == ["moon-1", "moon-2", "moon-3"]


def _bound(name: str, node: str, color: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"color": color}}, "spec": {"nodeName": node}}


@pytest.mark.parametrize(
    ("placement", "pods", "zones", "expected"),
    [
        (
            "spread",
            [_bound("a", "n1", "blue"), _bound("b", "n2", "blue"), _bound("c", "n1", "red")],
            {"n1": "moon-1", "n2": "moon-2", "n3": "moon-3"},
            {
                "zone_counts": {"moon-1": 1, "moon-2": 1, "moon-3": 0},
                "zone_skew": 1,
                "violations": 0,
            },
        ),
        (
            "spread",
            [_bound(f"p{i}", "n1", "blue") for i in range(7)],
            {"n1": "moon-1", "n2": "moon-2"},
            {"zone_skew": 7, "violations": 2, "most_on_a_node": 7},
        ),
        (
            "anti-affinity",
            [_bound("a", "n1", "green"), _bound("b", "n1", "green"), _bound("c", "n2", "green")],
            {},
            {"bound": 3, "nodes_used": 2, "nodes_with_two": 1, "violations": 1},
        ),
        (
            "preferred-affinity",
            [
                _bound("a", "n1", "red"),
                _bound("b", "n1", "red"),
                {"metadata": {"labels": {"color": "red"}}, "spec": {}},
            ],
            {},
            {"bound": 2, "pods_sharing_a_node": 2, "violations": None},
        ),
    ],
    ids=[
        "spread-within-skew",
        "spread-over-skew",
        "anti-affinity-broken",
        "preferred-unbound-left-out",
    ],
)
def test_placement_figures_count_what_the_rules_select(
    placement: str, pods: list[dict[str, Any]], zones: dict[str, str], expected: dict[str, Any]
) -> None:
    figures = placement_check.placement_figures(placement, "run", pods, zones)
    assert {k: figures[k] for k in expected} == expected


class _BusyServer:
    """A KubeClient stand-in whose first ``busy`` deletions of a run's pods answer 504
    and leave the pods there (as a busy API server does), then delete them."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.pods = ["a", "b"]
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.calls.append((method, path))
        if method == "GET":
            return {"items": [{"metadata": {"name": n}} for n in self.pods], "metadata": {}}
        if path.endswith("/pods"):
            if self.busy:
                self.busy -= 1
                raise ServerError("HTTP 504 Timeout")
            self.pods = []
        return {}


@pytest.mark.parametrize(
    ("busy", "deletions", "fails"),
    [(0, 1, False), (2, 3, False), (10**6, 1, True)],
    ids=["at-once", "after-two-timeouts", "gives-up-at-the-deadline-and-says-so"],
)
def test_cleanup_deletes_the_pods_again_while_the_server_is_busy(
    busy: int, deletions: int, fails: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_wait(_: float) -> None:
        return None

    monkeypatch.setattr(real_cluster.anyio, "sleep", no_wait)
    if fails:  # the deadline passed at the first refusal
        monkeypatch.setattr(real_cluster, "CLEANUP_SECONDS", -1.0)
    server = _BusyServer(busy)

    async def main() -> None:
        await real_cluster.cleanup_run(server, "run-4")  # type: ignore[arg-type]

    if fails:
        with pytest.raises(ServerError):
            anyio.run(main)
    else:
        anyio.run(main)
        assert server.pods == []
    pod_deletions = [c for c in server.calls if c == ("DELETE", "/api/v1/namespaces/run-4/pods")]
    assert len(pod_deletions) == deletions
    assert ("DELETE", "/api/v1/nodes") in server.calls  # the rest is deleted all the same
