"""Layer 0: the SchedulerConfiguration schema, its loader, feature gates.

One YAML document (``kind: SchedulerConfiguration``) configures the scheduler, read from a
file in production and from a scenario in the simulator. Structure, types and feature
gates are checked here; action and plugin names and plugin arguments are checked against
the registries by :meth:`scheduler.framework.registry.Registry.validate`, so every
mistake is refused at load with one line naming the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.errors import ConfigError
from scheduler.api.labels import API_VERSION, SCHEDULER_NAME
from scheduler.api.shards import POOL_LABEL, Sharding, ShardSpec

KIND = "SchedulerConfiguration"
T = typing.TypeVar("T")

FEATURE_GATES: Mapping[str, bool] = {
    "SchedulerAsyncPreemption": True,
}
"""Every known feature gate and its default."""

DEFAULT_ACTIONS: tuple[str, ...] = (
    "enqueue",
    "elect",
    "allocate",
    "preempt",
    "reclaim",
    "backfill",
    "reserve",
    "dissolve",
)


@dataclass(frozen=True, slots=True)
class PluginConfig:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TierConfig:
    plugins: tuple[PluginConfig, ...]


DEFAULT_TIERS: tuple[TierConfig, ...] = (
    TierConfig((PluginConfig("priority"), PluginConfig("gang"), PluginConfig("conformance"))),
    TierConfig(
        (
            PluginConfig("predicates"),
            PluginConfig("volumerestrictions"),
            PluginConfig("nodevolumelimits"),
            PluginConfig("volumebinding"),
            PluginConfig("volumezone"),
            PluginConfig("podtopologyspread"),
            PluginConfig("gpushare"),
            PluginConfig("dra"),
            PluginConfig("proportion"),
            PluginConfig("topology"),
            PluginConfig("reservation"),
            PluginConfig("interpodaffinity"),
            PluginConfig("nodeorder"),
        )
    ),
)


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    """The scheduler's configuration. Every field has a production default."""

    scheduler_name: str = SCHEDULER_NAME
    """Pods with this ``spec.schedulerName`` are scheduled; others only use capacity."""
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    """Actions run in this order every cycle."""
    tiers: tuple[TierConfig, ...] = DEFAULT_TIERS
    """Plugins by tier; earlier tiers weigh more where the tier rule says so."""
    action_arguments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-action arguments, by action name."""
    feature_gates: Mapping[str, bool] = field(default_factory=lambda: dict(FEATURE_GATES))
    schedule_period: float = 1.0
    """Seconds between cycles when nothing wakes the loop earlier."""
    percentage_of_nodes_to_score: int = 0
    """Share of feasible nodes scored per pod; 0 is kube-scheduler's adaptive rule."""
    bind_concurrency: int = 64
    """Bind calls in flight at once."""
    action_time_budget: float = 0.25
    """Seconds of wall time an action may spend at a stretch on the jobs of one cycle
    (0: no limit). Then allocate, preempt and reclaim keep their place: what was decided
    is handed on (binds and evictions go out), the loop runs its background calls and
    watch events, and the action goes on in the same cycle; backfill leaves the rest to
    the next cycle, which runs at once. Bounds how long a cycle holds the loop's one
    thread. Applies on the real clock only (a simulation's virtual clock stops while a
    cycle runs)."""
    wait_for_pod_grouper: bool = True
    """A pod made by a controller that names no group waits until the pod grouper of
    ``sluice controller`` has grouped it by its owner (or left it alone), so that no
    gang starts one pod at a time before its PodGroup exists. False for a cluster that
    runs no controller: such pods are then gangs of one at once."""
    pod_grouper_grace: float = 10.0
    """Seconds a pod waits for the pod grouper quietly: only a longer wait is told (its
    ``PodScheduled=False`` condition and ``FailedScheduling`` event), as kube-scheduler
    says nothing of a pod its pre-enqueue checks hold back. The grouper usually acts
    within a second; a long wait means no controller runs."""

    shards: tuple[ShardSpec, ...] = ()
    """Every shard of the scheduler, in order (the first reports pods no shard serves and
    the status of queues of no pool): each a name and the node pool it owns. The same
    list in every shard's configuration (one ConfigMap)."""
    shard: str = ""
    """This process's shard, one of :attr:`shards` (``sluice run --shard`` sets it); ""
    when the scheduler is not sharded. With no :attr:`shards` listed, the one shard of
    that name owning the pool of that name, which knows no other shard (it says nothing
    of the pods of other pools, and writes the status of its pool's queues only)."""
    shard_label: str = POOL_LABEL
    """The label key whose value names a node's (a queue's, a pod's) pool."""

    def sharding(self) -> Sharding | None:
        """The shards and this process's, or None when it is not sharded."""
        if not self.shard:
            return None
        shards = self.shards or (ShardSpec(self.shard, self.shard),)
        mine = next(s for s in shards if s.name == self.shard)
        return Sharding(self.shard_label, shards, mine, listed=bool(self.shards))

    def gate(self, name: str) -> bool:
        return self.feature_gates.get(name, FEATURE_GATES.get(name, False))

    def plugin_names(self) -> list[str]:
        return [p.name for t in self.tiers for p in t.plugins]


