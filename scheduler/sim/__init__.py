"""Layer 4: the embedded cluster.

An in-memory API server (:mod:`.store`, :mod:`.patch`), a virtual clock that makes a run
deterministic and instant in wall time (:mod:`.virtual_time`), a simulated kubelet
(:mod:`.kubelet`), per-call latency and fault injection (:mod:`.faults`,
:mod:`.durations`), and the scheduler's ports implemented over the store
(:mod:`.backend`). It is the default cluster of ``sluice simulate``, the substrate of the
benchmarks and of most tests.
"""
