"""Explicit registries of plugins and actions (layer 1).

Nothing registers itself at import time: ``scheduler.plugins.register_builtin(registry)``
and ``scheduler.actions.register_builtin(registry)`` fill a :class:`Registry` that the
composition root owns. A duplicate name is an error, and so is a configuration naming
something never registered or giving a plugin an argument it does not take.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import ConfigError, RegistryError
from scheduler.config import KIND, SchedulerConfiguration, build_arguments
from scheduler.framework.action import Action
from scheduler.framework.effects import Effect
from scheduler.framework.extension_points import Plugin


@dataclass(frozen=True, slots=True)
class NoArguments:
    """The arguments of a plugin or action that takes none."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """How to build a plugin: ``factory(arguments)`` for each session."""

    name: str
    factory: Callable[[Any], Plugin]
    arguments: type = NoArguments


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """How to build an action once per configuration, and the kinds of effect it emits
    (the composition root starts the executors those effects need)."""

    name: str
    factory: Callable[[Any], Action]
    arguments: type = NoArguments
    emits: frozenset[type[Effect]] = frozenset()


@dataclass(frozen=True, slots=True)
class ResolvedPlugin:
    spec: PluginSpec
    arguments: object
    tier: int


@dataclass(frozen=True, slots=True)
class ResolvedConfiguration:
    """A configuration checked against a registry, with typed arguments built."""

    config: SchedulerConfiguration
    plugins: tuple[ResolvedPlugin, ...]
    actions: tuple[Action, ...]
    emitted: frozenset[type[Effect]] = frozenset()
    """Every kind of effect some configured action may emit."""

    def emits(self, kind: type[Effect]) -> bool:
        """May a configured action emit effects of ``kind``?"""
        return kind in self.emitted

    def build_plugins(self) -> list[tuple[int, Plugin]]:
        """Fresh plugin instances for one session, in tier and plugin order."""
        return [(p.tier, p.spec.factory(p.arguments)) for p in self.plugins]


class Registry:
    def __init__(self) -> None:
        self._plugins: dict[str, PluginSpec] = {}
        self._actions: dict[str, ActionSpec] = {}

    def add_plugin(self, spec: PluginSpec) -> None:
        if spec.name in self._plugins:
            raise RegistryError(f"plugin {spec.name!r} is already registered")
        self._plugins[spec.name] = spec

    def add_action(self, spec: ActionSpec) -> None:
        if spec.name in self._actions:
            raise RegistryError(f"action {spec.name!r} is already registered")
        self._actions[spec.name] = spec

    @property
    def plugin_names(self) -> list[str]:
        return sorted(self._plugins)

    @property
    def action_names(self) -> list[str]:
        return sorted(self._actions)

    def plugin(self, name: str) -> PluginSpec:
        try:
            return self._plugins[name]
        except KeyError:
            raise RegistryError(f"no plugin named {name!r}") from None

    def resolve(self, config: SchedulerConfiguration) -> ResolvedConfiguration:
        """Check every name and argument of ``config``; raise ConfigError on the first bad one."""
        plugins: list[ResolvedPlugin] = []
        seen: set[str] = set()
        for i, tier in enumerate(config.tiers):
            for j, p in enumerate(tier.plugins):
                where = f"tiers[{i}].plugins[{j}]"
                spec = self._plugins.get(p.name)
                if spec is None:
                    raise ConfigError(
                        KIND,
                        f"{where}.name",
                        f"unknown plugin {p.name!r}; known: {', '.join(self.plugin_names)}",
                    )
                if p.name in seen:
                    raise ConfigError(KIND, f"{where}.name", f"plugin {p.name!r} is listed twice")
                seen.add(p.name)
                args: object = build_arguments(spec.arguments, p.arguments, f"{where}.arguments")
                plugins.append(ResolvedPlugin(spec, args, i))
        actions: list[Action] = []
        emitted: set[type[Effect]] = set()
        for i, name in enumerate(config.actions):
            aspec = self._actions.get(name)
            if aspec is None:
                raise ConfigError(
                    KIND,
                    f"actions[{i}]",
                    f"unknown action {name!r}; known: {', '.join(self.action_names)}",
                )
            emitted.update(aspec.emits)
            raw: Mapping[str, Any] = config.action_arguments.get(name, {})
            actions.append(
                aspec.factory(build_arguments(aspec.arguments, raw, f"actionArguments.{name}"))
            )
        for name in config.action_arguments:
            if name not in config.actions:
                raise ConfigError(
                    KIND,
                    f"actionArguments.{name}",
                    "arguments for an action that is not in actions",
                )
        return ResolvedConfiguration(config, tuple(plugins), tuple(actions), frozenset(emitted))
