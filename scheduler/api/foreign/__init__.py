"""Other schedulers' APIs converted at the edge (layer 0).

One module per API, each with the same two jobs: objects in (a PodGroup, a Queue) as the
domain model's :class:`~scheduler.api.job.JobInfo` and
:class:`~scheduler.api.queue.QueueInfo`, and status out, in the shape that API's own
scheduler writes (because other controllers wait on it). No second gang logic: once
converted, a gang is a gang. Pure functions of their arguments; each raises
:class:`~scheduler.api.errors.InvalidInputError` naming the object and the field.

* :mod:`.volcano`: ``scheduling.volcano.sh/v1beta1`` PodGroup and Queue;
* :mod:`.coscheduling`: scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroup;
* :mod:`.kubernetes`: ``scheduling.k8s.io/v1alpha2`` PodGroup (Kubernetes v1.36).

What a converter cannot honour of an object is not lost silently: it comes back as
:attr:`Converted.notes`, one line each, which the cache tells once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)

__all__ = ["Converted"]


@dataclass(frozen=True, slots=True)
class Converted(Generic[T_co]):
    """A converted object and what of it Sluice does not honour (one line each)."""

    value: T_co
    notes: tuple[str, ...] = ()
