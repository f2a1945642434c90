"""``sluice run``: the scheduler in a cluster (layer 5).

Wires the kube backend to the loop: a rate-limited client, informers filling the cache,
the ports, optional leader election on a Lease, and one port serving ``/metrics``, the
live page and the probes, guarded as kube-scheduler's (:mod:`scheduler.cli.port`).
SIGTERM and SIGINT stop the loop after its cycle: in-flight binds and status writes
finish, running preemption calls get a grace period, and the lease is released; one that
comes while the process still starts (imports, lists) ends it at once with exit code 0
(:class:`Stopping`). Losing leadership ends the process with exit code 1, as
kube-scheduler does, so that a fresh replica starts from a clean cache.
"""

from __future__ import annotations

import argparse
import gc
import signal
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import structlog
from prometheus_client import disable_created_metrics

from scheduler.api.errors import ConfigError, SluiceError
from scheduler.cache import SchedulerCache
from scheduler.cli.port import PortSecurity, http_app, port_security, serve
from scheduler.cli.signals import STOP_SIGNALS, EarlySignals
from scheduler.config import (
    SchedulerConfiguration,
    load_configuration_file,
    parse_feature_gates,
    with_feature_gates,
    with_shard,
)
from scheduler.kube import (
    EventSettings,
    InformerSet,
    KubeBackend,
    KubeClient,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)
from scheduler.kube.optional import OptionalInformers
from scheduler.kube.resource_paths import NODES
from scheduler.logging import configure, get_logger
from scheduler.metrics import Metrics
from scheduler.metrics.runtime import register_runtime_metrics

if TYPE_CHECKING:
    from scheduler.framework.registry import ResolvedConfiguration
    from scheduler.live.service import LivePage
    from scheduler.loop.scheduler_loop import SchedulingLoop

log = get_logger("sluice.run")


@dataclass
class Health:
    """What the probes answer. Updated by the runner; read by the HTTP handlers."""

    informers: InformerSet | None = None
    optional: OptionalInformers | None = None
    leading: bool = False
    leader_elect: bool = False

    def ready(self) -> tuple[bool, str]:
        if self.informers is None or not self.informers.synced():
            return False, "informers not synced"
        if self.optional is not None and not self.optional.synced():
            return False, "informers of other schedulers' APIs not synced"
        return True, "ok"


EVENT_FLUSH_SECONDS = 5.0
"""On a clean stop, how long the events already due may take to be written."""


def event_settings(args: argparse.Namespace) -> EventSettings:
    """``--event-qps``/``--event-burst``, each defaulting to its ``--kube-api-*`` value (the
    event client has the API client's rate, as kube-scheduler's has). Refuses negatives."""
    qps = args.kube_api_qps if args.event_qps is None else args.event_qps
    burst = args.kube_api_burst if args.event_burst is None else args.event_burst
    if qps < 0:
        raise ConfigError("sluice run", "--event-qps", f"must be 0 (no limit) or more, got {qps:g}")
    if burst < 1:
        raise ConfigError("sluice run", "--event-burst", f"must be at least 1, got {burst}")
    return EventSettings(qps=qps, burst=burst)


def run(args: argparse.Namespace, early: EarlySignals | None = None) -> int:
    """Entry of ``sluice run``. Returns the process's exit code. ``early``: the stop
    signal caught before this (:func:`scheduler.cli.signals.caught`), acted on at once."""
    configure(args.verbosity)
    config = load_configuration_file(args.config) if args.config else SchedulerConfiguration()
    config = with_feature_gates(config, parse_feature_gates(args.feature_gates))
    config = with_shard(config, args.shard)
    events = event_settings(args)
    security = port_security(args) if args.port else None
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        return anyio.run(_main, args, config, events, security, early or EarlySignals())
    except BaseException as exc:
        lost = leadership_lost(exc)
        if lost is None:
            raise
        log.error("leadership lost; exiting", error=str(lost))
        return 1


