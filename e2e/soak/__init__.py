"""The soak (issue 26): an hour of chaos on a real API server, with work that never
stops and invariants checked on every watch event.

``e2e/test_soak.py`` runs it (two minutes in ``make e2e-real`` and CI; ``python -m bench
soak --minutes 60`` for the hour of docs/results/soak.md). It reuses the end-to-end harness
(:mod:`harness`: the cluster, the pod watch and its recorder, the fake kubelet, ``sluice
run`` subprocesses), the fault proxy (:mod:`fault_proxy`), the fake DRA driver and its
claims' watch (:mod:`dra_driver`) and the control plane's API-server restart
(:mod:`control_plane`). Its own parts, by what each does:

* :mod:`soak.settings`: duration, sizes, rates, fault rates, chaos intervals, limits;
* :mod:`soak.world`: nodes in zones and racks with devices, queues, priorities, a
  Topology, a PodDisruptionBudget;
* :mod:`soak.workload`: jobs of five kinds arriving, running, finishing, replaced pods;
* :mod:`soak.replicas`: the two replicas, kept alive, sampled, leader changes timed;
* :mod:`soak.chaos`: the API server, the leader and the proxy, struck on schedules;
* :mod:`soak.disturbances`: when the cluster was disturbed, since when it is settled;
* :mod:`soak.checks`: the invariants judged on every watch event;
* :mod:`soak.trends`: memory, tasks, sockets and throughput over time;
* :mod:`soak.run`: one soak wired together, and its report.
"""

from soak.run import run_soak
from soak.settings import SoakSettings

__all__ = ["SoakSettings", "run_soak"]