def _duration(value: object, where: str) -> float:
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
        for suffix in ("ms", "s", "m", "h"):
            if value.endswith(suffix):
                with contextlib.suppress(ValueError):
                    seconds = float(value[: -len(suffix)]) * units[suffix]
                break
    if seconds is None or not math.isfinite(seconds):
        raise ConfigError(KIND, where, f"expected a duration such as 500ms or 1s, got {value!r}")
    return seconds


def _check_type(value: object, expected: object, where: str) -> object:
    """Check ``value`` against a simple annotation (int, float, bool, str, dicts, lists)."""
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for alt in typing.get_args(expected):
            try:
                return _check_type(value, alt, where)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if expected is type(None):
        if value is None:
            return None
    elif expected is bool:
        if isinstance(value, bool):
            return value
    elif expected is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif expected is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif expected is str:
        if isinstance(value, str):
            return value
    elif origin in (dict, Mapping) or expected in (dict, Mapping):
        if isinstance(value, Mapping):
            args = typing.get_args(expected)
            if args:
                return {
                    _check_type(k, args[0], f"{where}.{k}"): _check_type(v, args[1], f"{where}.{k}")
                    for k, v in value.items()
                }
            return dict(value)
    elif origin in (list, tuple) or expected in (list, tuple):
        if isinstance(value, list):
            args = typing.get_args(expected)
            item = args[0] if args else object
            return tuple(_check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    elif expected is object:
        return value
    name = getattr(expected, "__name__", str(expected))
    name = {"tuple": "list", "dict": "map", "Mapping": "map"}.get(name, name)
    raise ConfigError(KIND, where, f"expected {name}, got {type(value).__name__} {value!r}")


def build_arguments(cls: type[T], raw: Mapping[str, Any] | None, where: str) -> T:
    """Build the frozen ``Arguments`` dataclass ``cls`` from ``raw``, checking names and types."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(KIND, where, "arguments must be a map")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    refused: Mapping[str, str] = getattr(cls, "REFUSED", {})
    for key, value in raw.items():
        if key not in fields and key in refused:
            raise ConfigError(KIND, f"{where}.{key}", refused[key])
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ConfigError(KIND, f"{where}.{key}", f"unknown argument; known: {known}")
        values[key] = _check_type(value, hints[key], f"{where}.{key}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        # A check in __post_init__ that names its argument first is charged to that field.
        first = str(exc).split(" ", 1)[0]
        field_name = f"{where}.{first}" if first in fields else where
        raise ConfigError(KIND, field_name, str(exc)) from exc


def parse_feature_gates(text: str, *, source: str = "--feature-gates") -> dict[str, bool]:
    """Parse ``K=V,K2=V2`` as Kubernetes components do; unknown gates are refused."""
    gates: dict[str, bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(source, key, "expected KEY=true|false")
        if key not in FEATURE_GATES:
            raise ConfigError(
                source, key, f"unknown feature gate; known: {', '.join(sorted(FEATURE_GATES))}"
            )
        v = value.strip().lower()
        if v not in ("true", "false"):
            raise ConfigError(source, key, f"expected true or false, got {value.strip()!r}")
        gates[key] = v == "true"
    return gates


def _gates(raw: object) -> dict[str, bool]:
    gates = dict(FEATURE_GATES)
    if raw is None:
        return gates
    if not isinstance(raw, Mapping):
        raise ConfigError(KIND, "featureGates", "must be a map of gate name to true/false")
    for key, value in raw.items():
        if key not in FEATURE_GATES:
            raise ConfigError(
                KIND,
                f"featureGates.{key}",
                f"unknown feature gate; known: {', '.join(sorted(FEATURE_GATES))}",
            )
        if not isinstance(value, bool):
            raise ConfigError(KIND, f"featureGates.{key}", f"expected true or false, got {value!r}")
        gates[key] = value
    return gates


def _tiers(raw: object) -> tuple[TierConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(KIND, "tiers", "must be a non-empty list of {plugins: [...]}")
    tiers = []
    for i, tier in enumerate(raw):
        plugins = tier.get("plugins") if isinstance(tier, Mapping) else None
        if not isinstance(plugins, list) or not plugins:
            raise ConfigError(KIND, f"tiers[{i}].plugins", "must be a non-empty list")
        out = []
        for j, p in enumerate(plugins):
            where = f"tiers[{i}].plugins[{j}]"
            if not isinstance(p, Mapping) or not isinstance(p.get("name"), str):
                raise ConfigError(KIND, f"{where}.name", "every plugin needs a name")
            unknown = set(p) - {"name", "arguments"}
            if unknown:
                raise ConfigError(KIND, f"{where}.{sorted(unknown)[0]}", "unknown field")
            args = p.get("arguments") or {}
            if not isinstance(args, Mapping):
                raise ConfigError(KIND, f"{where}.arguments", "must be a map")
            out.append(PluginConfig(p["name"], dict(args)))
        tiers.append(TierConfig(tuple(out)))
    return tuple(tiers)


def _check_order(actions: tuple[str, ...]) -> None:
    """Refuse an order of actions that cannot work, naming the action out of place:
    ``enqueue`` first (nothing else sees a PodGroup before it is admitted); ``elect``
    before ``allocate`` (allocate places the job it elects); ``reserve`` after
    ``allocate`` and after ``elect`` (it holds nodes for the elected job that allocate
    could not place yet)."""
    at = {name: i for i, name in enumerate(actions)}

    def where(name: str) -> str:
        return f"actions[{at[name]}]"

    if at.get("enqueue", 0) != 0:
        raise ConfigError(
            KIND,
            where("enqueue"),
            "enqueue must come first: PodGroups are admitted before the other actions see them",
        )
    if "elect" in at and at["elect"] > at.get("allocate", -1):
        raise ConfigError(
            KIND, where("elect"), "elect must come before allocate, which places the job it elects"
        )
    if "reserve" in at:
        if at["reserve"] < at.get("allocate", len(actions)):
            raise ConfigError(
                KIND,
                where("reserve"),
                "reserve must come after allocate: it holds nodes for "
                "the elected job allocate could not place",
            )
        if "elect" not in at:
            raise ConfigError(
                KIND,
                where("reserve"),
                "reserve needs elect before it: it holds nodes for the job elect chooses",
            )


_FIELDS = {
    "apiVersion",
    "kind",
    "metadata",
    "schedulerName",
    "actions",
    "tiers",
    "actionArguments",
    "featureGates",
    "schedulePeriod",
    "percentageOfNodesToScore",
    "bindConcurrency",
    "actionTimeBudget",
    "waitForPodGrouper",
    "podGrouperGrace",
    "shards",
    "shard",
    "shardLabel",
}


def parse_configuration(doc: Mapping[str, Any]) -> SchedulerConfiguration:
    """Build a configuration from one YAML document; refuse anything malformed."""
    if doc.get("kind") != KIND:
        raise ConfigError(KIND, "kind", f"expected {KIND}, got {doc.get('kind')!r}")
    if doc.get("apiVersion") != API_VERSION:
        raise ConfigError(
            KIND, "apiVersion", f"expected {API_VERSION}, got {doc.get('apiVersion')!r}"
        )
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise ConfigError(KIND, unknown[0], f"unknown field; known: {', '.join(sorted(_FIELDS))}")
    kwargs: dict[str, Any] = {}
    if "schedulerName" in doc:
        kwargs["scheduler_name"] = _check_type(doc["schedulerName"], str, "schedulerName")
    if "actions" in doc:
        actions = _check_type(doc["actions"], tuple[str, ...], "actions")
        assert isinstance(actions, tuple)
        if not actions:
            raise ConfigError(KIND, "actions", "must name at least one action")
        if len(set(actions)) != len(actions):
            raise ConfigError(KIND, "actions", "an action is listed twice")
        _check_order(actions)
        kwargs["actions"] = actions
    if "tiers" in doc:
        kwargs["tiers"] = _tiers(doc["tiers"])
    if "actionArguments" in doc:
        kwargs["action_arguments"] = _check_type(
            doc["actionArguments"], dict[str, dict[str, object]], "actionArguments"
        )
    kwargs["feature_gates"] = _gates(doc.get("featureGates"))
    if "schedulePeriod" in doc:
        period = _duration(doc["schedulePeriod"], "schedulePeriod")
        if period <= 0:
            raise ConfigError(KIND, "schedulePeriod", "must be positive")
        kwargs["schedule_period"] = period
    if "percentageOfNodesToScore" in doc:
        pct = _check_type(doc["percentageOfNodesToScore"], int, "percentageOfNodesToScore")
        assert isinstance(pct, int)
        if not 0 <= pct <= 100:
            raise ConfigError(KIND, "percentageOfNodesToScore", "must be within 0..100")
        kwargs["percentage_of_nodes_to_score"] = pct
    if "bindConcurrency" in doc:
        n = _check_type(doc["bindConcurrency"], int, "bindConcurrency")
        assert isinstance(n, int)
        if n < 1:
            raise ConfigError(KIND, "bindConcurrency", "must be at least 1")
        kwargs["bind_concurrency"] = n
    if "actionTimeBudget" in doc:
        budget = _duration(doc["actionTimeBudget"], "actionTimeBudget")
        if budget < 0:
            raise ConfigError(KIND, "actionTimeBudget", "must be 0 (no limit) or positive")
        kwargs["action_time_budget"] = budget
    if "waitForPodGrouper" in doc:
        kwargs["wait_for_pod_grouper"] = _check_type(
            doc["waitForPodGrouper"], bool, "waitForPodGrouper"
        )
    if "podGrouperGrace" in doc:
        grace = _duration(doc["podGrouperGrace"], "podGrouperGrace")
        if grace < 0:
            raise ConfigError(KIND, "podGrouperGrace", "must be 0 (tell at once) or positive")
        kwargs["pod_grouper_grace"] = grace
    kwargs.update(_shard_fields(doc))
    return SchedulerConfiguration(**kwargs)


SHARD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
"""A shard's name: part of its Lease's name, so a DNS label of at most 40 characters."""


def _shard_fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``shards``, ``shard`` and ``shardLabel`` of ``doc``, checked."""
    out: dict[str, Any] = {}
    if "shardLabel" in doc:
        label = _check_type(doc["shardLabel"], str, "shardLabel")
        if not label:
            raise ConfigError(KIND, "shardLabel", "must be a label key")
        out["shard_label"] = label
    shards: list[ShardSpec] = []
    raw = doc.get("shards")
    if raw is not None:
        if not isinstance(raw, list) or not raw:
            raise ConfigError(KIND, "shards", "expected a list of {name, nodePool}")
        for i, item in enumerate(raw):
            where = f"shards[{i}]"
            if not isinstance(item, Mapping):
                raise ConfigError(KIND, where, "expected a map with name and nodePool")
            unknown = sorted(set(item) - {"name", "nodePool"})
            if unknown:
                raise ConfigError(
                    KIND, f"{where}.{unknown[0]}", "unknown field; known: name, nodePool"
                )
            name = _shard_name(item.get("name"), f"{where}.name")
            pool = _check_type(item.get("nodePool", ""), str, f"{where}.nodePool")
            assert isinstance(pool, str)
            if any(s.name == name for s in shards):
                raise ConfigError(KIND, f"{where}.name", f"shard {name!r} is listed twice")
            if any(s.pool == pool for s in shards):
                raise ConfigError(
                    KIND, f"{where}.nodePool", f"node pool {pool!r} has another shard already"
                )
            shards.append(ShardSpec(name, pool))
        out["shards"] = tuple(shards)
    if "shard" in doc:
        out["shard"] = _check_type(doc["shard"], str, "shard")
    return check_shard(out.get("shard", ""), tuple(shards), "shard") | out


def _shard_name(value: Any, where: str) -> str:
    """``value`` as a shard's name (named at ``where``), checked."""
    name = _check_type(value, str, where)
    assert isinstance(name, str)
    if not SHARD_NAME.match(name):
        raise ConfigError(
            KIND, where, f"must be a DNS label of at most 40 characters, got {name!r}"
        )
    return name


def check_shard(shard: str, shards: tuple[ShardSpec, ...], where: str) -> dict[str, Any]:
    """Refuse a ``shard`` (named at ``where``) that is not one of ``shards`` (when any are
    listed) or not a shard's name."""
    if not shard:
        return {}
    _shard_name(shard, where)
    if shards and all(s.name != shard for s in shards):
        known = ", ".join(s.name for s in shards)
        raise ConfigError(KIND, where, f"no shard {shard!r} is listed in shards ({known})")
    return {}


def load_configuration_file(path: str | Path) -> SchedulerConfiguration:
    """Read a configuration file (one YAML document): Sluice's SchedulerConfiguration, or
    Volcano's ``volcano-scheduler.conf`` (or its ConfigMap), converted
    (:mod:`scheduler.config.volcano_conf`)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), None, f"not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(str(path), None, f"expected one {KIND} document")
    from scheduler.config.volcano_conf import from_volcano, is_volcano

    if is_volcano(doc):
        return from_volcano(doc)
    return parse_configuration(doc)


def configuration_document(config: SchedulerConfiguration) -> dict[str, Any]:
    """``config`` as the YAML document :func:`parse_configuration` reads back (fields at
    their default left out, except actions and tiers)."""
    default = SchedulerConfiguration()
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    if config.scheduler_name != default.scheduler_name:
        doc["schedulerName"] = config.scheduler_name
    doc["actions"] = list(config.actions)
    doc["tiers"] = [
        {
            "plugins": [
                {"name": p.name, **({"arguments": dict(p.arguments)} if p.arguments else {})}
                for p in tier.plugins
            ]
        }
        for tier in config.tiers
    ]
    if config.action_arguments:
        doc["actionArguments"] = {k: dict(v) for k, v in config.action_arguments.items()}
    gates = {k: v for k, v in config.feature_gates.items() if FEATURE_GATES.get(k) != v}
    if gates:
        doc["featureGates"] = gates
    for name, attr in (
        ("schedulePeriod", "schedule_period"),
        ("percentageOfNodesToScore", "percentage_of_nodes_to_score"),
        ("bindConcurrency", "bind_concurrency"),
        ("actionTimeBudget", "action_time_budget"),
    ):
        if getattr(config, attr) != getattr(default, attr):
            doc[name] = getattr(config, attr)
    if config.shards:
        doc["shards"] = [{"name": s.name, "nodePool": s.pool} for s in config.shards]
    if config.shard:
        doc["shard"] = config.shard
    if config.shard_label != default.shard_label:
        doc["shardLabel"] = config.shard_label
    return doc


def with_shard(config: SchedulerConfiguration, shard: str | None) -> SchedulerConfiguration:
    """``sluice run --shard NAME`` overrides the configuration's ``shard``."""
    if not shard:
        return config
    check_shard(shard, config.shards, "--shard")
    return dataclasses.replace(config, shard=shard)


def with_feature_gates(
    config: SchedulerConfiguration, overrides: Mapping[str, bool]
) -> SchedulerConfiguration:
    """Command-line gates override the file's, as in Kubernetes components."""
    if not overrides:
        return config
    return dataclasses.replace(config, feature_gates={**config.feature_gates, **overrides})
