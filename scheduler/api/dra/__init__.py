"""Dynamic Resource Allocation (``resource.k8s.io/v1``) in the domain model (layer 0).

ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates as frozen values
(:mod:`.model`), converted from API JSON (:mod:`.codec`); the devices every node can
reach (:mod:`.inventory`); CEL selectors compiled once each (:mod:`.cel_selectors`); and the
structured allocator that picks devices for a pod's claims on one node (:mod:`.allocator`).
All pure: no I/O, no clock.
"""
