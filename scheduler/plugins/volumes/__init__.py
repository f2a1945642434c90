"""Volumes: kube-scheduler's four volume plugins on the session (layer 2).

``volumebinding`` (:mod:`.volume_binding`: claims bound to PVs that admit the node, or matched
to one, or provisionable there; the PVs chosen held for the session and written before
the bind), ``volumezone`` (:mod:`.zone`: the zone of bound PVs), ``volumerestrictions``
(:mod:`.restrictions`: ReadWriteOncePod claims and inline disks used by one pod at a
time) and ``nodevolumelimits`` (:mod:`.limits`: CSI attach limits). Each reads the
snapshot's :class:`~scheduler.api.volumes.view.VolumeView`; a pod without claims or
inline disks is skipped by each at once. Their node computations are shared helpers:
:mod:`.rows` (which rows a PV, a class, a capacity admit) and :mod:`.matcher` (kube's
matching of claims to PVs, for every row at once).
"""

from scheduler.plugins.volumes.limits import NodeVolumeLimitsPlugin
from scheduler.plugins.volumes.restrictions import VolumeRestrictionsPlugin
from scheduler.plugins.volumes.volume_binding import VolumeBindingArguments, VolumeBindingPlugin
from scheduler.plugins.volumes.zone import VolumeZonePlugin

__all__ = [
    "NodeVolumeLimitsPlugin",
    "VolumeBindingArguments",
    "VolumeBindingPlugin",
    "VolumeRestrictionsPlugin",
    "VolumeZonePlugin",
]
