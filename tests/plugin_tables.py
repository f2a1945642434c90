"""One plugin's answers for one pod on a scenario's cluster as it stands at time 0: what
the ``plugin`` expectation of a scenario checks (tests/test_scenarios.py), for the peers'
plugin test tables (kube-scheduler's filter and score tables).

The scenario's objects are loaded as ``sluice explain`` loads a scenario file, a session
is opened on them with the scenario's configuration, and the named plugin's own hooks are
asked, alone (as a peer's plugin test asks its plugin alone)::

    plugin:
      name: podtopologyspread
      pod: default/p
      filter: {node-a: Success, node-b: Unschedulable, node-c: UnschedulableAndUnresolvable}
      reasons: {node-b: "node(s) didn't match pod topology spread constraints"}
      scores: {node-a: 100, node-b: 0}   # the nodes scored, in this order, and their scores

``filter``: the plugin's verdict on every listed node (Success when it rejects the node
for no reason, or registered no filter; else the code of the first rejection charged to
it). ``scores``: the plugin's score hook asked for exactly the listed nodes (the ones the
peer's table scores), normalised over them as the plugin does; 0 for each when the plugin
registered no score in that session (it had nothing to score).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from scheduler import app
from scheduler.cache import SchedulerCache
from scheduler.cli.explain import from_scenario
from scheduler.config import SchedulerConfiguration
from scheduler.framework.extension_points import NODE_FILTER, NODE_SCORER
from scheduler.framework.session import Session, open_session
from scheduler.sim.scenario import OBJECT_KINDS

SUCCESS = "Success"
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"


def open_scenario(docs: list[Any]) -> Session:
    """A session on the objects of ``docs`` present at time 0."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        listed, config = from_scenario([str(path)])
    config = config or SchedulerConfiguration()
    cache = SchedulerCache(config.scheduler_name, wait_for_pod_grouper=False)
    for kind in OBJECT_KINDS:
        for obj in listed.get(kind, ()):
            cache.handle(kind, "ADDED", obj)
    return open_session(cache.snapshot(), app.resolve(config))


def check_plugin(spec: dict[str, Any], docs: list[Any]) -> None:
    """The ``plugin`` expectation (module docstring) holds."""
    session = open_scenario(docs)
    try:
        name = spec["name"]
        key = spec["pod"]
        task = next(
            (t for j in session.jobs.values() for t in j.tasks.values() if t.key == key), None
        )
        assert task is not None, f"no pod {key} in the scenario"
        table = session.table
        if "filter" in spec or "reasons" in spec:
            hooks = [r.hook for r in session.hooks[NODE_FILTER] if r.plugin == name]
            # A plugin that registered no filter (nothing to filter) passes every node.
            rejections = hooks[0](task, table, False) if hooks else []
            verdicts: dict[str, str] = {}
            reasons: dict[str, str] = {}
            for node in spec.get("filter") or spec["reasons"]:
                row = table.row[node]
                first = next((r for r in rejections if r.nodes[row]), None)
                if first is None:
                    verdicts[node] = SUCCESS
                else:
                    verdicts[node] = UNSCHEDULABLE if first.resolvable else UNRESOLVABLE
                reasons[node] = "" if first is None else first.reason
            if "filter" in spec:
                assert verdicts == spec["filter"], verdicts
            for node, reason in (spec.get("reasons") or {}).items():
                assert reasons[node] == reason, (node, reasons[node])
        if "scores" in spec:
            scorers = [r.hook for r in session.hooks[NODE_SCORER] if r.plugin == name]
            nodes = list(spec["scores"])
            rows = np.array([table.row[n] for n in nodes], dtype=np.intp)
            # A plugin that registered no score (nothing to score) scores 0 everywhere.
            got = scorers[0](task, table, rows, False) if scorers else np.zeros(len(rows))
            scores = {n: int(s) for n, s in zip(nodes, got, strict=True)}
            assert scores == spec["scores"], scores
    finally:
        session.close()
