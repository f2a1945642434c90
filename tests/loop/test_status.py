"""What users see of a PodGroup and a Queue: ``job_phase``, ``pod_group_status`` and
``queue_status`` of scheduler/loop/status.py as tables, then the PodGroup status the real
loop writes to the embedded cluster for a gang that cannot fit.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from scheduler import app
from scheduler.actions.preempt import NO_VICTIMS
from scheduler.api import labels as L
from scheduler.api.core_objects import task_from_pod
from scheduler.api.errors import ServerError
from scheduler.api.group_apis.protocol import QueueReport
from scheduler.api.group_apis.sluice import job_phase, pod_group_status
from scheduler.api.group_apis.sluice import queue_status as sluice_queue_status
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.queue import QueueInfo
from scheduler.api.queue_tree import QueueTree, queue_tree
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.dispatch import ApiDispatcher
from scheduler.framework.session import open_session
from scheduler.logging import quiet
from scheduler.loop.status import StatusReporter, rfc3339
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, node, pod, pod_group
from tests.fakes import FakeCluster, RecordingDispatcher

Obj = dict[str, Any]
S = TaskStatus
P = PodGroupPhase
NOW = "2024-05-01T10:00:00Z"
BEFORE = "2024-05-01T09:00:00Z"
_ON_A_NODE = frozenset(
    {S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING, S.RELEASING, S.SUCCEEDED, S.FAILED}
)


@pytest.fixture(autouse=True)
def _log_to_the_live_stderr() -> None:
    """Point structlog at the current stderr (see tests/preemption/test_executor.py)."""
    quiet()


def queue_status(name: str, tree: QueueTree, **fields: Any) -> Obj:
    """Sluice's Queue status, as the reporter asks for it."""
    return sluice_queue_status(QueueReport.of(name, tree, **fields))


def task(name: str, status: TaskStatus, *, group: str = "g", cpu: str = "1") -> TaskInfo:
    t = task_from_pod(pod(name, cpu=cpu, memory=None, group=group))
    t.status = status
    if status in _ON_A_NODE:
        t.node_name = "n1"
    return t


def job(
    statuses: Sequence[TaskStatus],
    *,
    min_member: int = 1,
    phase: PodGroupPhase = P.INQUEUE,
    name: str = "g",
    cpus: Sequence[str] | None = None,
    has_pod_group: bool = True,
) -> JobInfo:
    """A job of ``statuses`` tasks (requesting ``cpus``, 1 CPU each by default)."""
    j = JobInfo(
        uid=f"default/{name}",
        namespace="default",
        name=name,
        queue="q",
        min_member=min_member,
        phase=phase,
        has_pod_group=has_pod_group,
    )
    for i, status in enumerate(statuses):
        cpu = cpus[i] if cpus is not None else "1"
        j.add_task(task(f"{name}-{i}", status, group=name, cpu=cpu))
    return j


