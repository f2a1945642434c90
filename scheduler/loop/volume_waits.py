"""VolumeWaits: binds waiting for the PV controller to bind their claims (layer 3).

After a bind's volume writes (a PV's claimRef, a claim's selected node), kube-scheduler's
PreBind polls, every second for up to ``bindTimeoutSeconds``, until the PV controller has
bound every claim (kube's checkBindings), then the pod is bound. Here the waiting is told
of each change instead of polling: :meth:`VolumeWaits.wait` checks
:func:`~scheduler.api.volumes.prebind.bound_status` against the cache's storage objects
as the events show them (nothing assumed), and checks again each time an event of one of
the pod's PVs or claims arrives (the cache's ``VolumeStore.on_change``), or the pod's
deletion (it then fails: kube's "pod does not exist any more").

Owned by the binding cycle; every call from the loop's event loop. A wait holds no
worker of the binding pool: it runs in the pool of waits (one task per pod waiting).
"""

from __future__ import annotations

import anyio

from scheduler.api.volumes.prebind import BindingStatus, VolumeBindings, bound_status
from scheduler.cache import SchedulerCache


class VolumeWaits:
    """See the module docstring."""

    def __init__(self, cache: SchedulerCache) -> None:
        self._cache = cache
        self._waiting: dict[str, set[anyio.Event]] = {}
        cache.volumes.on_change = self._changed
        cache.on_pod_deleted.append(self._pod_gone)

    @property
    def waiting(self) -> int:
        """Objects some bind waits on now."""
        return len(self._waiting)

    def _changed(self, what: str) -> None:
        for event in self._waiting.get(what, ()):
            event.set()

    def _pod_gone(self, uid: str) -> None:
        self._changed(f"Pod/{uid}")

    def check(
        self, bindings: VolumeBindings, pod_uid: str, written: dict[str, str]
    ) -> BindingStatus:
        """Where the pod's volume binding stands, as the events show it now."""
        if pod_uid not in self._cache.tasks:
            return BindingStatus(failed="the pod does not exist any more")
        node = self._cache.nodes.get(bindings.node)
        store = self._cache.volumes
        return bound_status(
            bindings,
            store.claims,
            store.volumes,
            None if node is None else node.labels,
            written,
        )

    async def wait(
        self, bindings: VolumeBindings, pod_uid: str, written: dict[str, str]
    ) -> BindingStatus:
        """Wait until every claim of ``bindings`` is bound (``done``), the binding fails
        (``failed``, why), or ``bindings.timeout`` seconds pass (``failed``, saying so).
        ``written``: the resourceVersions the writes' replies gave (see
        :func:`~scheduler.api.volumes.prebind.bound_status`)."""
        keys = [f"Pod/{pod_uid}"]
        keys += [f"PersistentVolume/{b.volume}" for b in bindings.static]
        keys += [f"PersistentVolumeClaim/{c.key}" for c in bindings.claims]
        deadline = anyio.current_time() + bindings.timeout
        while True:
            status = self.check(bindings, pod_uid, written)
            if status.done or status.failed:
                return status
            left = deadline - anyio.current_time()
            if left <= 0:
                claims = ", ".join(status.waiting_for)
                return BindingStatus(
                    failed=f"timed out after {bindings.timeout:g}s waiting for the PV "
                    f"controller to bind PersistentVolumeClaim(s) {claims}"
                )
            event = anyio.Event()
            for key in keys:
                self._waiting.setdefault(key, set()).add(event)
            try:
                with anyio.move_on_after(left):
                    await event.wait()
            finally:
                for key in keys:
                    waiting = self._waiting.get(key)
                    if waiting is not None:
                        waiting.discard(event)
                        if not waiting:
                            del self._waiting[key]
