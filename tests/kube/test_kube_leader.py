"""scheduler.kube.leader: two electors on one Lease of the API emulator, short timings."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from kube_support import Cluster, running_cluster, wait_until

from scheduler.kube import LeaderElectionConfig, LeaderElector, LeadershipLost, LeaseRecord
from scheduler.kube.timestamps import format_micro_time, parse_time

pytestmark = pytest.mark.anyio

MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config(identity: str, **overrides: Any) -> LeaderElectionConfig:
    values: dict[str, Any] = {
        "name": "sluice",
        "namespace": "kube-system",
        "identity": identity,
        "lease_duration": 1,
        "renew_deadline": 0.6,
        "retry_period": 0.2,
    }
    values.update(overrides)
    return LeaderElectionConfig(**values)


def lease(cluster: Cluster) -> dict[str, Any] | None:
    return cluster.store.try_get("Lease", "kube-system", "sluice")


def spec(cluster: Cluster) -> dict[str, Any]:
    found = lease(cluster)
    return dict(found["spec"]) if found else {}


class Work:
    """The leader's work: records when it runs and when it is cancelled."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = False

    async def __call__(self) -> None:
        self.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


async def test_one_leads_the_other_takes_over_when_it_stops_renewing(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        a = LeaderElector(cluster.client, config("a", release_on_cancel=False))
        b = LeaderElector(cluster.client, config("b"))
        work_a, work_b = Work(), Work()
        scope_a = anyio.CancelScope()

        async def run_a() -> None:
            with scope_a:
                await a.run(work_a)

        tg.start_soon(run_a)
        await work_a.started.wait()
        tg.start_soon(b.run, work_b)
        # while a renews, b never leads (the lease outlives several of b's attempts)
        await anyio.sleep(1.5)
        assert not work_b.started.is_set() and not b.is_leader
        first = spec(cluster)
        assert first["holderIdentity"] == "a" and first["leaseTransitions"] == 0
        assert first["leaseDurationSeconds"] == 1
        assert MICRO.match(first["renewTime"]) and MICRO.match(first["acquireTime"])
        # a stops renewing (and does not release): b waits for the lease to expire
        scope_a.cancel()
        stopped = time.monotonic()
        await wait_until(lambda: work_a.cancelled, what="a's work cancelled")
        with anyio.fail_after(3):
            await work_b.started.wait()
        waited = time.monotonic() - stopped
        assert 0.4 <= waited <= 2.5  # about one lease duration after b's last sight
        taken = spec(cluster)
        assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
        assert taken["acquireTime"] != first["acquireTime"]
        tg.cancel_scope.cancel()


async def test_renewals_keep_acquire_time_and_transitions(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        elector = LeaderElector(cluster.client, config("a"))
        work = Work()
        tg.start_soon(elector.run, work)
        await work.started.wait()
        first = spec(cluster)
        await wait_until(lambda: spec(cluster)["renewTime"] != first["renewTime"], timeout=2)
        later = spec(cluster)
        assert later["acquireTime"] == first["acquireTime"]
        assert later["leaseTransitions"] == first["leaseTransitions"] == 0
        assert parse_time(later["renewTime"]) > parse_time(first["renewTime"])
        tg.cancel_scope.cancel()


async def test_cancel_releases_the_lease_and_the_other_takes_over_at_once(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        a = LeaderElector(cluster.client, config("a"))
        b = LeaderElector(cluster.client, config("b", retry_period=0.1))
        work_a, work_b = Work(), Work()
        scope_a = anyio.CancelScope()

        async def run_a() -> None:
            with scope_a:
                await a.run(work_a)

        tg.start_soon(run_a)
        await work_a.started.wait()
        scope_a.cancel()
        await wait_until(lambda: spec(cluster).get("holderIdentity") != "a", what="release")
        released = spec(cluster)
        assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
        assert released["leaseTransitions"] == 0 and not a.is_leader
        start = time.monotonic()
        tg.start_soon(b.run, work_b)
        with anyio.fail_after(2):
            await work_b.started.wait()
        assert time.monotonic() - start < 0.5  # no waiting for an expiry
        assert spec(cluster)["leaseTransitions"] == 1
        tg.cancel_scope.cancel()


async def test_a_release_after_a_renewal_it_did_not_see_still_gives_the_lease_up(
    tmp_path: Path,
) -> None:
    """The stop cuts off a renewal's reply after the renewal landed: the release, written
    against the version before it, is refused as a conflict; it reads the Lease again and,
    still its own, gives it up (it stayed held until it expired)."""
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        a = LeaderElector(cluster.client, config("a", lease_duration=30))
        work_a = Work()
        scope_a = anyio.CancelScope()

        async def run_a() -> None:
            with scope_a:
                await a.run(work_a)

        tg.start_soon(run_a)
        await work_a.started.wait()
        # the Lease moves on, still a's, without a seeing it (a renewal's lost reply)
        cluster.store.patch("Lease", "kube-system", "sluice", {"metadata": {"labels": {"r": "1"}}})
        scope_a.cancel()
        await wait_until(lambda: spec(cluster).get("holderIdentity") != "a", what="release")
        assert spec(cluster)["holderIdentity"] == "" and not a.is_leader


async def test_work_that_returns_releases_and_run_returns(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        elector = LeaderElector(cluster.client, config("a"))
        ran: list[str] = []

        async def work() -> None:
            ran.append(spec(cluster)["holderIdentity"])

        with anyio.fail_after(3):
            await elector.run(work)
        assert ran == ["a"] and spec(cluster)["holderIdentity"] == ""


async def test_renewal_failing_past_the_deadline_loses_leadership(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        elector = LeaderElector(cluster.client, config("a"))
        work = Work()
        lost_after = 0.0

        async def cut_when_leading() -> None:
            nonlocal lost_after
            await work.started.wait()
            lost_after = time.monotonic()
            await cluster.cut()  # the API server goes away: renewals fail

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cut_when_leading)
                with pytest.raises(LeadershipLost, match="renew"):
                    await elector.run(work)
        elapsed = time.monotonic() - lost_after
        assert work.cancelled and not elector.is_leader
        assert 0.4 <= elapsed <= 2.0  # up to a retry period + the renew deadline


async def test_seeing_another_holder_loses_leadership_at_once(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        elector = LeaderElector(cluster.client, config("a"))
        work = Work()

        async def usurp() -> None:
            await work.started.wait()
            current = lease(cluster)
            assert current is not None
            cluster.store.replace(
                {**current, "spec": {**current["spec"], "holderIdentity": "intruder"}}
            )

        with anyio.fail_after(3):
            async with anyio.create_task_group() as tg:
                tg.start_soon(usurp)
                with pytest.raises(LeadershipLost, match="intruder"):
                    await elector.run(work)
        assert work.cancelled
        assert spec(cluster)["holderIdentity"] == "intruder"  # not released: not ours


async def test_an_unexpired_lease_of_another_is_respected(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        now = format_micro_time(time.time() - 3600)  # a renewTime an hour old...
        cluster.store.create(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "sluice", "namespace": "kube-system"},
                "spec": LeaseRecord("other", 1, now, now, 4).spec(),
            }
        )
        elector = LeaderElector(cluster.client, config("a"))
        work = Work()
        start = time.monotonic()
        tg.start_soon(elector.run, work)
        with anyio.fail_after(3):
            await work.started.wait()
        # ...does not count: expiry is measured from when this process first saw it
        assert time.monotonic() - start >= 0.9
        assert spec(cluster)["leaseTransitions"] == 5
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    "overrides",
    [
        {"lease_duration": 0.5},
        {"lease_duration": 1.5},
        {"renew_deadline": 1.0},
        {"retry_period": 0.6},
        {"identity": ""},
    ],
    ids=[
        "lease-too-short",
        "lease-not-whole",
        "deadline-not-below-lease",
        "retry-too-long",
        "no-id",
    ],
)
def test_timings_are_checked(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        config(overrides.pop("identity", "a"), **overrides)


def test_defaults_are_kube_schedulers() -> None:
    cfg = LeaderElectionConfig()
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15, 10, 2)
    assert "_" in cfg.identity and cfg.identity != LeaderElectionConfig().identity


def test_micro_time_format_round_trips() -> None:
    text = format_micro_time(1_767_225_600.25)
    assert text == "2026-01-01T00:00:00.250000Z"
    assert parse_time(text) == 1_767_225_600.25


class HighJitter:
    """An rng whose every draw is near 1: the longest waits the jitter allows."""

    def random(self) -> float:
        return 0.99


async def test_a_follower_takes_over_at_the_lease_expiry_not_a_poll_later(
    tmp_path: Path,
) -> None:
    """The follower polls every 2.4 s at least (5.2 s with its jitter) but watches the
    Lease, so it sees a's last renewal when it happens and takes over one lease duration
    (3 s) after it: judging expiry from its polls alone, it would wait about 5.5 s."""
    timings = {"lease_duration": 3, "renew_deadline": 2.9, "retry_period": 2.4}
    async with running_cluster(tmp_path) as cluster, anyio.create_task_group() as tg:
        a = LeaderElector(cluster.client, config("a", release_on_cancel=False, lease_duration=3))
        b = LeaderElector(cluster.client, config("b", **timings), rng=HighJitter())  # type: ignore[arg-type]
        work_a, work_b = Work(), Work()
        scope_a = anyio.CancelScope()

        async def run_a() -> None:
            with scope_a:
                await a.run(work_a)

        tg.start_soon(run_a)
        await work_a.started.wait()
        tg.start_soon(b.run, work_b)
        await anyio.sleep(0.5)  # b has read the Lease once, and waits for its next poll
        scope_a.cancel()
        stopped = time.monotonic()
        with anyio.fail_after(8):
            await work_b.started.wait()
        assert time.monotonic() - stopped <= 3.6
        tg.cancel_scope.cancel()