# job_phase ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "min_member", "before", "expected"),
    [
        pytest.param([], 1, P.PENDING, P.PENDING, id="no task, not enqueued"),
        pytest.param([], 1, P.INQUEUE, P.INQUEUE, id="no task, enqueued"),
        pytest.param([], 1, P.RUNNING, P.INQUEUE, id="no task left, was running"),
        pytest.param([], 1, P.COMPLETED, P.COMPLETED, id="no task left, was completed"),
        pytest.param([S.PENDING], 1, P.PENDING, P.PENDING, id="pending, not enqueued"),
        pytest.param([S.PENDING], 1, P.INQUEUE, P.INQUEUE, id="pending, enqueued"),
        pytest.param([S.ALLOCATED, S.PENDING], 1, P.INQUEUE, P.RUNNING, id="allocated counts"),
        pytest.param([S.BINDING, S.BOUND, S.RUNNING], 3, P.INQUEUE, P.RUNNING, id="all placed"),
        pytest.param(
            [S.RUNNING, S.RUNNING, S.PENDING], 3, P.INQUEUE, P.INQUEUE, id="one short of min"
        ),
        pytest.param([S.RUNNING, S.PENDING], 2, P.RUNNING, P.INQUEUE, id="running, lost one"),
        pytest.param(
            [S.RUNNING, S.RELEASING], 2, P.RUNNING, P.INQUEUE, id="releasing does not count"
        ),
        pytest.param(
            [S.RUNNING, S.PIPELINED], 2, P.INQUEUE, P.INQUEUE, id="pipelined does not count"
        ),
        pytest.param([S.UNKNOWN], 1, P.INQUEUE, P.INQUEUE, id="unknown does not count"),
        pytest.param(
            [S.SUCCEEDED, S.RUNNING], 2, P.RUNNING, P.RUNNING, id="succeeded counts as placed"
        ),
        pytest.param([S.SUCCEEDED, S.SUCCEEDED], 2, P.RUNNING, P.COMPLETED, id="all succeeded"),
        pytest.param(
            [S.SUCCEEDED, S.FAILED], 1, P.RUNNING, P.COMPLETED, id="min succeeded, rest failed"
        ),
        pytest.param(
            [S.SUCCEEDED, S.RUNNING], 1, P.RUNNING, P.RUNNING, id="min succeeded, one running"
        ),
        pytest.param(
            [S.SUCCEEDED, S.PENDING], 1, P.RUNNING, P.RUNNING, id="min succeeded, one pending"
        ),
        pytest.param(
            [S.SUCCEEDED, S.PIPELINED], 1, P.RUNNING, P.RUNNING, id="min succeeded, one pipelined"
        ),
        pytest.param(
            [S.SUCCEEDED, S.RELEASING], 1, P.RUNNING, P.RUNNING, id="min succeeded, one releasing"
        ),
        pytest.param(
            [S.SUCCEEDED, S.FAILED], 2, P.RUNNING, P.INQUEUE, id="too few succeeded, rest failed"
        ),
        pytest.param([S.FAILED, S.FAILED], 1, P.RUNNING, P.INQUEUE, id="all failed, was running"),
        pytest.param([S.FAILED], 1, P.PENDING, P.PENDING, id="all failed, never enqueued"),
        pytest.param([S.PENDING], 0, P.INQUEUE, P.INQUEUE, id="min 0, nothing placed"),
        pytest.param([], 0, P.INQUEUE, P.INQUEUE, id="min 0, no task: not completed"),
    ],
)
def test_job_phase(
    statuses: list[TaskStatus], min_member: int, before: PodGroupPhase, expected: PodGroupPhase
) -> None:
    assert job_phase(job(statuses, min_member=min_member, phase=before)) is expected


# pod_group_status: phase, counts and conditions -----------------------------------------------

UNSCHEDULABLE = {
    "type": "Unschedulable",
    "status": "True",
    "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient cpu.",
}


def scheduled(min_member: int) -> dict[str, str]:
    return {
        "type": "Scheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": f"{min_member} or more pods are placed",
    }


@pytest.mark.parametrize(
    ("gang", "reason", "phase", "conditions"),
    [
        pytest.param(
            job([S.RUNNING, S.BOUND], min_member=2), None, "Running", [scheduled(2)], id="running"
        ),
        pytest.param(
            job([S.RUNNING, S.PENDING]),
            UNSCHEDULABLE["message"],
            "Running",
            [scheduled(1)],
            id="running: a reason is not shown",
        ),
        pytest.param(
            job([S.SUCCEEDED, S.SUCCEEDED], min_member=2, phase=P.RUNNING),
            None,
            "Completed",
            [scheduled(2)],
            id="completed",
        ),
        pytest.param(
            job([S.RUNNING, S.PENDING, S.PENDING], min_member=3),
            UNSCHEDULABLE["message"],
            "Inqueue",
            [UNSCHEDULABLE],
            id="inqueue with a reason",
        ),
        pytest.param(
            job([S.PENDING], phase=P.PENDING),
            UNSCHEDULABLE["message"],
            "Pending",
            [UNSCHEDULABLE],
            id="pending with a reason",
        ),
        pytest.param(job([S.PENDING]), None, "Inqueue", [], id="inqueue, no reason"),
        pytest.param(job([S.PENDING]), "", "Inqueue", [], id="inqueue, empty reason"),
        pytest.param(
            job([S.PENDING], phase=P.PENDING), None, "Pending", [], id="pending, no reason"
        ),
    ],
)
def test_pod_group_status_phase_and_conditions(
    gang: JobInfo, reason: str | None, phase: str, conditions: list[dict[str, str]]
) -> None:
    status = pod_group_status(gang, reason, NOW, {})
    assert status["phase"] == phase
    assert status["conditions"] == [{**c, "lastTransitionTime": NOW} for c in conditions]


