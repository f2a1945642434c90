"""Volcano's scheduler configuration read as Sluice's (layer 0, config).

``volcano-scheduler.conf`` (the ``volcano-scheduler-configmap`` ConfigMap's key, or that
ConfigMap itself) holds ``actions`` as one comma-separated string, ``tiers`` of plugins
with Volcano's names, each with ``enable...`` switches and ``arguments``, and
``configurations`` (arguments per action). :func:`from_volcano` turns it into a
:class:`~scheduler.config.SchedulerConfiguration`, or refuses, in one line naming the
action, plugin, switch or argument, what Sluice does not have, saying what to use
instead. The mapping, entry by entry:

* actions: ``enqueue``, ``allocate``, ``preempt``, ``reclaim``, ``backfill``, ``elect``,
  ``reserve`` as they are; ``gangpreempt`` and ``gangreclaim`` are ``preempt`` and
  ``reclaim`` (Sluice's are gang-aware); ``shuffle`` is refused;
* plugins: ``priority``, ``gang``, ``conformance``, ``predicates``, ``proportion``,
  ``nodeorder``, ``overcommit``, ``drf`` as they are; ``predicates`` brings
  ``podtopologyspread`` (Volcano's predicates run kube's PodTopologySpread filter) and
  ``nodeorder`` brings ``interpodaffinity`` (its InterPodAffinity score); ``capacity`` is
  ``proportion`` (deserved, capability, guarantee, hierarchy); ``binpack`` is
  ``nodeorder``'s most-allocated score; ``network-topology-aware`` is ``topology``;
  ``pdb`` is built in (the victim search counts PodDisruptionBudgets); the others are
  refused (:data:`REFUSED` says why);
* switches: ``true`` changes nothing (a Sluice plugin always does what it does), but
  drf's ``enableHierarchy`` is its ``hierarchy`` argument; ``false`` is refused, except
  gang's ``enablePreemptable: false`` (what Sluice does: a running gang can be
  preempted, its surplus first, then whole) and drf's ``enablePreemptable: false`` (its
  ``preemptable`` argument); drf with ``enableHierarchy`` and ``proportion`` in one tier
  are refused, as Volcano refuses them;
* arguments: nodeorder's ``leastrequested.weight``, ``mostrequested.weight``,
  ``balancedresource.weight``, ``nodeaffinity.weight``, ``tainttoleration.weight`` and
  binpack's ``binpack.weight``, ``binpack.cpu``, ``binpack.memory``,
  ``binpack.resources`` map onto ``nodeorder``'s arguments, ``podaffinity.weight`` onto
  ``interpodaffinity``'s weight and ``podtopologyspread.weight`` onto
  ``podtopologyspread``'s; a score Sluice lacks is accepted only with weight 0;
  overcommit's ``overcommit-factor`` is its ``overcommitFactor``; preempt's (and
  reclaim's) candidate-node arguments map onto ``actionArguments``. Anything else is
  refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import yaml

from scheduler.api.errors import ConfigError
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig

__all__ = ["REFUSED", "from_volcano", "is_volcano"]

SOURCE: Final = "volcano-scheduler.conf"
CONFIG_KEY: Final = "volcano-scheduler.conf"

ACTIONS: Final[Mapping[str, str]] = {
    "enqueue": "enqueue",
    "allocate": "allocate",
    "preempt": "preempt",
    "gangpreempt": "preempt",
    "reclaim": "reclaim",
    "gangreclaim": "reclaim",
    "backfill": "backfill",
    "elect": "elect",
    "reserve": "reserve",
}
REFUSED_ACTIONS: Final[Mapping[str, str]] = {
    "shuffle": "Sluice does not evict running pods to rebalance (no descheduling); remove it",
}
PLUGINS: Final[Mapping[str, str]] = {
    "priority": "priority",
    "gang": "gang",
    "conformance": "conformance",
    "predicates": "predicates",
    "proportion": "proportion",
    "capacity": "proportion",
    "nodeorder": "nodeorder",
    "binpack": "nodeorder",
    "overcommit": "overcommit",
    "drf": "drf",
    "network-topology-aware": "topology",
}
BUILT_IN: Final[Mapping[str, str]] = {
    "pdb": "the victim search always counts PodDisruptionBudgets",
}
REFUSED: Final[Mapping[str, str]] = {
    "deviceshare": "use plugin gpushare (pods ask scheduling.sluice.dev/gpu-memory, nodes "
    "label it)",
    "sla": "use actions elect and reserve (starvation protection, "
    "actionArguments.elect.starvationThreshold)",
    "tdm": "Sluice has no revocable zones; remove it",
    "cdp": "Sluice has no cooldown protection; label pods scheduling.sluice.dev/preemptable: "
    '"false" to keep them from being preempted',
    "rescheduling": "Sluice does not deschedule running pods; remove it",
    "usage": "Sluice places by requests, not by measured usage; remove it",
    "numaaware": "Sluice does not place by NUMA topology; remove it",
    "task-topology": "use a Topology and a PodGroup topologyConstraint (plugin topology)",
    "extender": "Sluice calls no scheduler extenders; remove it",
    "nodegroup": "use node selectors or node affinity on the pods",
    "resource-strategy-fit": "use nodeorder's leastAllocatedWeight and mostAllocatedWeight",
    "resourcequota": "Sluice does not admit by namespace ResourceQuota; use Queue capability",
}
NODEORDER_ARGUMENTS: Final[Mapping[str, str]] = {
    "leastrequested.weight": "leastAllocatedWeight",
    "mostrequested.weight": "mostAllocatedWeight",
    "balancedresource.weight": "balancedAllocationWeight",
    "nodeaffinity.weight": "nodeAffinityWeight",
    "tainttoleration.weight": "taintTolerationWeight",
}
NODEORDER_OTHER_PLUGINS: Final[Mapping[str, str]] = {
    "podaffinity.weight": "interpodaffinity",
    "podtopologyspread.weight": "podtopologyspread",
}
"""Weights of nodeorder's scores that are plugins of their own in Sluice."""
NODEORDER_MISSING: Final = ("imagelocality.weight",)
BROUGHT: Final[Mapping[str, str]] = {
    "predicates": "podtopologyspread",
    "nodeorder": "interpodaffinity",
}
"""The Sluice plugin each Volcano plugin brings with it (placed right after it)."""
SEARCH_ARGUMENTS: Final[Mapping[str, str]] = {
    "minCandidateNodesPercentage": "minCandidateNodesPercentage",
    "minCandidateNodesAbsolute": "minCandidateNodesAbsolute",
    "maxCandidateNodesAbsolute": "maxCandidateNodes",
}
_SWITCHES_THAT_ARE_SLUICE: Final = frozenset({("gang", "enablePreemptable")})
SWITCH_ARGUMENTS: Final[Mapping[tuple[str, str], str]] = {
    ("drf", "enablePreemptable"): "preemptable",
    ("drf", "enableHierarchy"): "hierarchy",
}
"""Volcano's switches that are a Sluice plugin's arguments (their value is the argument's)."""
OVERCOMMIT_ARGUMENTS: Final[Mapping[str, str]] = {"overcommit-factor": "overcommitFactor"}


