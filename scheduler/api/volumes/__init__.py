"""Storage as the scheduler reads it (layer 0): PersistentVolumeClaims, PersistentVolumes,
StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities (``model``, read by
``convert``), a pod's volumes (``refs``, parsed with its spec), what one cycle sees of
them (``view``) and kube-scheduler's rules for matching claims to volumes (``matching``).

Kept free of imports so that :mod:`scheduler.api.pod` can use ``refs``.
"""