@pytest.mark.parametrize(
    ("statuses", "counts"),
    [
        pytest.param([], (0, 0, 0), id="no task"),
        pytest.param([S.PENDING, S.ALLOCATED, S.BINDING, S.BOUND], (0, 0, 0), id="none yet"),
        pytest.param(
            [S.RUNNING, S.RUNNING, S.SUCCEEDED, S.FAILED, S.FAILED, S.RELEASING],
            (2, 1, 2),
            id="each counted once",
        ),
    ],
)
def test_pod_group_status_counts(statuses: list[TaskStatus], counts: tuple[int, int, int]) -> None:
    status = pod_group_status(job(statuses), None, NOW, {})
    assert (status["running"], status["succeeded"], status["failed"]) == counts


def _with_time(condition: dict[str, str], time: str | None = BEFORE, **changes: str) -> Obj:
    out: Obj = {**condition, **changes}
    if time is not None:
        out["lastTransitionTime"] = time
    return out


@pytest.mark.parametrize(
    ("statuses", "reason", "previous", "expected"),
    [
        pytest.param([S.PENDING], "R", {}, NOW, id="no previous status"),
        pytest.param([S.PENDING], "R", {"conditions": None}, NOW, id="previous without conditions"),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, message="R")]},
            BEFORE,
            id="unschedulable unchanged: kept",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {
                "phase": "Pending",
                "running": 3,
                "conditions": [
                    _with_time(scheduled(1), "2024-01-01T00:00:00Z"),
                    _with_time(UNSCHEDULABLE, message="R"),
                ],
            },
            BEFORE,
            id="unchanged among others, other fields changed: kept",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, message="R before")]},
            NOW,
            id="message changed: renewed",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, message="R", status="False")]},
            NOW,
            id="status changed: renewed",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, message="R", reason="Other")]},
            NOW,
            id="reason changed: renewed",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, None, message="R")]},
            NOW,
            id="unchanged but no time before: now",
        ),
        pytest.param(
            [S.PENDING],
            "R",
            {"conditions": [_with_time(UNSCHEDULABLE, message="R", type="Scheduled")]},
            NOW,
            id="same fields, other type: renewed",
        ),
        pytest.param(
            [S.RUNNING],
            None,
            {"conditions": [_with_time(scheduled(1))]},
            BEFORE,
            id="scheduled unchanged: kept",
        ),
        pytest.param(
            [S.RUNNING],
            None,
            {"conditions": [_with_time(scheduled(2))]},
            NOW,
            id="scheduled, message changed: renewed",
        ),
        pytest.param(
            [S.RUNNING],
            None,
            {"conditions": [_with_time(UNSCHEDULABLE)]},
            NOW,
            id="unschedulable, now scheduled: renewed",
        ),
    ],
)
def test_pod_group_status_last_transition_time(
    statuses: list[TaskStatus], reason: str | None, previous: Obj, expected: str
) -> None:
    status = pod_group_status(job(statuses), reason, NOW, previous)
    [condition] = status["conditions"]
    assert condition["lastTransitionTime"] == expected


# queue_status -----------------------------------------------------------------------------------


def _mixed() -> JobInfo:
    """One task of every status; the CPU request of each is a distinct power of two (m)."""
    statuses = list(S)
    return job(statuses, phase=P.RUNNING, cpus=[f"{2**i}m" for i in range(len(statuses))])