def is_volcano(doc: Mapping[str, Any]) -> bool:
    """Is ``doc`` Volcano's configuration (its ``actions`` one string), or the ConfigMap
    that holds it?"""
    if doc.get("kind") == "ConfigMap":
        return CONFIG_KEY in (doc.get("data") or {})
    return "kind" not in doc and isinstance(doc.get("actions"), str)


def _fail(field: str | None, message: str) -> ConfigError:
    return ConfigError(SOURCE, field, message)


def _actions(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, str):
        raise _fail("actions", "must be one string of comma-separated action names")
    out: list[str] = []
    for name in (a.strip() for a in raw.split(",")):
        if not name:
            continue
        if name in REFUSED_ACTIONS:
            raise _fail(f"actions[{name}]", REFUSED_ACTIONS[name])
        mapped = ACTIONS.get(name)
        if mapped is None:
            raise _fail(f"actions[{name}]", f"unknown action; Sluice has {', '.join(ACTIONS)}")
        if mapped not in out:
            out.append(mapped)
    if not out:
        raise _fail("actions", "names no action")
    return tuple(out)


def _number(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(where, f"expected a number, got {value!r}")
    try:
        return int(float(value))
    except ValueError as exc:
        raise _fail(where, f"expected a number, got {value!r}") from exc


def _factor(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(where, f"expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError as exc:
        raise _fail(where, f"expected a number, got {value!r}") from exc


def _nodeorder_arguments(name: str, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """nodeorder's and binpack's arguments as Sluice's nodeorder's."""
    out: dict[str, Any] = {}
    if name == "binpack":
        out["mostAllocatedWeight"] = 1
        out["leastAllocatedWeight"] = 0
        resources: dict[str, int] = {}
        for key, value in raw.items():
            field = f"{where}.arguments.{key}"
            if key == "binpack.weight":
                out["mostAllocatedWeight"] = _number(value, field)
            elif key in ("binpack.cpu", "binpack.memory"):
                resources[key.split(".")[1]] = _number(value, field)
            elif key == "binpack.resources":
                for res in (r.strip() for r in str(value).split(",") if r.strip()):
                    resources.setdefault(
                        res, _number(raw.get(f"binpack.resources.{res}", 1), field)
                    )
            elif key.startswith("binpack.resources."):
                continue  # read with binpack.resources
            else:
                raise _fail(field, "Sluice's nodeorder takes no such argument")
        if resources:
            out["resources"] = {"cpu": 1, "memory": 1, **resources}
        return out
    for key, value in raw.items():
        field = f"{where}.arguments.{key}"
        if key in NODEORDER_ARGUMENTS:
            out[NODEORDER_ARGUMENTS[key]] = _number(value, field)
        elif key in NODEORDER_OTHER_PLUGINS:
            out[f"{NODEORDER_OTHER_PLUGINS[key]}.weight"] = _number(value, field)
        elif key in NODEORDER_MISSING:
            if _number(value, field) != 0:
                scores = ", ".join(NODEORDER_ARGUMENTS)
                raise _fail(
                    field,
                    f"Sluice's nodeorder has no such score (it has {scores}); "
                    "remove it or set it to 0",
                )
        else:
            raise _fail(field, "Sluice's nodeorder takes no such argument")
    return out


def _plugin(raw: object, where: str) -> PluginConfig | None:
    """One Volcano plugin entry as a Sluice plugin (None: built into Sluice)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise _fail(f"{where}.name", "every plugin needs a name")
    name = raw["name"]
    where = f"{where} ({name})"
    if name in REFUSED:
        raise _fail(where, f"Sluice has no {name} plugin: {REFUSED[name]}")
    if name not in PLUGINS and name not in BUILT_IN:
        known = ", ".join(sorted({*PLUGINS, *BUILT_IN}))
        raise _fail(where, f"unknown plugin; Sluice maps {known}")
    switched: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("name", "arguments"):
            continue
        if not key.startswith("enable"):
            raise _fail(f"{where}.{key}", "unknown field of a plugin")
        if not isinstance(value, bool):
            raise _fail(f"{where}.{key}", f"expected true or false, got {value!r}")
        if (name, key) in SWITCH_ARGUMENTS:
            switched[SWITCH_ARGUMENTS[name, key]] = value
            continue
        if value is False and (name, key) not in _SWITCHES_THAT_ARE_SLUICE:
            raise _fail(
                f"{where}.{key}",
                "Sluice's plugins cannot turn off one of their hooks; remove the switch "
                f"(or the plugin{'' if name not in PLUGINS else ' ' + PLUGINS[name]})",
            )
    if name in BUILT_IN:
        return None
    arguments = raw.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise _fail(f"{where}.arguments", "must be a map")
    mapped = PLUGINS[name]
    if mapped == "nodeorder":
        return PluginConfig(mapped, _nodeorder_arguments(name, arguments, where))
    if mapped == "overcommit":
        out: dict[str, Any] = {}
        for key, value in arguments.items():
            field = f"{where}.arguments.{key}"
            if key not in OVERCOMMIT_ARGUMENTS:
                raise _fail(field, "Sluice's overcommit takes no such argument")
            out[OVERCOMMIT_ARGUMENTS[key]] = _factor(value, field)
        return PluginConfig(mapped, out)
    if arguments:
        key = next(iter(arguments))
        raise _fail(f"{where}.arguments.{key}", f"Sluice's {mapped} takes no such argument")
    return PluginConfig(mapped, switched)


def _hierarchy_beside_proportion(plugins: list[Any], i: int) -> None:
    """Volcano refuses drf with ``enableHierarchy`` and ``proportion`` in one tier
    (``unmarshalSchedulerConf``: both order queues and judge reclaims); so does Sluice."""
    names = [p.get("name") for p in plugins if isinstance(p, Mapping)]
    hierarchical = any(
        isinstance(p, Mapping) and p.get("name") == "drf" and p.get("enableHierarchy") is True
        for p in plugins
    )
    if hierarchical and "proportion" in names:
        raise _fail(
            f"tiers[{i}].plugins",
            "drf with enableHierarchy and proportion in one tier conflict (Volcano refuses "
            "them too); put them in different tiers, or drop enableHierarchy",
        )


def _tiers(raw: object) -> tuple[TierConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail("tiers", "must be a non-empty list of {plugins: [...]}")
    tiers: list[list[PluginConfig]] = []
    placed: dict[str, tuple[int, int]] = {}
    for i, tier in enumerate(raw):
        plugins = tier.get("plugins") if isinstance(tier, Mapping) else None
        if not isinstance(plugins, list):
            raise _fail(f"tiers[{i}].plugins", "must be a list")
        _hierarchy_beside_proportion(plugins, i)
        out: list[PluginConfig] = []
        for j, entry in enumerate(plugins):
            plugin = _plugin(entry, f"tiers[{i}].plugins[{j}]")
            if plugin is None:
                continue
            if plugin.name in placed:  # nodeorder and binpack, capacity and proportion: one
                ti, pj = placed[plugin.name]
                first = tiers[ti][pj] if ti < len(tiers) else out[pj]
                merged = PluginConfig(plugin.name, {**first.arguments, **plugin.arguments})
                if ti < len(tiers):
                    tiers[ti][pj] = merged
                else:
                    out[pj] = merged
                continue
            placed[plugin.name] = (i, len(out))
            out.append(plugin)
        tiers.append(out)
    return tuple(TierConfig(tuple(t)) for t in _brought(tiers) if t)


def _brought(tiers: list[list[PluginConfig]]) -> list[list[PluginConfig]]:
    """Each plugin of :data:`BROUGHT` added after the plugin that brings it (unless already
    there), with the weight nodeorder's arguments gave it."""
    weights: dict[str, int] = {}
    for tier in tiers:
        for k, plugin in enumerate(tier):
            if plugin.name == "nodeorder":
                args = dict(plugin.arguments)
                for name in NODEORDER_OTHER_PLUGINS.values():
                    if f"{name}.weight" in args:
                        weights[name] = args.pop(f"{name}.weight")
                tier[k] = PluginConfig("nodeorder", args)
    present = {p.name for tier in tiers for p in tier}
    out = []
    for tier in tiers:
        new: list[PluginConfig] = []
        for plugin in tier:
            new.append(plugin)
            brought = BROUGHT.get(plugin.name)
            if brought is not None and brought not in present:
                new.append(
                    PluginConfig(
                        brought, {"weight": weights[brought]} if brought in weights else {}
                    )
                )
        out.append(new)
    return out


def _action_arguments(raw: object) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _fail("configurations", "must be a list of {name, arguments}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise _fail(f"configurations[{i}].name", "every configuration names an action")
        action = ACTIONS.get(entry["name"], entry["name"])
        where = f"configurations[{i}] ({entry['name']})"
        arguments = entry.get("arguments") or {}
        if not isinstance(arguments, Mapping):
            raise _fail(f"{where}.arguments", "must be a map")
        for key, value in arguments.items():
            field = f"{where}.arguments.{key}"
            if action in ("preempt", "reclaim") and key in SEARCH_ARGUMENTS:
                out.setdefault(action, {})[SEARCH_ARGUMENTS[key]] = _number(value, field)
            elif action == "preempt" and key == "enableTopologyAwarePreemption" and value is True:
                continue  # Sluice's preemption is topology-aware for every gang that asks
            else:
                raise _fail(field, f"Sluice's {action} takes no such argument")
    return out


def from_volcano(doc: Mapping[str, Any]) -> SchedulerConfiguration:
    """The Sluice configuration of Volcano's ``doc`` (the configuration, or the ConfigMap
    holding it). Raises ConfigError, one line naming what Sluice does not have."""
    if doc.get("kind") == "ConfigMap":
        text = (doc.get("data") or {}).get(CONFIG_KEY)
        try:
            inner = yaml.safe_load(text) if isinstance(text, str) else None
        except yaml.YAMLError as exc:
            raise _fail(None, f"not valid YAML: {exc}") from exc
        if not isinstance(inner, Mapping):
            raise ConfigError(SOURCE, None, "the ConfigMap's volcano-scheduler.conf is not a map")
        doc = inner
    unknown = sorted(set(doc) - {"actions", "tiers", "configurations", "metrics"})
    if unknown:
        raise _fail(unknown[0], "unknown field of Volcano's configuration")
    if doc.get("metrics"):
        raise _fail("metrics", "Sluice serves Prometheus metrics on /metrics of --port; remove it")
    actions = _actions(doc.get("actions"))
    return SchedulerConfiguration(
        actions=actions,
        tiers=_tiers(doc.get("tiers")),
        action_arguments=_action_arguments(doc.get("configurations")),
    )
