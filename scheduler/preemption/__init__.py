"""Layer 2 (asynchronous): the preemption executor and its gate (DESIGN section 4)."""

from scheduler.preemption.executor import PreemptionExecutor

__all__ = ["PreemptionExecutor"]
