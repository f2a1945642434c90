"""scheduler.kube.events: series, the per-object limit, the queue, the writer's own client."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from kube_support import Cluster, FakeClock, running_cluster, wait_until

from scheduler.api.errors import (
    AmbiguousError,
    ApiError,
    InvalidObjectError,
    TooManyRequestsError,
)
from scheduler.kube import EventSettings, KubeBackend, KubeEventRecorder
from scheduler.kube.api_errors import error_from_status
from scheduler.kube.events import DROP_LIMIT, DROP_NAMESPACE_GONE, DROP_QUEUE_FULL
from scheduler.ports import Event, ObjectRef

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def events_of(cluster: Cluster, namespace: str = "default") -> list[dict[str, Any]]:
    return cluster.store.list("Event", namespace)[0]


def failed_scheduling(name: str, message: str = "0/3 nodes are available") -> Event:
    return Event(
        ObjectRef("Pod", "default", name, f"uid-{name}"), "Warning", "FailedScheduling", message
    )


def scheduled(name: str) -> Event:
    ref = ObjectRef("Pod", "default", name, f"uid-{name}")
    return Event(ref, "Normal", "Scheduled", f"Successfully assigned default/{name} to n1")


async def test_the_same_event_twice_is_one_event_with_a_series(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        backend = KubeBackend(cluster.client)
        await tg.start(backend.run)
        backend.record(failed_scheduling("a"))
        await wait_until(lambda: len(events_of(cluster)) == 1, what="the first event")
        backend.record(failed_scheduling("a"))
        await wait_until(
            lambda: (events_of(cluster)[0].get("series") or {}).get("count") == 2,
            what="a series count of 2",
        )
        event = events_of(cluster)[0]
        assert event["apiVersion"] == "events.k8s.io/v1"
        assert event["regarding"] == {
            "kind": "Pod",
            "namespace": "default",
            "name": "a",
            "uid": "uid-a",
        }
        assert event["reason"] == "FailedScheduling" and event["type"] == "Warning"
        assert event["note"] == "0/3 nodes are available"
        assert event["reportingController"] == "sluice" and event["reportingInstance"]
        assert event["eventTime"].endswith("Z") and len(event["eventTime"].split(".")[1]) == 7
        backend.record(failed_scheduling("a", "another message"))
        backend.record(Event(ObjectRef("Node", "", "n1"), "Normal", "Cordoned", "by the test"))
        # another message is another Event; a cluster-scoped object's go to "default"
        await wait_until(lambda: len(events_of(cluster)) == 3, what="two more events")
        assert backend.events.aggregated == 1 and backend.events.dropped == 0
        names = sorted(e["metadata"]["name"].split(".")[0] for e in events_of(cluster))
        assert names == ["a", "a", "n1"]
        tg.cancel_scope.cancel()


async def test_repeats_while_a_create_is_queued_go_into_it(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client)
        for _ in range(3):  # before the writer runs at all
            recorder.record(failed_scheduling("a"))
        await tg.start(recorder.run)
        await wait_until(lambda: recorder.pending == 0 and recorder.written == 1)
        (event,) = events_of(cluster)
        assert event["series"]["count"] == 3
        tg.cancel_scope.cancel()


async def test_later_repeats_are_written_at_most_every_series_interval(tmp_path: Path) -> None:
    settings = EventSettings(series_interval=0.3)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=settings)
        await tg.start(recorder.run)

        def count() -> int | None:
            series: dict[str, Any] = events_of(cluster)[0].get("series") or {}
            return series.get("count")

        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.written == 1)
        recorder.record(failed_scheduling("a"))  # the first repeat: at once
        await wait_until(lambda: count() == 2 and recorder.written == 2)
        for _ in range(5):
            recorder.record(failed_scheduling("a"))
        await anyio.sleep(0.1)
        assert count() == 2 and recorder.pending == 1  # held back
        # the store holds the update before the writer has read the reply and counted it
        await wait_until(
            lambda: count() == 7 and recorder.written >= 3, timeout=2.0, what="the deferred update"
        )
        assert recorder.written == 3  # one update for the five repeats, not five
        tg.cancel_scope.cancel()


async def test_one_event_per_pod_of_a_burst_is_never_dropped(tmp_path: Path) -> None:
    """The regression of issue 10: 212 of 10,000 Scheduled events reached the server,
    because new events over all objects were dropped past 10 a second. Only the
    per-object filter drops now: one event for each of 2,000 pods, all written."""
    pods = 2000
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=EventSettings(qps=0))
        for i in range(pods):
            recorder.record(scheduled(f"p{i}"))
        assert recorder.dropped == 0
        await tg.start(recorder.run)
        await wait_until(lambda: recorder.written == pods, timeout=60, what="2,000 writes")
        assert len(events_of(cluster)) == pods
        tg.cancel_scope.cancel()


async def test_drops_are_counted_by_reason(tmp_path: Path) -> None:
    clock = FakeClock()
    drops: Counter[str] = Counter()
    settings = EventSettings(per_object_burst=3, per_object_per_minute=60, max_pending=6)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(
            cluster.client, settings=settings, clock=clock, on_drop=lambda r: drops.update([r])
        )
        for i in range(5):  # one object, five different messages: 3 pass
            recorder.record(failed_scheduling("a", f"message {i}"))
        assert drops == {DROP_LIMIT: 2}
        for name in ("b", "c", "d", "e"):  # 3 more fit in the queue of 6
            recorder.record(failed_scheduling(name))
        assert drops == {DROP_LIMIT: 2, DROP_QUEUE_FULL: 1}
        recorder.record(failed_scheduling("b"))  # a repeat joins its series: never dropped
        clock.advance(1.0)  # one more token a second for "a"; the queue still full
        recorder.record(failed_scheduling("a", "message 9"))
        assert drops == {DROP_LIMIT: 2, DROP_QUEUE_FULL: 2} and recorder.dropped == 4
        tg.start_soon(recorder.run)
        await wait_until(lambda: len(events_of(cluster)) == 6, what="six events written")
        recorder.record(failed_scheduling("a", "message 10"))  # room again, and a token
        await wait_until(lambda: len(events_of(cluster)) == 7, what="a seventh event")
        tg.cancel_scope.cancel()


async def test_event_writes_never_take_a_token_of_the_api_client(tmp_path: Path) -> None:
    """The process' client allows 1 request a second; the events' own client writes 100
    events at once without taking any of the process' tokens (binds never wait for them)."""
    async with running_cluster(tmp_path, qps=1.0, burst=1) as cluster:
        taken = cluster.client.limiter.taken
        async with anyio.create_task_group() as tg:
            recorder = KubeEventRecorder(cluster.client, settings=EventSettings(qps=0))
            await tg.start(recorder.run)
            for i in range(100):
                recorder.record(scheduled(f"p{i}"))
            await wait_until(lambda: recorder.written == 100, timeout=20, what="100 events")
            tg.cancel_scope.cancel()
        assert cluster.client.limiter.taken == taken