def leadership_lost(exc: BaseException) -> LeadershipLost | None:
    """The :class:`LeadershipLost` that ended the run, when it alone did: raised bare, or
    wrapped in the task groups' exception groups (however nested) with nothing else.
    Then ``sluice run`` exits with 1 and one log line, as kube-scheduler does, not with a
    traceback. None for anything else (the caller raises it again)."""
    if isinstance(exc, LeadershipLost):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        lost, rest = exc.split(LeadershipLost)
        if lost is not None and rest is None:
            return leadership_lost(lost.exceptions[0])
    return None


class Resolution:
    """The configuration checked against the registry of plugins and actions
    (:func:`scheduler.app.resolve`), in a worker thread: importing the decision side
    (actions, plugins, the loop) takes about 0.2 s, which then passes while the
    informers wait for the API server's first lists instead of before them. Used by
    :func:`_main`: :meth:`run` in its task group, :meth:`result` once the caches are
    synced; :attr:`error` is what a bad configuration raised (the command refuses it
    before anything is scheduled)."""

    def __init__(self, config: SchedulerConfiguration) -> None:
        self.config = config
        self.resolved: ResolvedConfiguration | None = None
        self.error: SluiceError | None = None
        self._done = anyio.Event()

    async def run(self, scope: anyio.CancelScope) -> None:
        """Resolve; a refused configuration cancels ``scope`` (the command's work)."""
        try:
            self.resolved = await anyio.to_thread.run_sync(_resolve, self.config)
        except SluiceError as exc:
            self.error = exc
            scope.cancel()
        finally:
            self._done.set()

    async def result(self) -> ResolvedConfiguration | None:
        """The resolved configuration, or None when it was refused (:attr:`error`)."""
        await self._done.wait()
        return self.resolved


def _resolve(config: SchedulerConfiguration) -> ResolvedConfiguration:
    from scheduler import app  # in the worker thread: the decision side's imports

    return app.resolve(config)


async def _main(
    args: argparse.Namespace,
    config: SchedulerConfiguration,
    events: EventSettings,
    security: PortSecurity | None,
    early: EarlySignals,
) -> int:
    metrics = Metrics()
    register_runtime_metrics(metrics.registry)  # memory, tasks, sockets: read on scrape
    health = Health(leader_elect=args.leader_elect)
    live: list[LivePage] = []
    client = await KubeClient.connect(
        args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst
    )
    resolution = Resolution(config)
    port = AsyncExitStack()
    try:
        async with client, port, anyio.create_task_group() as tg:
            if security is not None:  # first: the probes answer while the caches fill
                ui = (lambda: live[0] if live else None) if args.ui else None
                await serve(
                    port, args, security, lambda m: http_app(metrics, health, ui, m), client
                )
            stopping = Stopping(health)
            tg.start_soon(_stop_on_signal, stopping, early)
            tg.start_soon(resolution.run, tg.cancel_scope)
            with stopping.starting:
                sharding = config.sharding()
                cache = SchedulerCache(
                    config.scheduler_name,
                    wait_for_pod_grouper=config.wait_for_pod_grouper,
                    sharding=sharding,
                )
                backend = KubeBackend(
                    client,
                    eviction_mode=args.eviction_mode,
                    event_settings=events,
                    on_event_drop=lambda reason: metrics.events_dropped.labels(reason).inc(),
                )
                await tg.start(backend.run)
                selectors = {NODES.key: sharding.node_selector()} if sharding else {}
                informers = InformerSet(client, cache, label_selectors=selectors)
                health.informers = informers
                optional = OptionalInformers(client, cache)
                health.optional = optional
                tg.start_soon(informers.run)
                tg.start_soon(_log_synced, informers)
                await tg.start(optional.run)
                # Bound pods first: the loop starts once every bound pod is known and a
                # first page of the pending ones is in; the rest come as new pods do.
                await informers.schedulable.wait()
                log.info("ready to schedule", pods=len(cache.tasks), nodes=len(cache.nodes))
                resolved = await resolution.result()
                if resolved is None:
                    return 2  # refused: raised below
                # What the lists filled lives as long as the process: keep the cyclic
                # collector from scanning it again and again while the first cycles
                # decide (a full collection of 11,000 pods took 0.2 s, three of them in
                # the first cycle). No collection first: the lists left no cycles, and
                # it would delay the first bind as long. The loop collects and freezes
                # again after its first round.
                gc.freeze()
                from scheduler import app
                from scheduler.live.service import LivePage

                loop = app.build_loop(resolved, cache, backend.ports(), metrics)
                loop.freeze_heap = True
                loop.skip_idle = True  # a quiet cluster costs no snapshot a second
                # no eviction until every pending pod is read (the others' shares)
                loop.whole_view = informers.ready.is_set
                live.append(LivePage(loop))
                stopping.loop = loop
            if stopping.loop is None:  # a stop signal came first: nothing to hand on
                tg.cancel_scope.cancel()
                log.info("stopped while starting")
                return 0
            if args.leader_elect:
                elector = LeaderElector(
                    client,
                    LeaderElectionConfig(
                        name=lease_name(args.leader_elect_resource_name, config.shard),
                        namespace=args.leader_elect_resource_namespace,
                    ),
                )
                with stopping.waiting:
                    await elector.run(lambda: _schedule(loop, health))
            else:
                await _schedule(loop, health)
            await backend.flush_events(EVENT_FLUSH_SECONDS)
            tg.cancel_scope.cancel()
    finally:
        if resolution.error is not None:
            raise resolution.error
    log.info("stopped")
    return 0


