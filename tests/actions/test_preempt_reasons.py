"""What a pod and its PodGroup are told when preemption cannot help them.

The pods' FailedScheduling message and the PodGroup's ``Unschedulable`` condition carry
the same sentence, so a user reading either learns that no eviction would make room.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions.preempt import NO_VICTIMS
from scheduler.api import labels as L
from scheduler.app import builtin_registry
from scheduler.config import parse_configuration
from tests.builders import cached_session, node, pod, pod_group, task_of

Obj = dict[str, Any]
CONFIG = parse_configuration(
    {
        "apiVersion": L.API_VERSION,
        "kind": "SchedulerConfiguration",
        "actions": ["enqueue", "allocate", "preempt"],
    }
)


def _gang(priority: int, running_priority: int) -> list[Obj]:
    """One node of 2 CPU full with a 2-CPU pod; a gang of two 1-CPU pods (minMember 2)."""
    return [
        node("n1", cpu="2"),
        pod("running", cpu="2", memory=None, node="n1", priority=running_priority),
        pod_group("g", min_member=2, phase="Inqueue"),
        *(pod(f"g-{i}", cpu="1", memory=None, group="g", priority=priority) for i in range(2)),
    ]


@pytest.mark.parametrize(
    ("priority", "running_priority", "told"),
    [
        (5, 9, True),  # the running pod is more important: no eviction helps
        (5, 5, True),  # equal priority is never a victim
        (9, 5, False),  # a victim exists: the gang is nominated, nothing to tell
    ],
)
def test_the_pod_group_says_what_its_pods_say(
    priority: int, running_priority: int, told: bool
) -> None:
    session = cached_session(_gang(priority, running_priority), config=CONFIG)
    for action in builtin_registry().resolve(CONFIG).actions:
        action.execute(session)
    job_reason = session.job_reasons.get("default/g", "")
    pod_reasons = [session.task_reasons.get(task_of(session, f"g-{i}").uid, "") for i in (0, 1)]
    assert job_reason.endswith(NO_VICTIMS) is told, job_reason
    assert any(r.endswith(NO_VICTIMS) for r in pod_reasons) is told, pod_reasons