def _held_cpu() -> str:
    held = {S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING}
    return f"{sum(2**i for i, s in enumerate(S) if s in held)}m"


@pytest.mark.parametrize(
    ("jobs", "phases", "state", "expected"),
    [
        pytest.param(
            [],
            {},
            "Open",
            {"allocated": {}, "pending": 0, "inqueue": 0, "running": 0},
            id="no job",
        ),
        pytest.param(
            [],
            {},
            "Closed",
            {"allocated": {}, "pending": 0, "inqueue": 0, "running": 0},
            id="state passed on",
        ),
        pytest.param(
            [_mixed()],
            {},
            "Open",
            {"allocated": {"cpu": _held_cpu(), "pods": "4"}, "pending": 0, "inqueue": 0},
            id="allocated: allocated, binding, bound and running tasks only",
        ),
        pytest.param(
            [
                job([S.RUNNING], name="a", cpus=["1500m"]),
                job([S.BOUND, S.PENDING], name="b", cpus=["2", "8"]),
            ],
            {},
            "Open",
            {"allocated": {"cpu": "3500m", "pods": "2"}},
            id="allocated: summed over jobs",
        ),
        pytest.param(
            [
                job([S.PENDING], name="p", phase=P.PENDING),
                job([S.PENDING], name="i1"),
                job([S.RUNNING, S.PENDING], name="i2", min_member=2, phase=P.RUNNING),
                job([S.RUNNING], name="r"),
                job([S.SUCCEEDED], name="c", phase=P.RUNNING),
                job([S.UNKNOWN], name="u", phase=P.UNKNOWN),
            ],
            {},
            "Open",
            {"pending": 1, "inqueue": 2, "running": 1},
            id="counts: phases from the tasks; completed and unknown not counted",
        ),
        pytest.param(
            [
                job([S.PENDING], name="p", phase=P.PENDING),
                job([S.PENDING], name="i1"),
                job([S.RUNNING], name="r"),
            ],
            {"default/p": P.INQUEUE, "default/i1": P.RUNNING, "default/r": P.COMPLETED},
            "Open",
            {"pending": 0, "inqueue": 1, "running": 1},
            id="counts: this cycle's phases first",
        ),
        pytest.param(
            [job([S.PENDING], name="lone", has_pod_group=False)],
            {},
            "Open",
            {"pending": 0, "inqueue": 1, "running": 0},
            id="counts: a pending lone pod is inqueue",
        ),
    ],
)
def test_queue_status(
    jobs: list[JobInfo], phases: dict[str, PodGroupPhase], state: str, expected: Obj
) -> None:
    tree = queue_tree({"q": QueueInfo("q")})
    status = queue_status("q", tree, state=state, jobs={"q": jobs}, phases=phases)
    assert set(status) == {
        "state",
        "allocated",
        "deserved",
        "pending",
        "inqueue",
        "running",
        "conditions",
    }
    assert status["state"] == state
    assert {k: status[k] for k in expected} == expected


# Through the real loop ------------------------------------------------------------------------

GANG: list[Obj] = [
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "10"}},
    },
    {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "gang"},
        "spec": {"minMember": 3},
    },
    *(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"w-{i}", "labels": {L.POD_GROUP_LABEL: "gang"}},
            "spec": {
                "schedulerName": L.SCHEDULER_NAME,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
        for i in range(3)
    ),
]
"""A gang of three 1-CPU pods, minMember 3, on a node that takes two."""

SMALL_NODE_AT_5S: Obj = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n2", "annotations": {"sim.sluice.dev/arrival": "5s"}},
    "status": {"allocatable": {"cpu": "500m", "memory": "8Gi", "pods": "10"}},
}
"""A node too small for any of the gang's pods, arriving later."""


