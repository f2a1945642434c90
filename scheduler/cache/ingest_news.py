"""What ingest tells the loop besides the state itself (layer 2): the objects it set aside
or applied with a change, and the jobs that got a pod to place.

Written by the event handlers (:mod:`~scheduler.cache.ingest`,
:mod:`~scheduler.cache.group_ingest`); taken by the loop before each cycle through
:class:`~scheduler.cache.SchedulerCache` (:meth:`IngestNews.take_notices`,
:meth:`IngestNews.take_fresh_jobs`). Nothing here awaits; the cache's one task only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class ObjectNotice:
    """An object the cache set aside (``what`` = ``rejected``: not applied) or applied
    with a change (``adjusted``), named ``Kind ns/name``, and why."""

    what: str
    object: str
    reason: str


class IngestNews:
    def __init__(self) -> None:
        self.rejected: Final[dict[str, str]] = {}
        """Objects not applied because they do not convert: ``Kind ns/name`` -> reason."""
        self.adjusted: Final[dict[str, str]] = {}
        """Objects applied with a change (a node's absurd allocatable capped, a field of
        another API not honoured): ``Kind ns/name`` -> what was changed."""
        self._news: list[ObjectNotice] = []
        """Entries of :attr:`rejected` and :attr:`adjusted` new or changed since the last
        :meth:`take_notices`."""
        self.fresh_jobs: set[str] = set()
        """Jobs that got a new pending pod of ours since the last :meth:`take_fresh_jobs`."""

    def reject(self, where: str, reason: str) -> None:
        """``where`` was not applied, for ``reason`` (told once per reason)."""
        self._note(self.rejected, "rejected", where, reason)

    def adjust(self, where: str, reason: str) -> None:
        """``where`` was applied with the change ``reason`` (told once per reason)."""
        self._note(self.adjusted, "adjusted", where, reason)

    def adjust_all(self, where: str, notes: tuple[str, ...]) -> None:
        """``where`` was applied with the changes ``notes`` (none: as it is)."""
        if notes:
            self.adjust(where, "; ".join(notes))
        else:
            self.adjusted.pop(where, None)

    def _note(self, table: dict[str, str], what: str, where: str, reason: str) -> None:
        if table.get(where) != reason:
            table[where] = reason
            self._news.append(ObjectNotice(what, where, reason))

    def take_notices(self) -> list[ObjectNotice]:
        """Objects rejected or adjusted since the last call, each told once per reason
        (the loop logs them). Called by the loop before each cycle."""
        news, self._news = self._news, []
        return news

    def take_fresh_jobs(self) -> set[str]:
        """The jobs that got a new pending pod of ours since the last call (their parking
        ends: a gang may now have all its members). Called by the loop before each
        snapshot."""
        fresh, self.fresh_jobs = self.fresh_jobs, set()
        return fresh
