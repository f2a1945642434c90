"""VolumeWrites: the writes of VolumeBinding's PreBind, each made once (layer 3).

:meth:`VolumeWrites.write` makes the writes of one bind's
:class:`~scheduler.api.volumes.prebind.VolumeBindings` through the API dispatcher, one
after the other as kube-scheduler's PreBind makes them: each PV's ``claimRef`` (a static
match), then each claim's ``selected-node`` (provisioning); those the events already
show (``write`` False) are not made again. Two pods of one claim (a claim shared by a
gang's members) make the same write: the second waits for the first's outcome and takes
it, rather than sending it again against a resourceVersion the first write changed (the
server would refuse it). A write whose reply was lost is read back by its call
(:class:`~scheduler.dispatch.BindVolume`, :class:`~scheduler.dispatch.SelectNode`).

Owned by the binding cycle; called from the tasks of its binds pool (one event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from scheduler.api.errors import ApiError, InvariantError
from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.dispatch import ApiDispatcher, BindVolume, SelectNode


class VolumeWriteFailed(Exception):
    """A volume write of a bind failed: ``what`` names it (``PersistentVolume pv-1``),
    ``error`` is the ApiError (or InvariantError: no writer) it raised."""

    def __init__(self, what: str, error: Exception) -> None:
        super().__init__(f"writing {what}: {error}")
        self.what = what
        self.error = error


@dataclass(eq=False, slots=True)
class _Shared:
    """One write in flight, and what its other callers learn of it."""

    done: anyio.Event = field(default_factory=anyio.Event)
    version: str = ""
    error: Exception | None = None


class VolumeWrites:
    """See the module docstring."""

    def __init__(self, dispatcher: ApiDispatcher) -> None:
        self._dispatcher = dispatcher
        self._in_flight: dict[tuple[object, ...], _Shared] = {}
        """Each write being made, by what it writes (its call's identity)."""

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def write(self, bindings: VolumeBindings) -> dict[str, str]:
        """Make the writes of ``bindings`` (module docstring). Returns, by object written
        (``PersistentVolume/<name>``, ``PersistentVolumeClaim/<ns>/<name>``), the
        resourceVersion its write's reply gave ("" when unknown). Raises
        :class:`VolumeWriteFailed` at the first write that failed (the later ones are
        not made)."""
        calls: list[BindVolume | SelectNode] = [BindVolume(b) for b in bindings.static if b.write]
        calls += [
            SelectNode(p.claim, bindings.node, p.resource_version)
            for p in bindings.provisions
            if p.write
        ]
        written: dict[str, str] = {}
        for call in calls:
            written[call.key] = await self._once(call)
        return written

    async def _once(self, call: BindVolume | SelectNode) -> str:
        shared = self._in_flight.get(call.identity)
        what = call.key.replace("/", " ", 1)
        if shared is not None:
            await shared.done.wait()
            if shared.error is not None:
                raise VolumeWriteFailed(what, shared.error)
            return shared.version
        shared = self._in_flight[call.identity] = _Shared()
        try:
            version = await self._dispatcher.call(call)
        except (ApiError, InvariantError) as exc:
            shared.error = exc
            raise VolumeWriteFailed(what, exc) from exc
        except BaseException as exc:  # cancelled: the others learn it did not finish
            shared.error = InvariantError(f"the write was abandoned: {exc!r}")
            raise
        else:
            shared.version = str(version or "")
            return shared.version
        finally:
            del self._in_flight[call.identity]
            shared.done.set()
