"""The live page of a running scheduler: its data, cheap to serve (layer 4, live).

:class:`LivePage` is attached to a :class:`~scheduler.loop.scheduler_loop.SchedulingLoop`
(``sluice run``, ``sluice simulate --serve``). It adds one observer to the loop (the
:class:`~scheduler.live.summary.LiveSummary`: references to what each cycle's report
holds, and the recent preemptions) and answers the page's two questions:

* :meth:`LivePage.state`: the page's document (:func:`~scheduler.live.state.page_state`),
  computed when asked and at most once per cycle however many pages look (one pass
  over the cache's pods and nodes, on the event loop, between cycles; every 5 s at most
  where no cycle runs, on a replica that does not lead);
* :meth:`LivePage.explain`: ``sluice explain`` of one job, on a click. It is a whole
  scheduling cycle in memory, so it does not run on the event loop: a full copy of the
  cache's state is taken there (:meth:`~scheduler.cache.SchedulerCache.full_snapshot`,
  sharing nothing that the loop changes; DRA's inventory, which memoizes as it is used,
  is built afresh for it) and the cycle runs in a worker thread, one at a time, its
  answer kept for the rest of the cycle. The loop never waits for it. The holds of the
  scheduling queue go with the copy, so the answer is the next cycle's: a job behind its
  preemption's gate, or backing off, is not tried, and the answer says so. A parked job
  is tried (the answer then says what it was told, and shows its reasons node by node).

Everything is read-only: nothing here writes to the cluster, the cache or the queue.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time

import anyio

from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.dra.inventory import Inventory
from scheduler.api.errors import InvalidInputError
from scheduler.api.holds import HoldKind
from scheduler.explanation import KINDS, explain_snapshot, render
from scheduler.live.state import Json, page_state
from scheduler.live.summary import LiveSummary
from scheduler.loop.scheduler_loop import SchedulingLoop

STALE_AFTER = 5.0
"""Seconds after which the page's document is computed again even if no cycle ran."""


class LivePage:
    """The live page's data for one loop. Created before the loop runs (or while it
    does: the page then fills from the next cycle on). Its methods run on the loop's
    event loop."""

    def __init__(self, loop: SchedulingLoop, *, title: str = "") -> None:
        self.loop = loop
        self.title = title or f"{loop.config.scheduler_name}: live"
        self.summary = LiveSummary()
        loop.observers.append(self.summary.observe)
        self._state: tuple[int, float, Json] | None = None
        self._state_json: tuple[Json, str] | None = None
        self._explained: dict[tuple[str, str], Json] = {}
        self._explained_at = -1
        self._explaining = anyio.Lock()

    def state(self) -> Json:
        """The page's document as of the last cycle: memoized until the next one, and for
        at most :data:`STALE_AFTER` seconds (a replica that does not lead runs no cycle,
        and its cache still changes)."""
        cycle, now = self.summary.cycle, time.monotonic()
        if self._state is None or self._state[0] != cycle or now - self._state[1] > STALE_AFTER:
            doc = page_state(self.loop.cache, self.summary, self.loop.ports.clock.now())
            doc["title"] = self.title
            self._state = (cycle, now, doc)
        return self._state[2]

    def state_json(self) -> str:
        """:meth:`state` as JSON text, serialized once per document however many pages
        ask (at 5,000 nodes and 25,000 pods the document is about 3 MB)."""
        doc = self.state()
        if self._state_json is None or self._state_json[0] is not doc:
            self._state_json = (doc, json.dumps(doc, separators=(",", ":")))
        return self._state_json[1]

    async def explain(self, kind: str, name: str) -> Json:
        """``sluice explain KIND NAME`` against the scheduler's own state and its
        configuration, with the scheduling queue's holds (see the module docstring), as
        JSON with its text (``text``) beside. Raises InvalidInputError naming the object
        when it is not there."""
        if kind not in KINDS:
            raise InvalidInputError("explain", "kind", f"must be one of {', '.join(KINDS)}")
        async with self._explaining:
            if self._explained_at != self.summary.cycle:
                self._explained = {}
                self._explained_at = self.summary.cycle
            found = self._explained.get((kind, name))
            if found is not None:
                return found
            snapshot = self._copy()
            job = functools.partial(explain_snapshot, snapshot, self.loop.resolved, kind, name)
            result: Json = await anyio.to_thread.run_sync(job)
            hold = self.summary.queue_view.holds.get(result["job"])
            if hold is not None:
                result["hold"] = {"kind": hold.kind.value, "reason": hold.text}
                result["waits_for"].append(_hold_text(hold.kind, hold.text))
            result["text"] = render(result, verbose=True)
            result["cycle"] = self.summary.cycle
            self._explained[(kind, name)] = result
            return result

    def _copy(self) -> Snapshot:
        """A snapshot sharing nothing the loop changes, with the last cycle's holds but
        parked jobs tried (their reasons, node by node, are the point of asking)."""
        cache = self.loop.cache
        snapshot = cache.full_snapshot()
        snapshot.now = self.loop.ports.clock.now()
        snapshot.wall = self.loop.ports.clock.wall()
        view = self.summary.queue_view
        snapshot.queue = dataclasses.replace(
            view, holds={j: h for j, h in view.holds.items() if h.kind is not HoldKind.PARKED}
        )
        if snapshot.dra is not None:
            fresh = Inventory(dict(cache.dra.slices), dict(cache.dra.classes))
            snapshot.dra = dataclasses.replace(snapshot.dra, inventory=fresh)
        return snapshot


def _hold_text(kind: HoldKind, reason: str) -> str:
    if kind is HoldKind.PARKED:  # its reason is the one above
        return (
            "parked: tried and left unschedulable; tried again when something that could "
            "help it changes (a pod gone, a node, queue or PodGroup changed), or within 5 "
            "minutes"
        )
    what = {
        HoldKind.EVICTIONS: "behind its preemption's gate: the victims' deletions are not "
        "all seen yet, or the API calls still run",
        HoldKind.ERROR: "backing off after a scheduler error or a refused bind",
        HoldKind.NO_PREEMPTION: "placed normally but may not preempt until its backoff ends, "
        "after a preemption of its failed",
    }[kind]
    return f"{what}: {reason}" if reason else what
