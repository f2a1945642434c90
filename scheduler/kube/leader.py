"""Leader election on a ``coordination.k8s.io/v1`` Lease (layer 4, kube).

Job: make sure at most one replica of the scheduler schedules. :class:`LeaderElector`
follows client-go's ``leaderelection`` package, with kube-scheduler's timings (15 s lease
duration, 10 s renew deadline, 2 s retry period). Contracts:

* **Acquire** when the Lease is absent (create it), released (empty holder) or expired.
  Expiry is judged as client-go does, without comparing clocks across machines: the
  holder's ``leaseDurationSeconds`` counted on this process' monotonic clock from the
  moment it last saw the Lease's record change. Attempts every retry period (jittered),
  and at the moment the observed lease expires. Unlike client-go, a follower also
  *watches* the Lease, so it sees each renewal when it happens rather than at its next
  poll (up to a jittered retry period later): it takes over within the watch's latency
  of the lease's expiry, not up to 4.4 s after it (kube-scheduler's timings).
* **Writes** are optimistic: a replace carrying the resourceVersion that was read; a 409
  means another replica wrote first and this attempt lost. ``leaseTransitions`` grows by
  one whenever the holder changes (it is kept when a holder renews), ``acquireTime`` is
  set when a holder takes the Lease, ``renewTime`` on every write; both are MicroTime.
* **Renew** every retry period. If no renewal succeeds within the renew deadline, or the
  Lease is seen held by someone else, leadership is lost: the leader's work is cancelled
  and :meth:`LeaderElector.run` raises :class:`LeadershipLost` (the process should end,
  as kube-scheduler's does). The work never outlives the deadline by more than the time
  it takes to react to cancellation, and the deadline is shorter than the lease.
* **Release** on a clean end (the work returns, or ``run`` is cancelled) while leading:
  the Lease is written with an empty holder and ``leaseDurationSeconds: 1`` so that
  another replica takes over at once. Not after a loss (the Lease is no longer ours).

One elector per Lease per process; used from one event loop.
"""

from __future__ import annotations

import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    NotFoundError,
    SluiceError,
)
from scheduler.kube.client import KubeClient
from scheduler.kube.resource_paths import LEASES
from scheduler.kube.timestamps import format_micro_time
from scheduler.logging import get_logger
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock

__all__ = [
    "LeaderElectionConfig",
    "LeaderElector",
    "LeadershipLost",
    "LeaseRecord",
    "default_identity",
]

log = get_logger("sluice.kube.leader")

#: client-go's ``JitterFactor``: acquisition attempts wait retry * (1 + 1.2 * random).
JITTER_FACTOR: Final[float] = 1.2
_RELEASE_ATTEMPTS: Final = 3
"""Writes of a release, each after reading the Lease a conflict said had moved."""


class LeadershipLost(SluiceError):
    """The Lease could not be renewed within the renew deadline, or another replica
    holds it. The leader's work has been cancelled; the process should end."""


def default_identity() -> str:
    """``<hostname>_<uuid4>``, as kube-scheduler names itself in its Lease."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Which Lease, who we are, and the timings (seconds) of the election.

    Must hold: ``lease_duration > renew_deadline > retry_period * 1.2`` (client-go's
    rule), and ``lease_duration`` a whole number of seconds (the Lease stores an integer).
    """

    name: str = "sluice-scheduler"
    """Name of the Lease."""
    namespace: str = "kube-system"
    """Namespace of the Lease."""
    identity: str = field(default_factory=default_identity)
    """This replica's ``holderIdentity``; unique per process."""
    lease_duration: float = 15.0
    """How long a non-leader waits, from its last sight of a change, before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew before it gives up leadership."""
    retry_period: float = 2.0
    """Time between attempts to acquire, and between renewals."""
    release_on_cancel: bool = True
    """Release the Lease when ``run`` ends cleanly while leading."""

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if self.lease_duration < 1 or self.lease_duration != int(self.lease_duration):
            raise ValueError(f"lease_duration must be whole seconds >= 1: {self.lease_duration}")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not self.renew_deadline > JITTER_FACTOR * self.retry_period > 0:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period > 0")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease's spec (client-go's ``LeaderElectionRecord``)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


