"""The spread constraints a pod is placed by (layer 2): its own, or the cluster's defaults.

As kube-scheduler's PodTopologySpread: a pod with ``topologySpreadConstraints`` is placed
by those (DoNotSchedule ones filter, ScheduleAnyway ones score), each selector merged with
the pod's ``matchLabelKeys``; a pod without any gets the plugin's default constraints,
whose selector is the one its Services, ReplicaSet, StatefulSet or ReplicationController
select it by (none of those: no defaults). ``System`` defaulting is kube's: ScheduleAnyway
over hostname (maxSkew 3) and zone (maxSkew 5), and nodes missing a zone label still
count for hostname spreading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.spread import HOSTNAME, ZONE, SpreadConstraint, parse_spread
from scheduler.api.task import TaskInfo
from scheduler.framework.pod_counts import MatchKey

SYSTEM = "System"
LIST = "List"

SYSTEM_DEFAULTS = (
    SpreadConstraint(3, HOSTNAME, hard=False, selector=LabelSelector()),
    SpreadConstraint(5, ZONE, hard=False, selector=LabelSelector()),
)
"""kube-scheduler's system default constraints (their selector comes from the pod)."""


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArguments:
    """The arguments of ``podtopologyspread``; field names are the YAML keys (kube's
    PodTopologySpreadArgs, and the score's weight)."""

    defaultingType: str = SYSTEM
    """``System``: kube's default constraints; ``List``: :attr:`defaultConstraints` (an
    empty list turns defaults off)."""
    defaultConstraints: tuple[Mapping[str, object], ...] = ()
    """Constraints for pods that have none, as in a pod spec but without
    ``labelSelector`` (the pod's Services and controllers give it); ``List`` only."""
    weight: int = 2
    """Weight of the spread score among the scores (kube's default weight: 2); 0 turns
    the score off (the filter stays)."""

    REFUSED: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        if self.defaultingType not in (SYSTEM, LIST):
            raise ValueError(f"defaultingType must be System or List, got {self.defaultingType!r}")
        if self.weight < 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")
        if self.defaultingType == SYSTEM and self.defaultConstraints:
            raise ValueError("defaultConstraints must be empty when defaultingType is System")
        for i, c in enumerate(self.defaultConstraints):
            if "labelSelector" in c:
                raise ValueError(
                    f"defaultConstraints[{i}].labelSelector must not be set: the selector "
                    "comes from the pod's Services and controllers"
                )
        try:
            self.defaults()
        except InvalidInputError as exc:
            raise ValueError(f"{exc.field}: {exc.message}") from exc

    def defaults(self) -> tuple[SpreadConstraint, ...]:
        """The default constraints (selectors left empty: the pod's are put in)."""
        if self.defaultingType == SYSTEM:
            return SYSTEM_DEFAULTS
        return parse_spread(
            [dict(c) for c in self.defaultConstraints],
            obj="podtopologyspread arguments",
            field="defaultConstraints",
        )


@dataclass(frozen=True, slots=True)
class Effective:
    """A constraint as it applies to one pod: its selector merged, and what it counts."""

    constraint: SpreadConstraint
    selector: LabelSelector
    key: MatchKey
    counts_nothing: bool
    """The selector has no requirement: kube counts no pod for it (only the pod itself)."""


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """The constraints of one pod: ``hard`` filter, ``soft`` score."""

    hard: tuple[Effective, ...]
    soft: tuple[Effective, ...]
    soft_need_every_key: bool
    """Only nodes with every soft constraint's key are scored (False for kube's system
    defaults, so nodes without a zone label are still spread over by hostname)."""
    hard_keys: tuple[str, ...] = field(default=())
    soft_keys: tuple[str, ...] = field(default=())


NONE = PodConstraints((), (), soft_need_every_key=True)


def _effective(c: SpreadConstraint, selector: LabelSelector, namespace: str) -> Effective:
    nothing = not selector.requirements and not selector.match_nothing
    return Effective(c, selector, ((selector, frozenset((namespace,))),), nothing)


def _keys(effective: Sequence[Effective]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(e.constraint.topology_key for e in effective))


class Constraints:
    """The :class:`PodConstraints` of tasks, cached for one session."""

    def __init__(self, arguments: PodTopologySpreadArguments) -> None:
        self._defaults = arguments.defaults()
        self._system = arguments.defaultingType == SYSTEM
        self._cache: dict[object, PodConstraints] = {}

    @property
    def has_defaults(self) -> bool:
        return bool(self._defaults)

    @property
    def defaults_of_kind(self) -> tuple[SpreadConstraint, ...]:
        """The default constraints (their selectors left empty)."""
        return self._defaults

    def of(self, task: TaskInfo, default_selector: LabelSelector | None) -> PodConstraints:
        """``task``'s constraints; ``default_selector``: what its Services and controllers
        select it by (None: nothing), read only when it has no constraints of its own."""
        own = task.spec.spread
        labels = task.labels or {}
        if own:
            cache_key: object = (
                own,
                task.namespace,
                tuple(labels.get(k) for c in own for k in c.match_label_keys),
            )
            found = self._cache.get(cache_key)
            if found is None:
                effective = [_effective(c, c.selector_for(labels), task.namespace) for c in own]
                found = self._split(effective, need_every_key=True)
                self._cache[cache_key] = found
            return found
        if default_selector is None or not self._defaults:
            return NONE
        cache_key = (default_selector, task.namespace)
        found = self._cache.get(cache_key)
        if found is None:
            # kube puts the pod's selector in as it is (no matchLabelKeys merged into it).
            effective = [
                _effective(_with_selector(c, default_selector), default_selector, task.namespace)
                for c in self._defaults
            ]
            found = self._split(effective, need_every_key=not self._system)
            self._cache[cache_key] = found
        return found

    @staticmethod
    def _split(effective: list[Effective], *, need_every_key: bool) -> PodConstraints:
        hard = tuple(e for e in effective if e.constraint.hard)
        soft = tuple(e for e in effective if not e.constraint.hard)
        return PodConstraints(hard, soft, need_every_key, _keys(hard), _keys(soft))


def _with_selector(c: SpreadConstraint, selector: LabelSelector) -> SpreadConstraint:
    return SpreadConstraint(
        c.max_skew,
        c.topology_key,
        c.hard,
        selector,
        c.min_domains,
        c.honor_affinity,
        c.honor_taints,
        c.match_label_keys,
    )
