"""FaultInjector: latency on the simulation clock, seeded failures, calls in flight."""

from __future__ import annotations

import anyio
import pytest

from scheduler.api.errors import AmbiguousError, ConfigError, NotFoundError, ServerError
from scheduler.sim.faults import CALL_KINDS, ApiBehaviour, FaultInjector, LostReply
from scheduler.sim.virtual_time import VirtualClock, run_virtual


@pytest.mark.parametrize(
    ("latency", "kind", "expected"),
    [
        ({}, "bind", 0.0),
        ({"bind": 0.01}, "bind", 0.01),
        ({"bind": 0.01, "delete": 3.0}, "delete", 3.0),
        ({"delete": 3.0}, "patch", 0.0),
    ],
    ids=["none", "bind-10ms", "delete-3s", "other-kind-unaffected"],
)
def test_latency_is_slept_on_the_clock(
    latency: dict[str, float], kind: str, expected: float
) -> None:
    async def main() -> float:
        clock = VirtualClock()
        faults = FaultInjector(ApiBehaviour(latency=latency), clock)
        async with faults.call(kind):
            return clock.now()

    assert run_virtual(main) == pytest.approx(expected)


def _outcomes(seed: int, rate: float, n: int = 200) -> list[bool]:
    async def main() -> list[bool]:
        clock = VirtualClock()
        faults = FaultInjector(ApiBehaviour(failure_rate={"bind": rate}, seed=seed), clock)
        out = []
        for i in range(n):
            kind = "bind" if i % 2 == 0 else "patch"
            try:
                async with faults.call(kind):
                    out.append(True)
            except ServerError as exc:
                assert str(exc) == "injected failure of bind"
                out.append(False)
        assert faults.failures["bind"] == out.count(False)
        assert faults.calls["bind"] == n // 2
        return out

    return run_virtual(main)


@pytest.mark.parametrize(
    ("rate", "failures"),
    [(0.0, (0, 0)), (1.0, (100, 100)), (0.5, (30, 70))],
    ids=["never", "always", "half"],
)
def test_failure_rate(rate: float, failures: tuple[int, int]) -> None:
    outcomes = _outcomes(seed=1, rate=rate)
    low, high = failures
    assert low <= outcomes.count(False) <= high
    assert all(outcomes[1::2])  # patch has no failure rate


def test_a_seed_repeats_a_run() -> None:
    assert _outcomes(seed=7, rate=0.3) == _outcomes(seed=7, rate=0.3)
    assert _outcomes(seed=7, rate=0.3) != _outcomes(seed=8, rate=0.3)


def test_failure_comes_after_the_latency() -> None:
    async def main() -> float:
        clock = VirtualClock()
        behaviour = ApiBehaviour(latency={"evict": 2.0}, failure_rate={"evict": 1.0})
        faults = FaultInjector(behaviour, clock)
        with pytest.raises(ServerError):
            async with faults.call("evict"):
                raise AssertionError("the body must not run")
        return clock.now()

    assert run_virtual(main) == 2.0


def test_in_flight_counts_calls_until_they_finish() -> None:
    async def main() -> list[tuple[float, int]]:
        clock = VirtualClock()
        faults = FaultInjector(ApiBehaviour(latency={"delete": 3.0, "bind": 1.0}), clock)
        samples: list[tuple[float, int]] = []

        async def call(kind: str) -> None:
            async with faults.call(kind):
                pass

        async def sample() -> None:
            for _ in range(4):
                samples.append((clock.now(), faults.in_flight))
                await clock.sleep(1.0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "delete")
            tg.start_soon(call, "bind")
            tg.start_soon(sample)
        return samples

    assert run_virtual(main) == [(0.0, 2), (1.0, 1), (2.0, 1), (3.0, 0)]


def test_unknown_kind() -> None:
    async def main() -> None:
        faults = FaultInjector(ApiBehaviour(), VirtualClock())
        async with faults.call("schedule"):
            pass

    with pytest.raises(ValueError, match="unknown API call kind 'schedule'"):
        run_virtual(main)


