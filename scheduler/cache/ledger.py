"""The cache's ledger (layer 2): effects assumed before the API shows them, and forgotten
when their calls fail.

The pod state machine, as kube-scheduler's cache (each arrow an effect assumed, or
forgotten when its call failed, or an event)::

    pending ──assume Bind──▶ assumed (BINDING) ──event with nodeName──▶ bound/running
                                 ├──forget Bind (bind failed)──▶ pending
                                 └──bound elsewhere (409 naming another node)──▶
                                    assumed on that node, until an event shows it
    bound/running ──assume Evict──▶ releasing ──DELETED event──▶ gone
                                 └──forget Evict (eviction failed)──▶ running
    pending ──assume Nominate──▶ nominated (PIPELINED on the node)
                                 └──forget Nominate, assume ClearNomination──▶ pending

(Evict and Nominate are the parts of a Preemption or Dissolution effect, assumed in
decision order.) A Bind decided on an older snapshot does not move a pod the events
have shown on a node since.

An assumed pod uses its node at once, so the next cycle sees the room taken even before
the API call returns. What is assumed and not yet shown by the events is kept here
(in flight), and ingest asks :meth:`Ledger.keep_assumptions` on every pod event, so that
an event older than the write does not undo it; :meth:`Ledger.pod_gone` when a pod's
deletion is seen. The loop reaches it through :class:`~scheduler.cache.SchedulerCache`
(the :class:`~scheduler.framework.effects.EffectLedger` port). Nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.job import PodGroupPhase
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache.cluster_state import ClusterState
from scheduler.framework.effects import (
    Bind,
    ClearNomination,
    Dissolution,
    Effect,
    Evict,
    Nominate,
    Part,
    Preemption,
    SetPhase,
)


class Ledger:
    """Assumptions on :class:`~scheduler.cache.cluster_state.ClusterState`, and the work
    in flight that events must not undo."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._assumed_annotations: dict[str, tuple[str, ...]] = {}
        """Annotation keys assumed written on a binding pod, to drop if the bind fails."""
        self._evicting: set[str] = set()
        """Pods assumed releasing whose deletion has not shown in their events yet."""
        self._nominating: dict[str, str] = {}
        """Pods assumed nominated (uid -> node) whose nominatedNodeName has not shown yet."""

    # The EffectLedger port -----------------------------------------------------------------

    def assume(self, effect: Effect, /) -> Mapping[str, Sequence[TaskInfo]]:
        """:meth:`EffectLedger.assume <scheduler.framework.effects.EffectLedger.assume>`:
        the one entry through which the loop (and what it owns) assumes effects. A
        Preemption's parts are assumed in decision order: its evictions, then its
        nominations."""
        self._state.revision += 1
        match effect:
            case Bind():
                if self.assume_bind(effect.task.uid, effect.node, effect.annotations):
                    for binding in effect.claims:
                        self._state.dra.assume(binding)
                    if effect.volumes is not None:
                        self._state.volumes.assume(effect.task.uid, effect.volumes)
            case Preemption():
                for e in effect.evictions:
                    self.assume_evict(e.task.uid)
                displaced: dict[str, Sequence[TaskInfo]] = {}
                for n in effect.nominations:
                    self.assume_nomination(n.task.uid, n.node)
                    withdrawn = self._overflowing_below(n.node, n.task)
                    for t in withdrawn:
                        self.forget_nomination(t.uid)
                    if withdrawn:
                        displaced[n.task.uid] = withdrawn
                return displaced
            case Dissolution():
                for e in effect.evictions:
                    self.assume_evict(e.task.uid)
            case ClearNomination():
                self.forget_nomination(effect.task.uid)
            case SetPhase():
                self.assume_phase(effect.job.uid, effect.phase)
            case _:
                assert_never(effect)
        return {}

    def forget(self, effect: Effect | Part, /) -> None:
        """:meth:`EffectLedger.forget <scheduler.framework.effects.EffectLedger.forget>`.
        A phase, once written, is not forgotten (the PodGroup's status shows it next)."""
        self._state.revision += 1
        match effect:
            case Bind():
                for binding in effect.claims:
                    self._state.dra.forget(binding)
                if effect.volumes is not None:
                    self._state.volumes.forget(effect.task.uid, effect.volumes)
                self.forget_bind(effect.task.uid)
            case Evict():
                self.forget_evict(effect.task.uid)
            case Nominate():
                self.forget_nomination(effect.task.uid)
            case Preemption():
                for e in effect.evictions:
                    self.forget_evict(e.task.uid)
                for n in effect.nominations:
                    self.forget_nomination(n.task.uid)
            case Dissolution():
                for e in effect.evictions:
                    self.forget_evict(e.task.uid)
            case ClearNomination() | SetPhase():
                pass
            case _:
                assert_never(effect)

    def bound_elsewhere(self, effect: Bind, node: str, /) -> None:
        """:meth:`EffectLedger.bound_elsewhere
        <scheduler.framework.effects.EffectLedger.bound_elsewhere>`: the pod, still
        assumed (BINDING), moves to ``node``; the events then keep it there
        (:meth:`keep_assumptions`) until one shows it on a node or gone. What was
        assumed with the bind on ``effect.node`` (annotations, claims, volumes) is dropped, and
        its room there is news for the parked jobs, as a failed bind's is."""
        self._state.revision += 1
        for binding in effect.claims:
            self._state.dra.forget(binding)
        if effect.volumes is not None:
            self._state.volumes.forget(effect.task.uid, effect.volumes)
        uid = effect.task.uid
        task = self._state.tasks.get(uid)
        if task is None or task.status is not TaskStatus.BINDING:
            return  # the events show it on a node, or gone: they know better
        keys = self._assumed_annotations.pop(uid, ())
        if keys and task.annotations:
            task.annotations = {k: v for k, v in task.annotations.items() if k not in keys}
        task.nominated_node = ""
        self._state.move(uid, TaskStatus.BINDING, node)
        self._state.room_freed()

    def claim_written(self, binding: ClaimBinding, /) -> None:
        """:meth:`EffectLedger.claim_written
        <scheduler.framework.effects.EffectLedger.claim_written>`."""
        self._state.revision += 1
        self._state.dra.landed(binding)

    def holds(self, uid: str, /) -> bool:
        """:meth:`EffectLedger.holds <scheduler.framework.effects.EffectLedger.holds>`."""
        return uid in self._state.tasks

    def holds_devices(self, uid: str, /) -> bool:
        """:meth:`EffectLedger.holds_devices
        <scheduler.framework.effects.EffectLedger.holds_devices>`."""
        return self._state.dra.holds_devices(uid)

    def _overflowing_below(self, node: str, task: TaskInfo) -> list[TaskInfo]:
        """The pods of lower priority than ``task`` nominated to ``node`` that no longer
        fit there now that ``task`` is (KEP-4832), lowest priority first: taken off until
        the pods nominated to the node fit in what it will have once the pods leaving it
        are gone. None when they all fit: a cycle that nominates several pods to one node
        (a gang and the pods that fill the rest of the room being freed) counted each
        one's room; withdrawing the lower ones there would free room for others to take
        and make the gang evict again."""
        info = self._state.nodes.get(node)
        if info is None:
            return []
        lower = sorted(
            (
                t
                for t in info.tasks.values()
                if t.status is TaskStatus.PIPELINED
                and t.uid != task.uid
                and t.priority < task.priority
            ),
            key=lambda t: (t.priority, -t.creation, t.key),
        )
        room = info.future_idle
        out: list[TaskInfo] = []
        for t in lower:
            if not room.any_negative():
                break
            room = room + t.request
            out.append(t)
        return out

    # Each kind of assumption ---------------------------------------------------------------

    def assume_bind(
        self, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> bool:
        """The pod is being bound to ``node`` with ``annotations`` written on it (a device
        index): count it there, with them, from now on. Returns whether it was assumed:
        not when the events show the pod on a node already (a bind decided on a snapshot
        older than them: another replica bound it), nor gone."""
        task = self._state.tasks.get(uid)
        if task is None or task.status not in (TaskStatus.PENDING, TaskStatus.PIPELINED):
            return False
        if annotations:
            self._state.task_changed(uid)
            task.annotations = {**(task.annotations or {}), **annotations}
            self._assumed_annotations[uid] = tuple(annotations)
        self._state.move(uid, TaskStatus.BINDING, node)
        self._state.placed.note(task.namespace, task.labels)
        return True

    def forget_bind(self, uid: str) -> None:
        """A bind failed: the assumed pod is pending again (and will be retried). Its room
        is free again, news for the parked jobs as a deleted pod's is (a generation;
        kube-scheduler wakes its unschedulable pods when a bind fails, too)."""
        task = self._state.tasks.get(uid)
        if task is not None and task.status is TaskStatus.BINDING:
            task.nominated_node = ""
            keys = self._assumed_annotations.pop(uid, ())
            if keys and task.annotations:
                task.annotations = {k: v for k, v in task.annotations.items() if k not in keys}
            self._state.move(uid, TaskStatus.PENDING, "")
            self._state.room_freed()

    def assume_evict(self, uid: str) -> None:
        """The pod is being evicted: its room is releasing."""
        task = self._state.tasks.get(uid)
        if task is not None and task.status in (
            TaskStatus.BOUND,
            TaskStatus.RUNNING,
            TaskStatus.BINDING,
        ):
            self._evicting.add(uid)
            self._state.move(uid, TaskStatus.RELEASING, task.node_name)

    def forget_evict(self, uid: str, status: TaskStatus = TaskStatus.RUNNING) -> None:
        """An eviction failed: the pod holds its room again."""
        self._evicting.discard(uid)
        task = self._state.tasks.get(uid)
        if task is not None and task.eviction_in_flight:
            self._state.move(uid, status, task.node_name)

    def assume_nomination(self, uid: str, node: str) -> None:
        """The pod waits on ``node`` for room being freed (status.nominatedNodeName)."""
        task = self._state.tasks.get(uid)
        if (
            task is not None
            and task.status in (TaskStatus.PENDING, TaskStatus.PIPELINED)
            and node in self._state.nodes
        ):
            self._nominating[uid] = node
            task.nominated_node = node
            self._state.move(uid, TaskStatus.PIPELINED, node)

    def forget_nomination(self, uid: str) -> None:
        """A nomination is withdrawn: the pod is pending again."""
        self._nominating.pop(uid, None)
        task = self._state.tasks.get(uid)
        if task is not None and task.status is TaskStatus.PIPELINED:
            task.nominated_node = ""
            self._state.move(uid, TaskStatus.PENDING, "")

    def assume_phase(self, job_uid: str, phase: PodGroupPhase) -> None:
        """A PodGroup's new phase is being written: act on it from now on."""
        job = self._state.pod_groups.get(job_uid)
        if job is not None:
            job.phase = phase

    # What ingest asks on pod events --------------------------------------------------------

    def keep_assumptions(self, old: TaskInfo | None, task: TaskInfo) -> None:
        """``task`` is made from a pod's new event (``old``: the task before it). What was
        assumed and the event does not show yet still holds: written onto ``task``
        (before it is counted on its node); what the event shows ends being in flight."""
        if task.node_name or task.status is not TaskStatus.PENDING:
            self._nominating.pop(task.uid, None)
        if task.node_name:
            self._assumed_annotations.pop(task.uid, None)
        if task.terminating or task.status not in (TaskStatus.BOUND, TaskStatus.RUNNING):
            self._evicting.discard(task.uid)
        if (
            old is not None
            and old.status is TaskStatus.BINDING
            and not task.node_name
            and task.status is TaskStatus.PENDING
        ):
            task.status, task.node_name = TaskStatus.BINDING, old.node_name  # still assumed
            keys = self._assumed_annotations.get(task.uid, ())
            if keys and old.annotations:
                kept = {k: old.annotations[k] for k in keys if k in old.annotations}
                task.annotations = {**(task.annotations or {}), **kept}
        elif task.uid in self._evicting:
            task.status = TaskStatus.RELEASING
        elif task.status is TaskStatus.PENDING and task.sluice:
            node = task.nominated_node or self._nominating.get(task.uid, "")
            if node in self._state.nodes:  # a nomination to a node that is gone holds nothing
                task.nominated_node = node
                task.status, task.node_name = TaskStatus.PIPELINED, node

    def pod_gone(self, uid: str) -> None:
        """The pod's deletion was seen: nothing of it is in flight any more."""
        self._evicting.discard(uid)
        self._nominating.pop(uid, None)
        self._assumed_annotations.pop(uid, None)
