"""The composition root (layer 5): registries, configuration and the loop, wired once."""

from __future__ import annotations

from scheduler import actions, plugins
from scheduler.cache import SchedulerCache
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Dissolution, Preemption
from scheduler.framework.registry import Registry, ResolvedConfiguration

__all__ = ["ResolvedConfiguration", "build_loop", "builtin_registry", "resolve"]
from scheduler.loop.scheduler_loop import SchedulingLoop
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts
from scheduler.preemption import PreemptionExecutor


def builtin_registry() -> Registry:
    """A registry holding every shipped plugin and action."""
    registry = Registry()
    plugins.register_builtin(registry)
    actions.register_builtin(registry)
    return registry


def resolve(
    config: SchedulerConfiguration | None = None, registry: Registry | None = None
) -> ResolvedConfiguration:
    """Check ``config`` (default: the built-in defaults) against the registry."""
    return (registry or builtin_registry()).resolve(config or SchedulerConfiguration())


def build_loop(
    resolved: ResolvedConfiguration,
    cache: SchedulerCache,
    ports: ClusterPorts,
    metrics: Metrics | None = None,
) -> SchedulingLoop:
    """The scheduling loop with the executors the configuration asks for."""
    loop = SchedulingLoop(cache, resolved, ports, metrics)
    config = resolved.config
    if resolved.emits(Preemption) or resolved.emits(Dissolution):
        executor = PreemptionExecutor(
            cache,
            loop.dispatcher,
            loop.metrics,
            gates=loop.queue,
            async_enabled=config.gate("SchedulerAsyncPreemption"),
            concurrency=config.bind_concurrency,
        )
        cache.on_pod_deleted.append(loop.queue.victim_gone)
        cache.on_devices_released.append(loop.queue.devices_released)
        loop.preemption = executor
    return loop
