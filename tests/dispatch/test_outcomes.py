"""OutcomeResolver: what became of a write whose reply was lost, per call kind and per
answer of the reads (or rewrites), on the virtual clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from scheduler.api.errors import (
    AmbiguousError,
    ApiError,
    ConflictError,
    NotFoundError,
    ServerError,
)
from scheduler.dispatch.outcomes import Outcome, OutcomeResolver, RetryPolicy
from scheduler.logging import quiet
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, ObjectRef, PodState
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.fakes import FakeCluster

POD = ObjectRef("Pod", "default", "p", "uid-p")
LOST = AmbiguousError("HTTP 500 InternalError: etcd timeout")
HERE = PodState("n1", False)
UNBOUND = PodState("", False)
ELSEWHERE = PodState("n2", False)
TERMINATING = PodState("n1", True)
POLICY = RetryPolicy()


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet()


def resolver(cluster: FakeCluster, *, reader: bool = True) -> tuple[OutcomeResolver, Metrics]:
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster if reader else None)
    metrics = Metrics()
    return OutcomeResolver(ports, metrics, POLICY), metrics


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    out: list[Any] = []

    async def main() -> None:
        out.append(await body())

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
    return out[0]


def counted(metrics: Metrics, call: str, outcome: str) -> tuple[float, float]:
    r = metrics.registry
    return (
        r.get_sample_value("scheduler_api_ambiguous_total", {"call": call}) or 0.0,
        r.get_sample_value(
            "scheduler_api_ambiguous_resolved_total", {"call": call, "outcome": outcome}
        )
        or 0.0,
    )


BIND_CASES = [
    ([HERE], False, True, (Outcome.TOOK_EFFECT, "n1"), 1),
    ([UNBOUND], False, True, (Outcome.DID_NOT, ""), 1),
    ([ELSEWHERE], False, True, (Outcome.DID_NOT, ELSEWHERE.node_name), 1),
    ([None], False, True, (Outcome.DID_NOT, ""), 1),
    ([ServerError("refused"), LOST, HERE], False, True, (Outcome.TOOK_EFFECT, "n1"), 3),
    ([ServerError("refused")], False, True, (Outcome.UNKNOWN, ""), None),
    ([UNBOUND], True, True, (Outcome.TOOK_EFFECT, ""), 0),
    ([HERE], False, False, (Outcome.UNKNOWN, ""), 0),
]
"""The answers of the reads, the events show it bound, a reader, the outcome and the node
a read showed the pod on, the reads made (None: some)."""


@pytest.mark.parametrize(
    ("answers", "shown", "reader", "outcome", "reads"),
    BIND_CASES,
    ids=[
        "read-shows-it-bound-there",
        "read-shows-it-unbound",
        "read-shows-it-bound-elsewhere",
        "read-shows-it-gone",
        "reads-fail-then-show-it-bound",
        "reads-keep-failing-unknown-at-deadline",
        "events-show-it-bound-no-read",
        "no-reader-no-event-unknown",
    ],
)
def test_bind_outcome(
    answers: list[PodState | ApiError | None],
    shown: bool,
    reader: bool,
    outcome: tuple[Outcome, str],
    reads: int | None,
) -> None:
    cluster = FakeCluster(pods={"p": list(answers)})
    res, metrics = resolver(cluster, reader=reader)
    times: list[float] = []

    async def body() -> tuple[Outcome, str]:
        t0 = anyio.current_time()
        got = await res.bind(POD, "n1", LOST, shown=lambda: shown)
        times.append(anyio.current_time() - t0)
        return got

    assert run(body) == outcome
    n = sum(1 for c in cluster.calls if c[0] == "read")
    if reads is not None:
        assert n == reads
    else:
        assert n > 3  # retried with the backoff until the deadline
    assert times[0] <= POLICY.deadline + 1e-9
    if outcome[0] is Outcome.UNKNOWN:
        assert times[0] == pytest.approx(POLICY.deadline)
    assert counted(metrics, "bind", outcome[0].value) == (1.0, 1.0)
    assert res.in_flight == 0


@pytest.mark.parametrize(
    ("answers", "shown", "outcome"),
    [
        ([None], False, Outcome.TOOK_EFFECT),
        ([TERMINATING], False, Outcome.TOOK_EFFECT),
        ([HERE], False, Outcome.DID_NOT),
        ([HERE], True, Outcome.TOOK_EFFECT),
        ([LOST, None], False, Outcome.TOOK_EFFECT),
        ([LOST], False, Outcome.UNKNOWN),
    ],
    ids=[
        "read-shows-it-gone",
        "read-shows-it-terminating",
        "read-shows-it-still-there",
        "events-show-it-gone",
        "read-fails-then-gone",
        "reads-keep-failing",
    ],
)
def test_eviction_outcome(
    answers: list[PodState | ApiError | None], shown: bool, outcome: Outcome
) -> None:
    cluster = FakeCluster(pods={"p": list(answers)})
    res, metrics = resolver(cluster)
    assert run(lambda: res.eviction(POD, LOST, shown=lambda: shown)) is outcome
    assert counted(metrics, "evict", outcome.value) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("rewrites", "raised", "outcome", "writes"),
    [
        ([], None, Outcome.TOOK_EFFECT, 1),
        ([LOST, LOST], None, Outcome.TOOK_EFFECT, 3),
        ([NotFoundError("gone")], NotFoundError, Outcome.DID_NOT, 1),
        ([ConflictError("uid")], ConflictError, Outcome.DID_NOT, 1),
        ([LOST] * 100, AmbiguousError, Outcome.UNKNOWN, None),
    ],
    ids=["rewrite-lands", "lost-twice-then-lands", "pod-gone", "refused", "never-known"],
)
def test_patch_is_rewritten_until_known(
    rewrites: list[ApiError],
    raised: type[ApiError] | None,
    outcome: Outcome,
    writes: int | None,
) -> None:
    cluster = FakeCluster(fail={("patch", "p"): list(rewrites)})
    res, metrics = resolver(cluster)

    async def write() -> None:
        await cluster.patch_pod_status(POD, {"nominatedNodeName": "n1"})

    async def body() -> BaseException | None:
        try:
            await res.patch(POD, LOST, write)
        except ApiError as exc:
            return exc
        return None

    got = run(body)
    if raised is None:
        assert got is None
    else:
        assert isinstance(got, raised)
    n = len(cluster.of("p"))
    if writes is not None:
        assert n == writes
    else:
        assert 3 < n < 100
    assert counted(metrics, "patch", outcome.value) == (1.0, 1.0)


def test_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="first <= cap"):
        RetryPolicy(first=5.0, cap=1.0)
