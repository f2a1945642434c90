"""The API server's Priority admission, for the API emulator (layer 4).

On the creation of a Pod the API server resolves its priority from its PriorityClass:
``spec.priorityClassName`` names the class (the two system classes always exist); a pod
without one gets the class marked ``globalDefault`` (the lowest value if several are),
or priority 0 when there is none. ``spec.priority`` and ``spec.preemptionPolicy`` are
then set from the class. A pod that names a class that does not exist, or gives a
priority or preemption policy that differs from its class's, is refused (403
Forbidden). Pure: the caller passes the PriorityClasses and maps the error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SYSTEM_CLASSES: dict[str, int] = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}
"""The classes every cluster has, with their values, as the API server creates them."""


class AdmissionError(Exception):
    """The pod is refused; the message is the API server's reason, after ``is forbidden:``."""


def admit_pod_priority(
    pod: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """``pod`` with ``spec.priority`` (and the class's fields) set, as a new dict.

    Raises AdmissionError when the pod names an unknown class or contradicts its class.
    """
    out = dict(pod)
    spec = dict(out.get("spec") or {})
    out["spec"] = spec
    by_name = {str((pc.get("metadata") or {}).get("name")): pc for pc in classes}
    name = str(spec.get("priorityClassName") or "")
    policy: str | None = None
    if not name:
        defaults = [pc for pc in by_name.values() if pc.get("globalDefault")]
        if defaults:
            chosen = min(defaults, key=lambda pc: int(pc.get("value", 0)))
            name = str(chosen["metadata"]["name"])
            spec["priorityClassName"] = name
            value = int(chosen.get("value", 0))
            policy = chosen.get("preemptionPolicy")
        else:
            value = 0
    elif name in by_name:
        value = int(by_name[name].get("value", 0))
        policy = by_name[name].get("preemptionPolicy")
    elif name in SYSTEM_CLASSES:
        value = SYSTEM_CLASSES[name]
    else:
        raise AdmissionError(f"no PriorityClass with name {name} was found")
    given = spec.get("priority")
    if given is not None and given != value:
        raise AdmissionError(
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {value} from the given PriorityClass name"
        )
    spec["priority"] = value
    if policy is not None:
        asked = spec.get("preemptionPolicy")
        if asked is not None and asked != policy:
            raise AdmissionError(
                f"the string value of PreemptionPolicy ({asked}) must not be provided in pod "
                f"spec; priority admission controller computed {policy} from the given "
                "PriorityClass name"
            )
        spec["preemptionPolicy"] = policy
    return out