async def test_new_events_go_before_series_updates(tmp_path: Path) -> None:
    settings = EventSettings(series_interval=0.0, workers=1)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=settings)
        await tg.start(recorder.run)
        for i in range(5):
            recorder.record(failed_scheduling(f"w{i}"))
        await wait_until(lambda: recorder.written == 5)
        for i in range(5):  # five series updates due, then one new event
            recorder.record(failed_scheduling(f"w{i}"))
        recorder.record(scheduled("s"))
        order: list[str] = []
        real_request = recorder._client.request

        async def spy(method: str, path: str, **kw: Any) -> dict[str, Any]:
            order.append(method)
            return await real_request(method, path, **kw)

        recorder._client.request = spy  # type: ignore[method-assign]
        await wait_until(lambda: recorder.written == 11, what="six more writes")
        assert order[0] == "POST" and order[1:] == ["PATCH"] * 5, order
        tg.cancel_scope.cancel()


async def test_drained_returns_when_the_due_writes_are_done(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client)
        await tg.start(recorder.run)
        for i in range(50):
            recorder.record(scheduled(f"p{i}"))
        with anyio.fail_after(10):
            await recorder.drained()
        assert recorder.written == 50 and len(events_of(cluster)) == 50
        tg.cancel_scope.cancel()


async def test_record_never_raises_nor_blocks(tmp_path: Path) -> None:
    recorder = KubeEventRecorder(None, settings=EventSettings(max_pending=2))  # type: ignore[arg-type]
    for name in ("a", "b", "c", "d"):
        recorder.record(failed_scheduling(name))  # no writer: they queue, then drop
    assert recorder.pending == 2 and recorder.dropped == 2
    recorder.record(None)  # type: ignore[arg-type]
    assert recorder.dropped == 3


