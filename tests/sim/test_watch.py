"""ObjectStore watch: subscribers, history, GoneError and the async watch with bookmarks."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anyio
import pytest
from sim_builders import new_store, node, obj, pod

from scheduler.api.errors import GoneError
from scheduler.sim.store import ObjectStore, WatchEvent
from scheduler.sim.virtual_time import VirtualClock, run_virtual


def _summary(events: list[WatchEvent]) -> list[tuple[str, str, str, int]]:
    return [(e.type, e.kind, e.obj["metadata"].get("name", ""), e.resource_version) for e in events]


def _churn(store: ObjectStore) -> None:
    store.create(pod("a"))  # 1
    store.create(node("n1"))  # 2
    store.bind("default", "a", "n1")  # 3
    store.patch("Pod", "default", "a", {"status": {"phase": "Running"}}, subresource="status")  # 4
    store.create(pod("b", ns="other"))  # 5
    store.delete("Pod", "default", "a", grace_period_seconds=0)  # 6


def test_subscribers_see_every_write_in_commit_order() -> None:
    store, _ = new_store()
    everything: list[WatchEvent] = []
    pods: list[WatchEvent] = []
    store.subscribe(everything.append)
    store.subscribe(pods.append, kinds=["Pod"])
    _churn(store)
    assert _summary(everything) == [
        ("ADDED", "Pod", "a", 1),
        ("ADDED", "Node", "n1", 2),
        ("MODIFIED", "Pod", "a", 3),
        ("MODIFIED", "Pod", "a", 4),
        ("ADDED", "Pod", "b", 5),
        ("DELETED", "Pod", "a", 6),
    ]
    assert [e.resource_version for e in pods] == [1, 3, 4, 5, 6]
    for e in everything:
        assert e.obj["metadata"]["resourceVersion"] == str(e.resource_version)


def test_deleted_event_carries_last_state_with_new_revision() -> None:
    store, _ = new_store()
    store.create(pod("a", labels={"k": "v"}))
    events: list[WatchEvent] = []
    store.subscribe(events.append)
    store.delete("Pod", "default", "a")
    [ev] = events
    assert ev.type == "DELETED"
    assert ev.obj["metadata"]["labels"] == {"k": "v"}
    assert ev.obj["metadata"]["resourceVersion"] == "2"


def test_kinds_may_be_one_string() -> None:
    store, _ = new_store()
    events: list[WatchEvent] = []
    store.subscribe(events.append, kinds="Node")
    store.create(pod("a"))
    store.create(node("n"))
    assert [e.kind for e in events] == ["Node"]


def test_unsubscribe_is_idempotent() -> None:
    store, _ = new_store()
    events: list[WatchEvent] = []
    unsubscribe = store.subscribe(events.append)
    store.create(pod("a"))
    unsubscribe()
    unsubscribe()
    store.create(pod("b"))
    assert len(events) == 1


def test_failing_subscriber_does_not_stop_others_nor_the_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, _ = new_store()

    def broken(ev: WatchEvent) -> None:
        raise RuntimeError("boom")

    events: list[WatchEvent] = []
    store.subscribe(broken)
    store.subscribe(events.append)
    store.create(pod("a"))
    assert len(events) == 1
    assert store.count("Pod") == 1
    assert "boom" in caplog.text


def test_writes_from_a_callback_are_delivered_after_the_current_event() -> None:
    store, _ = new_store()
    first: list[int] = []
    second: list[int] = []

    def reacts(ev: WatchEvent) -> None:
        first.append(ev.resource_version)
        if ev.type == "ADDED" and ev.kind == "Pod":
            store.patch(
                "Pod",
                "default",
                ev.obj["metadata"]["name"],
                {"metadata": {"labels": {"seen": "1"}}},
            )

    store.subscribe(reacts)
    store.subscribe(lambda ev: second.append(ev.resource_version))
    store.create(pod("a"))
    assert first == [1, 2]
    assert second == [1, 2]


# ----------------------------------------------------------------------------- history

HISTORY_CASES = [
    ("all-pods", "Pod", 0, None, [1, 3, 4, 5, 6]),
    ("pods-since-3", "Pod", 3, None, [4, 5, 6]),
    ("pods-in-default", "Pod", 0, "default", [1, 3, 4, 6]),
    ("pods-in-other", "Pod", 0, "other", [5]),
    ("nodes", "Node", 0, None, [2]),
    ("nodes-ns-ignored", "Node", 0, "whatever", [2]),
    ("up-to-date", "Pod", 6, None, []),
    ("future", "Pod", 60, None, []),
]


@pytest.mark.parametrize(
    ("kind", "since", "namespace", "expected"),
    [c[1:] for c in HISTORY_CASES],
    ids=[c[0] for c in HISTORY_CASES],
)
def test_events_since(kind: str, since: int, namespace: str | None, expected: list[int]) -> None:
    store, _ = new_store()
    _churn(store)
    assert [e.resource_version for e in store.events_since(kind, since, namespace)] == expected


@pytest.mark.parametrize(
    ("history", "since", "gone"),
    [(3, 2, True), (3, 3, False), (3, 5, False), (0, 5, True), (0, 6, False), (100, 0, False)],
    ids=["too-old", "oldest-kept", "recent", "no-history-old", "no-history-current", "all-kept"],
)
def test_history_is_bounded(history: int, since: int, gone: bool) -> None:
    store, _ = new_store(history=history)
    _churn(store)
    if gone:
        with pytest.raises(GoneError, match=f"too old resource version: {since}"):
            store.events_since("Pod", since)
    else:
        assert all(e.resource_version > since for e in store.events_since("Pod", since))


# ----------------------------------------------------------------------------- async watch


def _watch_scenario(**watch_kwargs: Any) -> list[tuple[float, str, str, int]]:
    """Writes at t=5 (create a), t=25 (label a), t=26 (create b); a watch from t=0 to t=40."""

    async def main() -> list[tuple[float, str, str, int]]:
        clock = VirtualClock()
        store = ObjectStore(clock.wall)
        store.create(pod("pre"))
        seen: list[tuple[float, str, str, int]] = []

        async def writer() -> None:
            await clock.sleep(5)
            store.create(pod("a"))
            await clock.sleep(20)
            store.patch("Pod", "default", "a", {"metadata": {"labels": {"x": "1"}}})
            await clock.sleep(1)
            store.create(pod("b", ns="other"))
            store.create(node("n1"))

        async def watcher() -> None:
            with anyio.move_on_after(40):
                async with aclosing(store.watch("Pod", **watch_kwargs)) as events:
                    async for ev in events:
                        name = ev.obj["metadata"].get("name", "")
                        seen.append((clock.now(), ev.type, name, ev.resource_version))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher)
            tg.start_soon(writer)
        return seen

    return run_virtual(main)


WATCH_CASES = [
    (
        "no-rv-lists-then-streams",
        {},
        [(0.0, "ADDED", "pre", 1), (5.0, "ADDED", "a", 2), (25.0, "MODIFIED", "a", 3),
         (26.0, "ADDED", "b", 4)],
    ),
    (
        "from-rv-replays-history",
        {"resource_version": 0},
        [(0.0, "ADDED", "pre", 1), (5.0, "ADDED", "a", 2), (25.0, "MODIFIED", "a", 3),
         (26.0, "ADDED", "b", 4)],
    ),
    (
        "from-current-rv",
        {"resource_version": 1},
        [(5.0, "ADDED", "a", 2), (25.0, "MODIFIED", "a", 3), (26.0, "ADDED", "b", 4)],
    ),
    (
        "namespace",
        {"namespace": "other", "resource_version": 1},
        [(26.0, "ADDED", "b", 4)],
    ),
    (
        "bookmarks",
        {"resource_version": 1, "bookmark_interval": 10},
        [(5.0, "ADDED", "a", 2), (10.0, "BOOKMARK", "", 2), (20.0, "BOOKMARK", "", 2),
         (25.0, "MODIFIED", "a", 3), (26.0, "ADDED", "b", 4), (30.0, "BOOKMARK", "", 5)],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "expected"), [c[1:] for c in WATCH_CASES], ids=[c[0] for c in WATCH_CASES]
)
def test_async_watch(kwargs: dict[str, Any], expected: list[tuple[float, str, str, int]]) -> None:
    assert _watch_scenario(**kwargs) == expected


def test_async_watch_gone() -> None:
    async def main() -> None:
        store, _ = new_store(history=1)
        store.create(obj("Lease", "a"))
        store.create(obj("Lease", "b"))
        async with aclosing(store.watch("Lease", resource_version=0)) as events:
            async for _ in events:
                pass

    with pytest.raises(GoneError):
        run_virtual(main)


def test_async_watch_unsubscribes_when_closed() -> None:
    async def main() -> int:
        store, _ = new_store()
        async with aclosing(store.watch("Pod")) as events:
            store.create(pod("a"))
            async for ev in events:
                assert ev.obj["metadata"]["name"] == "a"
                break
        return store._watches.subscribers

    assert run_virtual(main) == 0


def test_bookmark_object_shape() -> None:
    async def main() -> WatchEvent:
        store, _ = new_store()
        store.create(obj("Lease", "a"))
        async with aclosing(store.watch("Lease", resource_version=1, bookmark_interval=1)) as it:
            async for ev in it:
                return ev
        raise AssertionError("no event")

    ev = run_virtual(main)
    assert ev.type == "BOOKMARK"
    assert ev.obj == {"kind": "Lease", "metadata": {"resourceVersion": "1"}}