def simulate(docs: Sequence[Obj]) -> Simulation:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
        scenario = load_scenario([str(path)])
    resolved = app.resolve()
    sim = Simulation(
        scenario, lambda cache, ports: app.build_loop(resolved, cache, ports), max_cycles=100
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim


def latest_events(sim: Simulation, reason: str) -> dict[str, str]:
    """The message of the latest Event of ``reason`` about each object, by its name."""
    events, _ = sim.store.list("Event")
    events = [e for e in events if e["reason"] == reason]
    events.sort(key=lambda e: (e["eventTime"], int(e["metadata"]["name"].rsplit(".", 1)[1])))
    return {e["regarding"]["name"]: e["note"] for e in events}


@pytest.mark.parametrize(
    ("extra", "free", "since"),
    [
        pytest.param([], "2 CPU", 0, id="one node"),
        pytest.param([SMALL_NODE_AT_5S], "2500m CPU", 5, id="a second node changes the message"),
    ],
)
def test_a_gang_that_cannot_fit_gets_the_unschedulable_condition_of_its_pods(
    extra: list[Obj], free: str, since: int
) -> None:
    sim = simulate([*GANG, *extra])
    group = sim.store.try_get("PodGroup", "default", "gang")
    assert group is not None
    status = group["status"]
    assert status["phase"] == "Inqueue"
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Unschedulable",
        "True",
        "Unschedulable",
    )
    # the gang fails fast (3 CPU asked, less free in all); each pod fits a node alone, so
    # each says why the gang cannot go, and the preempt action (which makes room for the
    # gang as a whole) adds to each that it cannot help
    gang = (
        f"the cluster has {free} free in all, 3 CPU needed: too little for 3 pods of 1 CPU, "
        "the least this gang can start with"
    )
    events = latest_events(sim, "FailedScheduling")
    assert condition["message"] == f"{gang}. {NO_VICTIMS}"
    assert events["w-0"] == events["w-1"] == events["w-2"] == f"{gang}. {NO_VICTIMS}"
    pods = {p["metadata"]["name"]: p for p in sim.store.list("Pod")[0]}
    for name in ("w-0", "w-1", "w-2"):
        [pod_condition] = pods[name]["status"]["conditions"]
        assert pod_condition["message"] == events[name]
    # set when the message last changed, on the clock of the run
    assert isinstance(sim.clock, VirtualClock)
    assert condition["lastTransitionTime"] == rfc3339(sim.clock.epoch + sim.origin + since)


# queue_status in a hierarchy -----------------------------------------------------------------

TREE = queue_tree(
    {
        "eng": QueueInfo("eng"),
        "eng-a": QueueInfo("eng-a", parent="eng"),
        "eng-b": QueueInfo("eng-b", parent="eng"),
        "orphan": QueueInfo("orphan", parent="gone"),
    }
)
OURS = {"conditions": [{"type": "Closed", "status": "True", "reason": "InvalidHierarchy"}]}


@pytest.mark.parametrize(
    ("name", "state", "observed", "expected"),
    [
        pytest.param(
            "eng",
            "Open",
            {},
            {"state": "Open", "allocated": {"cpu": "3", "pods": "2"}, "running": 2},
            id="a parent sums its leaves",
        ),
        pytest.param(
            "orphan",
            "Open",
            {},
            {"state": "Closed", "conditions": ["Closed"]},
            id="closed while its parent is missing",
        ),
        pytest.param(
            "eng-a",
            "Closed",
            OURS,
            {"state": "Open", "conditions": []},
            id="opens again once the scheduler's reason is gone",
        ),
        pytest.param(
            "eng-a",
            "Closed",
            {},
            {"state": "Closed", "conditions": []},
            id="a state someone else set is kept",
        ),
    ],
)
def test_queue_status_in_a_tree(name: str, state: str, observed: Obj, expected: Obj) -> None:
    jobs = {
        "eng-a": [job([S.RUNNING], name="a", cpus=["1"])],
        "eng-b": [job([S.RUNNING], name="b", cpus=["2"])],
    }
    status = queue_status(name, TREE, state=state, jobs=jobs, phases={}, observed=observed)
    got = {k: status[k] for k in expected}
    if "conditions" in got:
        got["conditions"] = [c["type"] for c in got["conditions"]]
    assert got == expected