QUICK_RETRY = EventSettings(retry_delay=0.05)


async def test_a_write_is_retried_while_the_api_server_is_unreachable(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=QUICK_RETRY)
        await tg.start(recorder.run)
        await cluster.cut()
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.retried >= 2, what="two retries")
        await cluster.resume()
        await wait_until(
            lambda: len(events_of(cluster)) == 1 and recorder.written == 1,
            what="the event, written late",
        )
        assert recorder.failed == 0
        tg.cancel_scope.cancel()


def _failing_posts(error: ApiError, *, applied: bool) -> Callable[..., Any]:
    """A request wrapper: the first POST raises ``error``, after it was applied (the
    reply lost) or without being sent; with ``applied`` false, every POST does."""

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        posts = 0

        async def request(method: str, path: str, **kw: Any) -> Any:
            nonlocal posts
            if method != "POST":
                return await real(method, path, **kw)
            posts += 1
            if not applied:
                raise error
            reply = await real(method, path, **kw)
            if posts == 1:
                raise error
            return reply

        return request

    return wrap


@pytest.mark.parametrize(
    ("wrapper", "events", "failed"),
    [
        pytest.param(
            _failing_posts(AmbiguousError("HTTP 500 InternalError", kind="Event"), applied=True),
            1,
            0,
            id="reply-lost: retried, AlreadyExists is success, one Event",
        ),
        pytest.param(
            _failing_posts(TooManyRequestsError("slow down", kind="Event"), applied=True),
            2,
            0,
            id="429 after the write (as a proxy could): retried under a new name",
        ),
        pytest.param(
            _failing_posts(InvalidObjectError("note: too long", kind="Event"), applied=False),
            0,
            1,
            id="422: not retried",
        ),
        pytest.param(
            _failing_posts(
                error_from_status(403, {"reason": "Forbidden", "message": "events is forbidden"}),
                applied=False,
            ),
            0,
            1,
            id="403: not retried",
        ),
    ],
)
async def test_failed_writes_are_retried_only_when_the_failure_may_pass(
    tmp_path: Path, wrapper: Callable[..., Any], events: int, failed: int
) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=QUICK_RETRY)
        await tg.start(recorder.run)
        client = recorder._client
        client.request = wrapper(client.request)  # type: ignore[method-assign]
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.written + recorder.failed >= 1, what="an outcome")
        await anyio.sleep(0.3)  # and nothing more afterwards
        assert (len(events_of(cluster)), recorder.failed) == (events, failed)
        if failed:
            assert recorder.retried == 0
            recorder.record(failed_scheduling("a"))  # a repeat after a failure: a new Event
            await wait_until(lambda: recorder.failed == 2, what="the repeat's own failure")
        tg.cancel_scope.cancel()


#: The Status the NamespaceLifecycle admission answers a create in a namespace being
#: deleted with (as kube-apiserver v1.36.2 does).
NAMESPACE_TERMINATING = {
    "kind": "Status",
    "status": "Failure",
    "message": 'events.events.k8s.io "a.1" is forbidden: unable to create new content in '
    "namespace default because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "a.1",
        "kind": "events",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace default is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}


#: kube-apiserver v1.36.2's answer to a create in a namespace that does not exist.
NAMESPACE_NOT_FOUND = {
    "kind": "Status",
    "status": "Failure",
    "message": 'namespaces "default" not found',
    "reason": "NotFound",
    "details": {"name": "default", "kind": "namespaces"},
    "code": 404,
}


