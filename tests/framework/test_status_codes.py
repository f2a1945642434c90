"""What a Status's code does (issue 24 point 4): UNRESOLVABLE readiness keeps the evicting
actions from searching victims for the job; ERROR is the plugin's failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from scheduler import app
from scheduler.api.errors import PluginError
from scheduler.api.job import JobInfo
from scheduler.api.reasons import ReasonCode
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.effects import Evict, parts
from scheduler.framework.extension_points import JOB_READY, HookSet, PluginContext
from scheduler.framework.plugin_status import SUCCESS, Status
from scheduler.framework.registry import PluginSpec
from scheduler.framework.session import open_session
from tests.builders import cache_with, node, pod


@dataclass(frozen=True, slots=True)
class SaysArguments:
    code: str = "unschedulable"


class Says:
    """Answers JOB_READY for the pod ``high`` with a status of the given code."""

    name = "says"

    def __init__(self, arguments: SaysArguments) -> None:
        self.code = arguments.code

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        hooks.add(JOB_READY, self.ready)

    def close(self) -> None:
        pass

    def ready(self, job: JobInfo, /) -> Status:
        if job.name != "high":
            return SUCCESS
        make = {
            "unschedulable": Status.unschedulable,
            "unresolvable": Status.unresolvable,
            "error": Status.error,
        }[self.code]
        return make("the device this pod needs is in another region")


def decide(code: str) -> Any:
    registry = app.builtin_registry()
    registry.add_plugin(PluginSpec("says", Says, SaysArguments))
    defaults = SchedulerConfiguration()
    first, *rest = defaults.tiers
    # first in its tier: the first failing answer is the one that counts
    tiers = (TierConfig((PluginConfig("says", {"code": code}), *first.plugins)), *rest)
    config = SchedulerConfiguration(actions=defaults.actions, tiers=tiers)
    cache = cache_with(
        node("n1", cpu="2"),
        pod("low", cpu="2", node="n1", priority=1),
        pod("high", cpu="2", priority=100),
    )
    session = open_session(cache.snapshot(), registry.resolve(config))
    for action in session.resolved.actions:
        session.run_action(action)
    return session


@pytest.mark.parametrize(("code", "searched"), [("unschedulable", True), ("unresolvable", False)])
def test_an_unresolvable_readiness_answer_spares_the_victim_search(
    code: str, searched: bool
) -> None:
    session = decide(code)
    evicted = [e.task.name for e in parts(session.effects) if isinstance(e, Evict)]
    assert (evicted == ["low"]) is searched, evicted
    if not searched:
        told = session.job_reasons["default/high"]
        assert told.code is ReasonCode.GANG_NOT_READY
        assert "another region" in told.message
        assert "default/high" in session.unresolvable


def test_an_error_answer_is_the_plugins_failure() -> None:
    session = decide("error")
    exc = session.job_errors["default/high"]
    assert isinstance(exc, PluginError) and (exc.plugin, exc.point) == ("says", "jobReady")
    assert session.job_reasons["default/high"].code is ReasonCode.SCHEDULER_ERROR
    assert not [e for e in parts(session.effects) if isinstance(e, Evict)]