@pytest.mark.parametrize(
    ("kwargs", "obj", "field"),
    [
        ({"latency": {"scheduling": 1.0}}, "apiLatency", "scheduling"),
        ({"latency": {"bind": -1.0}}, "apiLatency", "bind"),
        ({"failure_rate": {"bind": 1.5}}, "apiFailures", "bind"),
        ({"failure_rate": {"x": 0.5}}, "apiFailures", "x"),
        ({"lost_reply_rate": {"bind": -0.1}}, "apiLostReplies", "bind"),
        ({"lost_reply_rate": {"get": 0.5}}, "apiLostReplies", "get"),
    ],
    ids=[
        "unknown-latency-kind",
        "negative-latency",
        "rate-above-1",
        "unknown-rate-kind",
        "lost-rate-below-0",
        "unknown-lost-kind",
    ],
)
def test_behaviour_validation(kwargs: dict[str, dict[str, float]], obj: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        ApiBehaviour(**kwargs)  # type: ignore[arg-type]
    assert (info.value.obj, info.value.field) == (obj, field)


def test_behaviour_from_flags() -> None:
    behaviour = ApiBehaviour.parse("delete=3s,bind=10ms", "bind=0.1", seed=4)
    assert behaviour == ApiBehaviour({"delete": 3.0, "bind": 0.01}, {"bind": 0.1}, 4)
    with pytest.raises(ConfigError, match="--api-failures: bind"):
        ApiBehaviour.parse(failures="bind=2")
    assert set(CALL_KINDS) == {"bind", "delete", "evict", "patch", "create"}


@pytest.mark.parametrize(
    ("failures", "lost", "body_raises", "expected"),
    [
        ({}, {"bind": 1.0}, None, "lost, applied"),
        ({}, {"bind": 1.0}, NotFoundError("gone"), "lost, not applied"),
        ({"bind": 1.0}, {"bind": 1.0}, None, "refused"),
        ({}, {"patch": 1.0}, None, "ok"),
        ({}, {}, NotFoundError("gone"), "NotFoundError"),
    ],
    ids=[
        "applied-then-reply-lost",
        "refused-by-the-store-then-reply-lost",
        "refusal-comes-first",
        "other-kind-unaffected",
        "no-lost-replies",
    ],
)
def test_lost_replies(
    failures: dict[str, float], lost: dict[str, float], body_raises: Exception | None, expected: str
) -> None:
    """A lost reply runs the call (the write is applied), then raises AmbiguousError
    whatever the call answered; a refusal (``--api-failures``) still comes first."""
    body_ran: list[bool] = []

    async def main() -> BaseException | None:
        behaviour = ApiBehaviour(failure_rate=failures, lost_reply_rate=lost)
        faults = FaultInjector(behaviour, VirtualClock())
        try:
            async with faults.call("bind"):
                body_ran.append(True)
                if body_raises is not None:
                    raise body_raises
        except Exception as exc:
            return exc
        return None

    exc = run_virtual(main)
    assert bool(body_ran) is (expected != "refused")
    if expected == "ok":
        assert exc is None
    elif expected == "refused":
        assert type(exc) is ServerError
    elif expected == "NotFoundError":
        assert isinstance(exc, NotFoundError)
    else:
        assert isinstance(exc, LostReply) and isinstance(exc, AmbiguousError)
        assert exc.applied is (expected == "lost, applied")
        assert str(exc) == "injected lost reply of bind"


def test_lost_replies_draw_apart_from_refusals() -> None:
    """Adding lost replies leaves a seed's refusals as they were."""
    assert _outcomes(7, 0.5) == _outcomes_with_lost(7, 0.5)


def _outcomes_with_lost(seed: int, rate: float, n: int = 200) -> list[bool]:
    async def main() -> list[bool]:
        behaviour = ApiBehaviour(
            failure_rate={"bind": rate}, seed=seed, lost_reply_rate={"patch": 0.5}
        )
        faults = FaultInjector(behaviour, VirtualClock())
        out = []
        for i in range(n):
            kind = "bind" if i % 2 == 0 else "patch"
            try:
                async with faults.call(kind):
                    out.append(True)
            except LostReply:
                pass
            except ServerError:
                out.append(False)
        assert 0 < faults.lost_replies["patch"] < n // 2
        return out

    return run_virtual(main)


def test_lost_replies_from_flags() -> None:
    behaviour = ApiBehaviour.parse(failures="bind=0.1", lost_replies="bind=0.05,delete=0.05")
    assert behaviour.lost_reply_rate == {"bind": 0.05, "delete": 0.05}
    with pytest.raises(ConfigError, match="--api-lost-replies: bind"):
        ApiBehaviour.parse(lost_replies="bind=2")