# A refused bind says why ------------------------------------------------------------------


def test_a_refused_bind_is_said_once_per_message_and_again_after_a_failed_write() -> None:
    """``StatusReporter.bind_failed``: the pod's PodScheduled condition is written False
    with reason SchedulerError; the same message again writes nothing; a write that
    failed is forgotten, so the next failure writes it again."""
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, VirtualClock())
    failed: list[str] = []
    reporter = StatusReporter(
        ports.clock,
        SchedulerCache(L.SCHEDULER_NAME),
        ApiDispatcher(ports, Metrics(), concurrency=4, on_error=lambda label, exc: None),
        lambda call, exc: failed.append(call),
    )
    p = task("p", S.PENDING)
    cluster.fail[("patch", "p")] = [ServerError("refused")]

    async def main() -> None:
        await reporter.bind_failed(p, "Binding rejected: no")  # its write fails
        await reporter.bind_failed(p, "Binding rejected: no")  # written
        await reporter.bind_failed(p, "Binding rejected: no")  # said already
        await reporter.bind_failed(p, "Binding rejected: other")  # a new message

    anyio.run(main, backend_options={"loop_factory": VirtualTimeLoop})
    assert failed == ["patch"]
    written = [payload for call, name, payload in cluster.landed if call == "patch"]
    assert [c["conditions"][0]["message"] for c in written] == [
        "Binding rejected: no",
        "Binding rejected: other",
    ]
    assert {(c["conditions"][0]["status"], c["conditions"][0]["reason"]) for c in written} == {
        ("False", "SchedulerError")
    }


# A changed reason waits for its backoff ----------------------------------------------------


class _Clock:
    """A clock that is where the test puts it."""

    def __init__(self) -> None:
        self.at = 0.0

    def now(self) -> float:
        return self.at

    def wall(self) -> float:
        return 1_700_000_000.0 + self.at


@pytest.mark.parametrize(
    ("times", "texts", "writes", "owed"),
    [
        pytest.param([0.0, 0.5, 0.9], "aaa", 1, [0, 0, 0], id="the same reason: once"),
        pytest.param([0.0, 0.5, 0.9], "abc", 1, [0, 3, 3], id="changed within the backoff: owed"),
        pytest.param([0.0, 0.5, 1.2], "abc", 2, [0, 3, 0], id="changed, then due: written"),
        pytest.param(
            [0.0, 1.0, 2.0, 3.0, 4.0],
            "abcde",
            3,
            [0, 0, 3, 0, 3],
            id="changing every second: written at 0, 1 and 3 s",
        ),
    ],
)
def test_a_changed_reason_is_written_after_the_backoff(
    times: list[float], texts: str, writes: int, owed: list[int]
) -> None:
    """A gang of one pod that cannot fit, reported at ``times`` with its reason's text
    changing as ``texts``: the pod's condition and the PodGroup's status are written at
    once the first time, then only when the text changed and the pod's (the gang's)
    backoff has passed (1 s, doubling); a change held back is owed (``owed``: the pod's
    condition, its event and the PodGroup; the loop stays busy until they are told)."""
    clock = _Clock()
    cluster = FakeCluster()
    objects = [node("n1", cpu="1"), pod_group("g", min_member=1), pod("p", cpu="2", group="g")]
    cache = cache_with(*objects)
    pool = RecordingDispatcher(cluster)
    reporter = StatusReporter(clock, cache, pool, lambda *_: None)  # type: ignore[arg-type]
    got = []
    for at, text in zip(times, texts, strict=True):
        clock.at = at
        session = open_session(cache.snapshot(), app.resolve())
        for action in session.resolved.actions:
            session.run_action(action)
        (uid,) = list(session.task_reasons)
        session.task_reasons[uid] = replace(session.task_reasons[uid], message=f"pod {text}")
        (job,) = list(session.job_reasons)
        session.job_reasons[job] = replace(session.job_reasons[job], message=f"gang {text}")
        reporter.report(session)
        got.append(reporter.owed)
    assert pool.labels.count("Pod/default/p") == writes
    assert pool.labels.count("PodGroup/default/g") == writes
    assert got == owed