class LeaderElector:
    """Acquires, renews and releases one Lease; runs work only while it holds it.

    ``observed`` is the last Lease record seen (None before the first read),
    ``is_leader`` whether this replica held the Lease at its last successful write and
    has not lost it since.
    """

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.config = config or LeaderElectionConfig()
        self.clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self.observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self._leading = False
        self._changed = anyio.Event()
        """Set by the Lease's watch when an attempt should be made at once."""

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def is_leader(self) -> bool:
        return self._leading

    # ----------------------------------------------------------------- the public loop

    async def run(self, on_started_leading: Callable[[], Awaitable[None]]) -> None:
        """Wait to become the leader, then run ``on_started_leading()`` while leading.

        Returns when the work returns (after releasing the Lease). Raises LeadershipLost
        when leadership is lost (the work is cancelled first). When cancelled, releases
        the Lease if it holds it. An exception of the work propagates (in the
        ExceptionGroup of the task group that runs it) after the Lease is released.
        """
        lost: str | None = None
        try:
            await self._acquire()
            log.info("became leader", lease=self._lease_name, identity=self.identity)
            async with anyio.create_task_group() as tg:

                async def keep_renewing() -> None:
                    nonlocal lost
                    lost = await self._renew_until_lost()
                    tg.cancel_scope.cancel()

                tg.start_soon(keep_renewing, name="lease renewal")
                await on_started_leading()
                tg.cancel_scope.cancel()  # the work is over: stop renewing
        finally:
            if self._leading and self.config.release_on_cancel:
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.retry_period):
                    await self._release()
        if lost is not None:
            log.error("leadership lost", lease=self._lease_name, reason=lost)
            raise LeadershipLost(f"lease {self._lease_name}: {lost}")

    # ----------------------------------------------------------------- phases

    @property
    def _lease_name(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    async def _acquire(self) -> None:
        """Try until the Lease is ours, watching it meanwhile (:meth:`_follow`): each
        renewal of the holder is seen as it happens, so its expiry is known to within the
        watch's latency rather than a retry period, and the attempt that takes over is
        made at that moment (or at once when the holder releases it)."""
        cfg = self.config
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, name=f"lease watch {self._lease_name}")
            while True:
                self._changed = anyio.Event()
                try:
                    with anyio.move_on_after(cfg.renew_deadline):
                        if await self._try_acquire_or_renew():
                            tg.cancel_scope.cancel()
                            return
                except ApiError as exc:
                    log.warning("cannot acquire the lease", lease=self._lease_name, error=str(exc))
                with anyio.move_on_after(self._next_attempt_in()):
                    await self._changed.wait()

    async def _follow(self) -> None:
        """Watch the Lease while not leading: every change is observed (:meth:`_observe`)
        as it happens; a release (an empty holder) or a deletion wakes the acquiring loop
        at once. Errors are retried after a retry period; a follower without watch
        permission still takes over, judging expiry by its own reads."""
        cfg = self.config
        path = LEASES.path(cfg.namespace)
        selector = ("fieldSelector", f"metadata.name={cfg.name}")
        while True:
            try:
                listed = await self.client.request(
                    "GET", path, query=[selector], timeout=cfg.renew_deadline, kind="Lease"
                )
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                query = [
                    selector,
                    ("watch", "true"),
                    ("resourceVersion", version),
                    ("timeoutSeconds", str(int(5 * cfg.lease_duration))),
                ]
                async with self.client.stream(path, query=query, kind="Lease") as reader:
                    while (line := await reader.read()) is not None:
                        obj = line.get("object")
                        if line.get("type") == "ERROR" or not isinstance(obj, dict):
                            break
                        if line.get("type") == "DELETED":
                            self._changed.set()
                            continue
                        record = self._observe(obj)
                        if not record.holder:
                            self._changed.set()
            except ApiError as exc:
                log.info("lease watch failed, retrying", lease=self._lease_name, error=str(exc))
            await self.clock.sleep(cfg.retry_period)

    def _next_attempt_in(self) -> float:
        """The jittered retry period, cut short to the moment the observed holder's lease
        expires, so a follower takes over as soon as it may rather than up to a whole
        jittered retry later (the worst case after a leader dies stays under 20 s with
        kube-scheduler's timings)."""
        cfg = self.config
        wait = cfg.retry_period * (1.0 + JITTER_FACTOR * self._rng.random())
        held = self.observed
        if held is not None and held.holder and held.holder != self.identity:
            expires = self._observed_at + held.lease_duration_seconds
            wait = min(wait, max(expires - self.clock.now(), 0.05))
        return wait

    async def _renew_until_lost(self) -> str:
        """Renew every retry period; return why leadership was lost."""
        cfg = self.config
        while True:
            await self.clock.sleep(cfg.retry_period)
            deadline = self.clock.now() + cfg.renew_deadline
            reason = "the lease was not renewed within the renew deadline"
            with anyio.move_on_after(cfg.renew_deadline):
                while True:
                    try:
                        if await self._try_acquire_or_renew():
                            reason = ""
                            break
                    except ApiError as exc:
                        reason = f"renewal failed: {exc}"
                    if self.observed is not None and self.observed.holder not in (
                        "",
                        self.identity,
                    ):
                        reason = f"the lease is held by {self.observed.holder}"
                        break
                    remaining = deadline - self.clock.now()
                    if remaining <= 0:
                        break
                    await self.clock.sleep(min(cfg.retry_period, remaining))
            if reason:
                self._leading = False
                return reason

    # ----------------------------------------------------------------- one attempt

    def _observe(self, lease: dict[str, Any]) -> LeaseRecord:
        record = LeaseRecord.from_lease(lease)
        if record != self.observed:
            self.observed = record
            self._observed_at = self.clock.now()
        self._lease = lease
        return record

    async def _try_acquire_or_renew(self) -> bool:
        """One read and (if allowed) one write of the Lease. True when we hold it now."""
        cfg = self.config
        now = format_micro_time(self.clock.wall())
        timeout = min(self.client.timeout, cfg.renew_deadline)
        duration = int(cfg.lease_duration)
        path = LEASES.path(cfg.namespace, cfg.name)
        try:
            lease = await self.client.request(
                "GET", path, timeout=timeout, kind="Lease", name=cfg.name
            )
        except NotFoundError:
            record = LeaseRecord(self.identity, duration, now, now, 0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": record.spec(),
            }
            try:
                created = await self.client.request(
                    "POST",
                    LEASES.path(cfg.namespace),
                    body=body,
                    timeout=timeout,
                    kind="Lease",
                    name=cfg.name,
                )
            except (AlreadyExistsError, ConflictError):
                return False
            self._observe(created)
            self._leading = True
            return True

        old = self._observe(lease)
        mine = old.holder == self.identity
        if old.holder and not mine:
            expires = self._observed_at + old.lease_duration_seconds
            if self.clock.now() < expires:
                self._leading = False
                return False
        record = LeaseRecord(
            holder=self.identity,
            lease_duration_seconds=duration,
            acquire_time=old.acquire_time if mine and old.acquire_time else now,
            renew_time=now,
            transitions=old.transitions if mine else old.transitions + 1,
        )
        if await self._write(record):
            if not mine:
                log.info(
                    "lease acquired",
                    lease=self._lease_name,
                    previous=old.holder or None,
                    transitions=record.transitions,
                )
            self._leading = True
            return True
        return False

    async def _write(self, record: LeaseRecord) -> bool:
        """Replace the Lease last read with ``record``; False when another write won."""
        cfg = self.config
        assert self._lease is not None
        metadata = self._lease.get("metadata") or {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                **metadata,
                "name": cfg.name,
                "namespace": cfg.namespace,
            },
            "spec": {**(self._lease.get("spec") or {}), **record.spec()},
        }
        try:
            updated = await self.client.request(
                "PUT",
                LEASES.path(cfg.namespace, cfg.name),
                body=body,
                timeout=min(self.client.timeout, cfg.renew_deadline),
                kind="Lease",
                name=cfg.name,
            )
        except (ConflictError, NotFoundError):
            return False
        self._observe(updated)
        return True

    async def _release(self) -> None:
        """Give the Lease up (empty holder, 1 s duration) if we still hold it. Never raises.
        A write refused as a conflict reads the Lease again and, still ours, gives it up
        against the version read: a renewal whose reply the stop cut off has landed and
        moved it, and without this the Lease stayed ours until it expired."""
        if self._lease is None or self.observed is None:
            return
        try:
            for _ in range(_RELEASE_ATTEMPTS):
                now = format_micro_time(self.clock.wall())
                if await self._write(LeaseRecord("", 1, now, now, self.observed.transitions)):
                    log.info("lease released", lease=self._lease_name)
                    return
                lease = await self.client.request(
                    "GET",
                    LEASES.path(self.config.namespace, self.config.name),
                    timeout=min(self.client.timeout, self.config.renew_deadline),
                    kind="Lease",
                    name=self.config.name,
                )
                if self._observe(lease).holder != self.identity:
                    return  # another's now, or already given up: nothing of ours to release
            log.warning("cannot release the lease: it kept changing", lease=self._lease_name)
        except ApiError as exc:
            log.warning("cannot release the lease", lease=self._lease_name, error=str(exc))
        finally:
            self._leading = False
