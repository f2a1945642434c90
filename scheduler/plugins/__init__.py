"""Layer 2: plugins answer the questions actions ask.

Nothing registers itself: :func:`register_builtin` fills a registry explicitly.
"""

from __future__ import annotations

from scheduler.framework.registry import PluginSpec, Registry
from scheduler.plugins.conformance import ConformancePlugin
from scheduler.plugins.dra import DraPlugin
from scheduler.plugins.drf import DrfArguments, DrfPlugin
from scheduler.plugins.gang import GangPlugin
from scheduler.plugins.gpushare import GpuSharePlugin
from scheduler.plugins.interpodaffinity import InterPodAffinityArguments, InterPodAffinityPlugin
from scheduler.plugins.nodeorder import NodeOrderArguments, NodeOrderPlugin
from scheduler.plugins.overcommit import OvercommitArguments, OvercommitPlugin
from scheduler.plugins.predicates import PredicatesPlugin
from scheduler.plugins.priority import PriorityPlugin
from scheduler.plugins.proportion import ProportionPlugin
from scheduler.plugins.reservation import ReservationPlugin
from scheduler.plugins.spread import PodTopologySpreadArguments, PodTopologySpreadPlugin
from scheduler.plugins.topology import TopologyPlugin
from scheduler.plugins.volumes import (
    NodeVolumeLimitsPlugin,
    VolumeBindingArguments,
    VolumeBindingPlugin,
    VolumeRestrictionsPlugin,
    VolumeZonePlugin,
)


def register_builtin(registry: Registry) -> None:
    """Register every plugin shipped with Sluice."""
    registry.add_plugin(PluginSpec("priority", PriorityPlugin))
    registry.add_plugin(PluginSpec("gang", GangPlugin))
    registry.add_plugin(PluginSpec("conformance", ConformancePlugin))
    registry.add_plugin(PluginSpec("predicates", PredicatesPlugin))
    registry.add_plugin(
        PluginSpec("podtopologyspread", PodTopologySpreadPlugin, PodTopologySpreadArguments)
    )
    registry.add_plugin(
        PluginSpec("interpodaffinity", InterPodAffinityPlugin, InterPodAffinityArguments)
    )
    registry.add_plugin(PluginSpec("proportion", ProportionPlugin))
    registry.add_plugin(PluginSpec("nodeorder", NodeOrderPlugin, NodeOrderArguments))
    registry.add_plugin(PluginSpec("gpushare", GpuSharePlugin))
    registry.add_plugin(PluginSpec("dra", DraPlugin))
    registry.add_plugin(PluginSpec("topology", TopologyPlugin))
    registry.add_plugin(PluginSpec("reservation", ReservationPlugin))
    registry.add_plugin(PluginSpec("overcommit", OvercommitPlugin, OvercommitArguments))
    registry.add_plugin(PluginSpec("drf", DrfPlugin, DrfArguments))
    registry.add_plugin(PluginSpec("volumerestrictions", VolumeRestrictionsPlugin))
    registry.add_plugin(PluginSpec("nodevolumelimits", NodeVolumeLimitsPlugin))
    registry.add_plugin(PluginSpec("volumebinding", VolumeBindingPlugin, VolumeBindingArguments))
    registry.add_plugin(PluginSpec("volumezone", VolumeZonePlugin))