# A pod waiting for the pod grouper is quiet for a grace (issue 35 item 5) ------------------


@pytest.mark.parametrize(
    ("grace", "times", "told_at"),
    [
        pytest.param(10.0, [0.0, 0.9, 5.0, 9.9, 10.0, 12.0], 10.0, id="told-after-the-grace"),
        pytest.param(10.0, [0.0, 0.5, 1.0], None, id="grouped-within-a-second-never-told"),
        pytest.param(0.0, [0.0, 1.0], 0.0, id="no-grace-told-at-once"),
    ],
)
def test_a_pod_waiting_for_the_grouper_is_told_only_after_the_grace(
    grace: float, times: list[float], told_at: float | None
) -> None:
    """A Job's pod that names no group waits for ``sluice controller``'s pod grouper: a
    normal step, which kube-scheduler's pre-enqueue would not report. No
    ``FailedScheduling`` event and no ``PodScheduled=False`` until it has waited
    ``grace``; meanwhile the telling is owed (the loop stays busy to tell it in time)."""
    clock = _Clock()
    cluster = FakeCluster()
    member = pod("train-0", cpu="100m")
    member["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
    ]
    cache = cache_with(node("n1", cpu="1"), member)
    pool = RecordingDispatcher(cluster)
    reporter = StatusReporter(clock, cache, pool, lambda *_: None, grouper_grace=grace)  # type: ignore[arg-type]
    owed, first_event, first_write = [], None, None
    for at in times:
        clock.at = at
        session = open_session(cache.snapshot(), app.resolve())
        for action in session.resolved.actions:
            session.run_action(action)
        reporter.report(session)
        owed.append(reporter.owed)
        told = [e for e in cluster.events if e.reason == "FailedScheduling"]
        if told and first_event is None:
            first_event = at
            assert told[0].message.startswith("waiting for sluice controller to group this pod")
        if pool.labels.count("Pod/default/train-0") and first_write is None:
            first_write = at
    assert first_event == first_write == told_at
    assert owed[0] == (1 if told_at != 0.0 else 0)


@pytest.mark.parametrize(
    ("seen_waiting", "times", "told_at"),
    [
        pytest.param(True, [0.0, 0.5, 1.0, 9.9, 10.0], 10.0, id="grouped-then-gang-short"),
        pytest.param(False, [0.5, 1.0], 0.5, id="never-seen-waiting-told-at-once"),
    ],
)
def test_a_pod_just_grouped_is_quiet_while_its_gang_gathers(
    seen_waiting: bool, times: list[float], told_at: float
) -> None:
    """The grouper labels a Job's pods one after another: a pod seen waiting for it, then
    labelled into a PodGroup of 3 that has only it yet (``fewer than its minMember``), is
    within the same grace, counted from its wait for the grouper. A pod never seen
    waiting (labelled by hand, say) is told at once, as before."""
    clock = _Clock()
    cluster = FakeCluster()
    member = pod("train-0", cpu="100m")
    member["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
    ]
    grouped = copy.deepcopy(member)
    grouped["metadata"]["labels"][L.POD_GROUP_LABEL] = "g"
    cache = cache_with(node("n1", cpu="1"), pod_group("g", min_member=3))
    cache.handle("Pod", "ADDED", member if seen_waiting else grouped)
    pool = RecordingDispatcher(cluster)
    reporter = StatusReporter(clock, cache, pool, lambda *_: None, grouper_grace=10.0)  # type: ignore[arg-type]
    first: float | None = None
    for at in times:
        clock.at = at
        if at >= 0.5:
            cache.handle("Pod", "MODIFIED", grouped)
        session = open_session(cache.snapshot(), app.resolve())
        for action in session.resolved.actions:
            session.run_action(action)
        reporter.report(session)
        told = [e for e in cluster.events if e.reason == "FailedScheduling"]
        if told and first is None:
            first = at
            assert "fewer than its minMember 3" in told[0].message, told[0].message
    assert first == told_at
