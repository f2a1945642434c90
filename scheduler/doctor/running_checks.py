"""``sluice doctor``'s checks of what runs (layer 5, doctor): who holds Sluice's Lease,
and whether another scheduler answers to the same ``schedulerName``.

**The Lease.** A replica of ``sluice run --leader-elect`` holds ``sluice-scheduler`` (a
shard ``sluice-scheduler-SHARD``) in the install namespace and renews it every 2 s or
so; one renewed within its duration is held, an older one was left by a replica that is
gone or cut off. A Lease ``sluice-scheduler`` held in another namespace is another
install of Sluice.

**Another scheduler.** There is no API that says which schedulers serve a
``schedulerName``: kube-scheduler's profiles live in its configuration file, and a
scheduler's Lease does not name them. What a scheduler leaves is Events: kube-scheduler
writes them as ``reportingController`` = the profile's schedulerName and
``reportingInstance`` = that name and its host (``NAME-HOST``); Sluice always writes
``reportingController: sluice`` and ``sluice-HOST``. So for ``schedulerName`` N the doctor
lists the Events reported by N (``reportingComponent`` or ``source`` N): when N is not
``sluice`` every one is another scheduler's; when it is, those of an instance that is not
one of this install's (its scheduler pods, and the hosts holding its Leases) are. It sees
only what Events remain: a scheduler that binds and writes events for N's pods within the
API server's event TTL (1 h by default). It cannot see one that has had nothing to do in
that time, one that writes no events, nor tell apart two processes on one host.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from scheduler.api.errors import ApiError
from scheduler.doctor.findings import Finding, Level
from scheduler.doctor.manifests import Install
from scheduler.doctor.server_checks import Probe

__all__ = ["check_lease", "check_other_schedulers", "lease_state"]

LEASE: Final = "sluice-scheduler"
_LEASES: Final = "/apis/coordination.k8s.io/v1"
_EVENT_SAMPLE: Final = 500


def _time(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def lease_state(lease: Mapping[str, Any], now: datetime.datetime) -> tuple[str, float | None, bool]:
    """(holder, seconds since its renewal, held): held when a holder renewed it within
    its ``leaseDurationSeconds``."""
    spec = lease.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = _time(str(spec.get("renewTime") or ""))
    age = None if renewed is None else (now - renewed).total_seconds()
    duration = float(spec.get("leaseDurationSeconds") or 15)
    return holder, age, bool(holder) and age is not None and age <= duration


async def check_lease(probe: Probe, install: Install, now: datetime.datetime) -> Finding:
    """Who holds Sluice's Lease(s) in the install namespace, and Sluice Leases held
    elsewhere."""
    try:
        listed = await probe.client.request(
            "GET", f"{_LEASES}/namespaces/{install.namespace}/leases"
        )
    except ApiError as exc:
        return Finding(
            "leader lease", Level.WARN, f"cannot list Leases in {install.namespace}: {exc}"
        )
    ours = [
        lease
        for lease in listed.get("items") or ()
        if lease["metadata"]["name"] == LEASE or lease["metadata"]["name"].startswith(f"{LEASE}-")
    ]
    held, stale = [], []
    for lease in sorted(ours, key=lambda x: x["metadata"]["name"]):
        holder, age, is_held = lease_state(lease, now)
        name = lease["metadata"]["name"]
        if is_held:
            held.append(f"{name} held by {holder}, renewed {age:.0f} s ago")
        elif holder and age is not None:
            stale.append(f"{name} last held by {holder}, not renewed for {age:.0f} s")
    elsewhere = await _held_elsewhere(probe, install.namespace, now)
    if stale:
        return Finding(
            "leader lease",
            Level.WARN,
            "; ".join(stale + held) + ": its holder is gone or cannot reach the API server",
            f"kubectl -n {install.namespace} get pods; a replica takes the Lease over once "
            "it expires",
        )
    if elsewhere:
        return Finding(
            "leader lease",
            Level.WARN,
            "another Sluice runs: "
            + "; ".join(elsewhere)
            + (f" (here: {'; '.join(held)})" if held else ""),
            "two installs with one schedulerName race for its pods: remove one, or give "
            "them different schedulerNames",
        )
    if held:
        return Finding("leader lease", Level.OK, "; ".join(held))
    return Finding(
        "leader lease",
        Level.OK,
        f"no Sluice holds a Lease in {install.namespace} (none runs yet, or none with "
        "--leader-elect)",
    )


async def _held_elsewhere(probe: Probe, namespace: str, now: datetime.datetime) -> list[str]:
    try:
        listed = await probe.client.request(
            "GET", f"{_LEASES}/leases", query=[("fieldSelector", f"metadata.name={LEASE}")]
        )
    except ApiError:
        return []
    out = []
    for lease in listed.get("items") or ():
        if lease["metadata"].get("namespace") == namespace:
            continue
        holder, age, is_held = lease_state(lease, now)
        if is_held:
            out.append(
                f"Lease {lease['metadata']['namespace']}/{LEASE} held by {holder}, renewed "
                f"{age:.0f} s ago"
            )
    return out


async def _own_instances(probe: Probe, install: Install) -> set[str]:
    """``reportingInstance`` values of this install's replicas that run now: ``sluice-HOST``
    for each scheduler pod (its host name is its pod's name) and each host holding one of
    the install namespace's Leases (``HOST_UUID``: a replica outside the cluster too).
    Replicas gone since are known by their pods' names (:func:`_own`)."""
    hosts: set[str] = set()
    selector = ",".join(f"{k}={v}" for k, v in sorted(install.scheduler_selector.items()))
    try:
        pods = await probe.client.request(
            "GET",
            f"/api/v1/namespaces/{install.namespace}/pods",
            query=[("labelSelector", selector)],
        )
        hosts.update(str(p["metadata"]["name"]) for p in pods.get("items") or ())
    except ApiError:
        pass
    try:
        leases = await probe.client.request(
            "GET", f"{_LEASES}/namespaces/{install.namespace}/leases"
        )
        for lease in leases.get("items") or ():
            holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
            if holder:
                hosts.add(holder.rsplit("_", 1)[0])
    except ApiError:
        pass
    return {f"sluice-{h}" for h in hosts}


def _own(instance: str, own: set[str], install: Install) -> bool:
    """An instance of this install: a replica running now, or one of the scheduler
    Deployment's pods (``sluice-<deployment>-<replicaset>-<pod>``, shards' too), gone
    since (a rollout leaves the old pods' events for an hour)."""
    return instance in own or instance.startswith(f"sluice-{install.scheduler_deployment}-")


def _reporter(event: Mapping[str, Any]) -> tuple[str, str]:
    """(controller, instance) of an Event as the core API shows it."""
    source = event.get("source") or {}
    controller = str(event.get("reportingComponent") or source.get("component") or "")
    instance = str(event.get("reportingInstance") or "")
    if not instance and source.get("host"):
        instance = f"{controller}-{source['host']}"
    return controller, instance


async def check_other_schedulers(probe: Probe, install: Install, scheduler_name: str) -> Finding:
    """Events reported by ``scheduler_name`` that this install did not write (the module's
    docstring says what this can and cannot see)."""
    events: dict[str, Mapping[str, Any]] = {}
    for selector in (f"reportingComponent={scheduler_name}", f"source={scheduler_name}"):
        try:
            listed = await probe.client.request(
                "GET",
                "/api/v1/events",
                query=[("fieldSelector", selector), ("limit", str(_EVENT_SAMPLE))],
            )
        except ApiError as exc:
            return Finding(
                "other schedulers",
                Level.WARN,
                f"cannot list Events: {exc}",
                "run as a user who may list events in every namespace",
            )
        for event in listed.get("items") or ():
            events[str(event["metadata"].get("uid") or id(event))] = event
    own = await _own_instances(probe, install) if scheduler_name == "sluice" else set()
    others: Counter[str] = Counter()
    example: dict[str, str] = {}
    for event in events.values():
        controller, instance = _reporter(event)
        if controller != scheduler_name or (
            scheduler_name == "sluice" and _own(instance, own, install)
        ):
            continue
        key = instance or controller
        others[key] += 1
        about = event.get("involvedObject") or {}
        what = f"{about.get('namespace', '')}/{about.get('name', '')}"
        example.setdefault(key, f"{event.get('reason', '?')} {what}")
    if others:
        who = "; ".join(f"{k}: {n} event(s), e.g. {example[k]}" for k, n in others.most_common(3))
        return Finding(
            "other schedulers",
            Level.WARN,
            f"another scheduler answers to {scheduler_name!r}: {who}",
            "two schedulers of one schedulerName race for its pods: stop the other (a "
            "kube-scheduler profile, Volcano's scheduler, another Sluice) or give Sluice "
            "another schedulerName in its configuration",
        )
    return Finding(
        "other schedulers",
        Level.OK,
        f"no scheduler but this Sluice reported events as {scheduler_name!r} "
        f"({len(events)} seen; events are kept about an hour)",
    )