async def _log_synced(informers: InformerSet) -> None:
    """Log ``caches synced`` once every kind is listed (a phase of the start)."""
    await informers.ready.wait()
    log.info("caches synced")


def lease_name(given: str | None, shard: str) -> str:
    """The Lease of this process's leader election: ``--leader-elect-resource-name``,
    else ``sluice-scheduler``, or ``sluice-scheduler-<shard>`` for a shard (each shard
    has a leader of its own)."""
    if given:
        return given
    return f"sluice-scheduler-{shard}" if shard else "sluice-scheduler"


async def _schedule(loop: SchedulingLoop, health: Health) -> None:
    health.leading = True
    structlog.contextvars.bind_contextvars(scheduler=loop.config.scheduler_name)
    if loop.config.shard:
        structlog.contextvars.bind_contextvars(shard=loop.config.shard)
    log.info("scheduling", actions=[a.name for a in loop.resolved.actions])
    try:
        await loop.run()
    finally:
        health.leading = False


@dataclass
class Stopping:
    """What a stop signal stops, as far as the command has come. The command fills it in
    as it starts; :func:`_stop_on_signal` calls :meth:`stop` once."""

    health: Health
    starting: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Around the start (lists, configuration, the loop's making)."""
    waiting: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Around the wait for the Lease."""
    loop: SchedulingLoop | None = None
    """Set once the loop is made: from then on a stop is the loop's."""

    def stop(self) -> None:
        """Before the loop exists, the start is cancelled (the command exits with 0, having
        nothing to hand on). Then a leader (or a process without election) finishes its
        cycle, hands on its effects and returns (:meth:`SchedulingLoop.stop`); a follower,
        still waiting for the Lease, stops waiting at once (the elector releases the
        Lease if it had just taken it). A follower that waited to lead first would
        outlive the pod's grace period whenever the leader is stopped after it."""
        if self.loop is None:
            self.starting.cancel()
            return
        self.loop.stop()
        if not self.health.leading:
            self.waiting.cancel()


async def _stop_on_signal(stopping: Stopping, early: EarlySignals) -> None:
    """On SIGTERM or SIGINT, or at once if one came before the event loop listened
    (``early``): :meth:`Stopping.stop`. Started first in the command's task group."""
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        signum = early.signum if early.signum is not None else await anext(signals)
        log.info("stopping", signal=signal.Signals(signum).name, leading=stopping.health.leading)
        stopping.stop()
