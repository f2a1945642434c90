"""Layer 2: actions ask the plugins and decide. Synchronous and deterministic."""

from __future__ import annotations

from scheduler.actions.allocate import AllocateAction
from scheduler.actions.backfill import BackfillAction
from scheduler.actions.dissolve import DissolveAction, DissolveArguments
from scheduler.actions.elect import ElectAction, ElectArguments
from scheduler.actions.enqueue import EnqueueAction
from scheduler.actions.preempt import PreemptAction, PreemptArguments
from scheduler.actions.reclaim import ReclaimAction
from scheduler.actions.reserve import ReserveAction
from scheduler.actions.victims import ReclaimArguments
from scheduler.framework.effects import Bind, ClearNomination, Dissolution, Preemption, SetPhase
from scheduler.framework.registry import ActionSpec, Registry


def register_builtin(registry: Registry) -> None:
    """Register every action shipped with Sluice."""
    registry.add_action(ActionSpec("enqueue", EnqueueAction, emits=frozenset({SetPhase})))
    registry.add_action(ActionSpec("allocate", AllocateAction, emits=frozenset({Bind})))
    registry.add_action(
        ActionSpec(
            "preempt",
            PreemptAction,
            PreemptArguments,
            emits=frozenset({Preemption, ClearNomination}),
        )
    )
    registry.add_action(
        ActionSpec(
            "reclaim",
            ReclaimAction,
            ReclaimArguments,
            emits=frozenset({Preemption}),
        )
    )
    registry.add_action(ActionSpec("backfill", BackfillAction, emits=frozenset({Bind})))
    # Starvation protection changes only the session's reservation, which the loop keeps.
    registry.add_action(ActionSpec("elect", ElectAction, ElectArguments))
    registry.add_action(ActionSpec("reserve", ReserveAction))
    registry.add_action(
        ActionSpec("dissolve", DissolveAction, DissolveArguments, emits=frozenset({Dissolution}))
    )