@pytest.mark.parametrize(
    ("status", "body"),
    [(403, NAMESPACE_TERMINATING), (404, NAMESPACE_NOT_FOUND)],
    ids=["being-deleted", "deleted"],
)
async def test_an_event_in_a_namespace_gone_is_dropped_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int, body: dict[str, Any]
) -> None:
    """A create refused because the namespace is being deleted, or met by a 404 because
    it is gone, is posted once: not tried again (a 404 is not taken for an Event that
    expired), not counted as failed and not logged as a warning (the e2e tests read a 403
    in the log as RBAC's refusal); it is a drop of its own reason."""
    drops: Counter[str] = Counter()
    posts = 0
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(
            cluster.client, settings=QUICK_RETRY, on_drop=lambda r: drops.update([r])
        )
        await tg.start(recorder.run)
        client = recorder._client
        failing = _failing_posts(error_from_status(status, body), applied=False)(client.request)

        async def counted(method: str, path: str, **kw: Any) -> Any:
            nonlocal posts
            posts += method == "POST"
            return await failing(method, path, **kw)

        client.request = counted  # type: ignore[method-assign]
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.dropped == 1, what="the event dropped")
        await anyio.sleep(0.3)  # and nothing more afterwards
        assert (posts, recorder.failed, recorder.retried, recorder.written) == (1, 0, 0, 0)
        assert drops == {DROP_NAMESPACE_GONE: 1} and recorder.pending == 0
        assert events_of(cluster) == []
        tg.cancel_scope.cancel()
    assert f"HTTP {status}" not in capsys.readouterr().out


async def test_a_series_whose_event_expired_starts_a_new_event(tmp_path: Path) -> None:
    """A 404 on a series update means the Event expired (the API server keeps Events about
    an hour), not that the namespace is gone: the series is written again as a new Event."""
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=QUICK_RETRY)
        await tg.start(recorder.run)
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: len(events_of(cluster)) == 1, what="the first event")
        [first] = events_of(cluster)
        cluster.store.delete("Event", "default", first["metadata"]["name"])  # it expired
        recorder.record(failed_scheduling("a"))  # a repeat: its series update meets a 404
        await wait_until(lambda: len(events_of(cluster)) == 1, what="a new event")
        [second] = events_of(cluster)
        assert second["metadata"]["name"] != first["metadata"]["name"]
        assert (recorder.dropped, recorder.failed) == (0, 0)
        tg.cancel_scope.cancel()


async def test_a_refused_series_update_waits_its_interval(tmp_path: Path) -> None:
    """A series update refused for good (a 403) is tried again only after the series
    interval, not at once in a loop (the repeats' count stays to be written)."""
    settings = EventSettings(series_interval=30.0, retry_delay=0.05)
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=settings)
        await tg.start(recorder.run)
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.written == 1)
        client = recorder._client
        real = client.request
        patches = 0

        async def request(method: str, path: str, **kw: Any) -> Any:
            nonlocal patches
            if method == "PATCH":
                patches += 1
                await anyio.sleep(0.001)  # a refusal takes a round trip too
                raise error_from_status(403, {"reason": "Forbidden"}, kind="Event")
            return await real(method, path, **kw)

        client.request = request  # type: ignore[method-assign]
        recorder.record(failed_scheduling("a"))  # the first repeat: at once, refused
        await wait_until(lambda: recorder.failed == 1, what="the refused update")
        await anyio.sleep(0.3)
        assert patches == 1 and recorder.failed == 1 and recorder.pending == 1
        tg.cancel_scope.cancel()


async def test_a_write_failing_for_a_reason_that_may_pass_is_tried_12_times_in_all(
    tmp_path: Path,
) -> None:
    """client-go's cap (``max_tries``, 12 by default): every POST fails with a 500 never
    applied; the event is tried 12 times, then counted failed, and no more is sent."""
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        recorder = KubeEventRecorder(cluster.client, settings=EventSettings(retry_delay=0.0005))
        await tg.start(recorder.run)
        client = recorder._client
        posts = Counter[str]()
        failing = _failing_posts(AmbiguousError("HTTP 500", kind="Event"), applied=False)(
            client.request
        )

        async def counted(method: str, path: str, **kw: Any) -> Any:
            posts[method] += 1
            return await failing(method, path, **kw)

        client.request = counted  # type: ignore[method-assign]
        recorder.record(failed_scheduling("a"))
        await wait_until(lambda: recorder.failed >= 1, what="the write given up", timeout=30)
        await anyio.sleep(0.3)  # and nothing more afterwards
        assert (posts["POST"], recorder.retried, recorder.failed) == (12, 11, 1)
        assert events_of(cluster) == []
        tg.cancel_scope.cancel()
