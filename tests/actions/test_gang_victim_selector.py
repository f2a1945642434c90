"""The ``GANG_VICTIM_SELECTOR`` extension point (issue 26 part 2): a plugin that answers
chooses the gang's victims in place of the search's steps 3 to 6; a plugin that answers
None leaves the choice to the search. Tested on a session (one cycle's actions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler import app
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.effects import Evict, parts
from scheduler.framework.extension_points import GANG_VICTIM_SELECTOR, HookSet, PluginContext
from scheduler.framework.registry import PluginSpec
from scheduler.framework.session import open_session
from tests.builders import cache_with, node, pod, pod_group

DEFAULT = SchedulerConfiguration()

WORLD = [
    *(node(f"n{i}", cpu="2") for i in (1, 2, 3)),
    *(pod(f"low-{i}", cpu="2", memory=None, node=f"n{i}", priority=1) for i in (1, 2, 3)),
    pod_group("hi", min_member=2),
    pod("hi-1", cpu="2", memory=None, priority=100, group="hi"),
    pod("hi-2", cpu="2", memory=None, priority=100, group="hi"),
]
"""A gang of two whole nodes, of higher priority than the three pods that fill them."""

OFFERED: list[list[str]] = []
"""The pods of the candidates each call of the plugin was offered."""


@dataclass(frozen=True, slots=True)
class ChooserArguments:
    victims: tuple[str, ...] | None = None
    """Pods whose jobs the plugin chooses; None: it leaves the choice to the search."""


class Chooser:
    name = "chooser"

    def __init__(self, arguments: ChooserArguments) -> None:
        self.victims = arguments.victims

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        hooks.add(GANG_VICTIM_SELECTOR, self.choose)

    def choose(
        self,
        job: JobInfo,
        tasks: Sequence[TaskInfo],
        nodes: Any,
        candidates: Sequence[tuple[JobInfo, Any, Sequence[TaskInfo]]],
        /,
    ) -> list[str] | None:
        del job, tasks, nodes
        OFFERED.append(sorted(t.name for _, _, ts in candidates for t in ts))
        if self.victims is None:
            return None
        return [j.uid for j, _, ts in candidates if any(t.name in self.victims for t in ts)]

    def close(self) -> None:
        pass


def decide(victims: tuple[str, ...] | None) -> list[str]:
    """One cycle with ``chooser`` in the first tier: the pods evicted."""
    OFFERED.clear()
    registry = app.builtin_registry()
    registry.add_plugin(PluginSpec("chooser", Chooser, ChooserArguments))
    first, *rest = DEFAULT.tiers
    chooser = PluginConfig("chooser", {} if victims is None else {"victims": list(victims)})
    config = SchedulerConfiguration(
        actions=DEFAULT.actions, tiers=(TierConfig((*first.plugins, chooser)), *rest)
    )
    session = open_session(cache_with(*WORLD).snapshot(), registry.resolve(config))
    for action in session.resolved.actions:
        session.run_action(action)
    return sorted(e.task.name for e in parts(session.effects) if isinstance(e, Evict))


@pytest.mark.parametrize(
    ("victims", "evicted"),
    [
        (("low-1", "low-3"), ["low-1", "low-3"]),
        (("low-2", "low-3"), ["low-2", "low-3"]),
        (("low-1", "low-2"), ["low-1", "low-2"]),
    ],
    ids=["chooses-1-and-3", "chooses-2-and-3", "chooses-1-and-2"],
)
def test_a_plugin_chooses_the_gangs_victims(victims: tuple[str, ...], evicted: list[str]) -> None:
    got = decide(victims)
    assert got == evicted
    assert OFFERED and OFFERED[0] == ["low-1", "low-2", "low-3"], OFFERED


def test_a_plugin_answering_none_leaves_the_choice_to_the_search() -> None:
    got = decide(None)
    assert OFFERED, "the plugin was not asked"
    assert len(got) == 2 and set(got) <= {"low-1", "low-2", "low-3"}, got
