"""A queue of keys to work on, each with its latest item, retried with backoff (layer 4).

What client-go's rate-limited work queue does for a controller, in a few lines of asyncio:

* a key is handed to one worker at a time (:meth:`WorkQueue.take`); offered again while a
  worker has it, it is handed out again once that worker is :meth:`~WorkQueue.done`, with
  the newest item;
* a key whose work failed comes back after a delay, ``base`` doubling up to ``cap``
  (unless a newer item is offered first, which is handed out at once);
* :meth:`~WorkQueue.forget` drops a key, wherever it is.

Not thread-safe: one event loop. :meth:`offer` and :meth:`forget` are plain calls (the
kopf handlers make them); :meth:`take` awaits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["WorkQueue"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class WorkQueue(Generic[K, T]):
    def __init__(self, *, base: float = 0.5, cap: float = 60.0) -> None:
        self.base = base
        self.cap = cap
        self._items: dict[K, T] = {}
        """The newest item of every key waiting to be handed out (ready or delayed)."""
        self._ready: deque[K] = deque()
        self._queued: set[K] = set()
        self._working: set[K] = set()
        self._failures: dict[K, int] = {}
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._dropped: set[K] = set()
        """Keys forgotten while a worker had them: not tried again when it fails."""
        self._wakeup = asyncio.Event()

    def __len__(self) -> int:
        """Keys waiting or in work."""
        return len(self._items.keys() | self._working)

    def holds(self, key: K) -> bool:
        return key in self._items or key in self._working

    def failures(self, key: K) -> int:
        """How many times in a row the work of ``key`` failed."""
        return self._failures.get(key, 0)

    def offer(self, key: K, item: T) -> None:
        """``item`` is the newest of ``key``: hand it out as soon as no worker has the key."""
        self._items[key] = item
        self._dropped.discard(key)
        delayed = self._delayed.pop(key, None)
        if delayed is not None:
            delayed.cancel()
        self._make_ready(key)

    def forget(self, key: K) -> None:
        """Drop ``key``: not handed out again (a worker that has it finishes)."""
        self._items.pop(key, None)
        self._failures.pop(key, None)
        if key in self._working:
            self._dropped.add(key)
        delayed = self._delayed.pop(key, None)
        if delayed is not None:
            delayed.cancel()

    async def take(self) -> tuple[K, T]:
        """The next key and its newest item; the caller must call :meth:`done` with it."""
        while True:
            while self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                if key in self._items and key not in self._working:
                    self._working.add(key)
                    return key, self._items.pop(key)
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, key: K, item: T, *, failed: bool) -> None:
        """The work on ``key`` is over. ``failed``: try ``item`` again after the backoff,
        unless a newer item was offered meanwhile (handed out at once) or the key was
        forgotten."""
        self._working.discard(key)
        if key in self._dropped:
            self._dropped.discard(key)
            return
        if not failed:
            self._failures.pop(key, None)
            if key in self._items:
                self._make_ready(key)
            return
        if key in self._items:  # newer news than what failed: no waiting
            self._failures[key] = self._failures.get(key, 0) + 1
            self._make_ready(key)
            return
        count = self._failures[key] = self._failures.get(key, 0) + 1
        delay = min(self.base * 2 ** (count - 1), self.cap)
        self._items[key] = item
        self._delayed[key] = asyncio.get_running_loop().call_later(delay, self._due, key)

    def _due(self, key: K) -> None:
        self._delayed.pop(key, None)
        if key in self._items:
            self._make_ready(key)

    def _make_ready(self, key: K) -> None:
        if key in self._working or key in self._queued or key in self._delayed:
            return
        self._queued.add(key)
        self._ready.append(key)
        self._wakeup.set()
