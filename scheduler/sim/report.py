"""A picture of a run: ``sluice simulate --report run.html`` (layer 4, sim).

:class:`RunRecorder` watches a :class:`~scheduler.sim.runner.Simulation` (its store for
each pod's queue and priority, its loop for the pending pods and the queues' shares after
every cycle); :func:`render` turns what it saw and the run's timeline into one
self-contained HTML file: inline CSS and SVG, no script, nothing fetched when it is
viewed. It shows, on one time axis:

* per node, a bar for each pod from its bind (or from its arrival, for a pod that
  arrives bound: a scenario's running pods, a snapshot's) to its end (completed, deleted
  or evicted), coloured by queue; a victim's bar ends with a red mark, and each
  preemption or reclaim is a red triangle on the preemptor's node at the time it was
  decided (its title names the victims);
* each preemptor's gate: from the decision to its bind, while its calls ran and its
  victims went;
* per queue, the CPU it held (solid) and deserved (dashed) after each cycle;
* the pending pods after each cycle;
* per node, its DRA devices (from its ResourceSlices) and the pods that held each one
  during the run (a claim allocated with the device and reserved for the pod).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.api import labels as L
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.store import WatchEvent

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
)
WIDTH = 960
LEFT = 110
ROW = 22


@dataclass
class RunRecorder:
    """What the report needs beyond the timeline, collected while the run goes on."""

    clock_origin: Callable[[], float]
    queue_of: dict[str, str] = field(default_factory=dict)
    """Pod key -> its queue (its PodGroup's, or its label's)."""
    group_queue: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[float, dict[str, float], dict[str, float], int]] = field(
        default_factory=list
    )
    """(time, CPU held per queue, CPU deserved per queue, pending pods) after each cycle."""
    devices: dict[str, list[str]] = field(default_factory=dict)
    """Node -> its DRA devices (``driver/pool/device``), as its ResourceSlices say."""
    holders: dict[str, list[str]] = field(default_factory=dict)
    """Device -> the pods that held it during the run, in order."""
    now: Callable[[], float] | None = None
    """The run's clock; with it, pods that arrive already bound (a scenario's running
    pods, a cluster's snapshot) are drawn from their arrival."""
    arrived_bound: list[tuple[str, str, float]] = field(default_factory=list)
    """(pod, node, time from the start) of each pod that arrived already bound."""

    def on_store(self, ev: WatchEvent) -> None:
        meta = ev.obj.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if ev.kind == "PodGroup" and ev.type == "ADDED":
            self.group_queue[key] = str((ev.obj.get("spec") or {}).get("queue") or L.DEFAULT_QUEUE)
        elif ev.kind == "Pod" and ev.type == "ADDED":
            labels = meta.get("labels") or {}
            group = labels.get(L.POD_GROUP_LABEL)
            queue = labels.get(L.QUEUE_LABEL)
            if group:
                queue = self.group_queue.get(f"{meta.get('namespace', '')}/{group}", queue)
            self.queue_of[key] = str(queue or L.DEFAULT_QUEUE)
            node = (ev.obj.get("spec") or {}).get("nodeName")
            if node and self.now is not None:
                self.arrived_bound.append((key, str(node), self.now() - self.clock_origin()))
        elif ev.kind == "ResourceSlice" and ev.type != "DELETED":
            spec = ev.obj.get("spec") or {}
            node = spec.get("nodeName") or ("all nodes" if spec.get("allNodes") else "by selector")
            pool = (spec.get("pool") or {}).get("name", "")
            names = [
                f"{spec.get('driver')}/{pool}/{d.get('name')}" for d in spec.get("devices") or ()
            ]
            have = self.devices.setdefault(str(node), [])
            have.extend(n for n in names if n not in have)
        elif ev.kind == "ResourceClaim" and ev.type != "DELETED":
            status = ev.obj.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
            ns = meta.get("namespace", "")
            for r in results:
                device = f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                held = self.holders.setdefault(device, [])
                for c in status.get("reservedFor") or ():
                    pod = f"{ns}/{c.get('name')}"
                    if pod not in held:
                        held.append(pod)

    def on_cycle(self, report: CycleReport, registry: Any, pending: int) -> None:
        held: dict[str, float] = {}
        deserved: dict[str, float] = {}
        for family in registry.collect():
            if family.name not in ("scheduler_queue_allocated", "scheduler_queue_deserved"):
                continue
            into = held if family.name == "scheduler_queue_allocated" else deserved
            for s in family.samples:
                if s.labels.get("resource") == "cpu":
                    into[s.labels["queue"]] = s.value
        self.samples.append((report.started - self.clock_origin(), held, deserved, pending))


@dataclass
class _Bar:
    pod: str
    node: str
    start: float
    end: float | None = None
    evicted: bool = False


def _bars(
    timeline: list[dict[str, Any]], arrived_bound: Sequence[tuple[str, str, float]] = ()
) -> list[_Bar]:
    """A bar per pod from its bind (or, for a pod that arrived bound, its arrival) to its
    end."""
    bars: list[_Bar] = [_Bar(pod, node, t) for pod, node, t in arrived_bound]
    open_: dict[str, _Bar] = {b.pod: b for b in bars}
    for e in timeline:
        kind, pod = e["event"], e.get("pod")
        if kind == "bind" and pod:
            bar = _Bar(pod, e["node"], e["t"])
            open_[pod] = bar
            bars.append(bar)
        elif kind in ("delete", "evict", "completed", "depart") and pod in open_:
            bar = open_.pop(pod)
            bar.end = e["t"]
            bar.evicted = kind in ("delete", "evict")
    return bars


def render(title: str, result: Any, recorder: RunRecorder) -> str:
    """The report of a finished run (``result``: its SimulationResult) as HTML."""
    timeline: list[dict[str, Any]] = result.timeline
    end = max([result.seconds, *(e["t"] for e in timeline)], default=1.0) or 1.0
    scale = (WIDTH - LEFT - 10) / end

    def x(t: float) -> float:
        return LEFT + t * scale

    queues = sorted({*recorder.queue_of.values(), *(q for s in recorder.samples for q in s[1])})
    color = {q: PALETTE[i % len(PALETTE)] for i, q in enumerate(queues)}
    bars = _bars(timeline, recorder.arrived_bound)
    nodes = sorted({b.node for b in bars} | {e["node"] for e in timeline if e.get("node")})
    parts = [_head(title), _summary(result), _legend(color)]
    parts.append(
        _nodes_svg(nodes, bars, timeline=timeline, recorder=recorder, color=color, x=x, end=end)
    )
    parts.append(_gates_svg(timeline, x, end))
    parts.append(_series_svg(recorder, color, x, end))
    if recorder.devices:
        parts.append(_devices_table(recorder))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _head(title: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 20px; color: #222; }}
h1 {{ font-size: 18px; }} h2 {{ font-size: 15px; margin-top: 24px; }}
.legend span {{ display: inline-block; margin-right: 14px; }}
.legend i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px;
  vertical-align: -2px; }}
svg text {{ font-size: 11px; }}
</style></head><body>
<h1>{html.escape(title)}</h1>"""


def _summary(result: Any) -> str:
    return (
        f'<p class="summary">{result.cycles} cycles over {result.seconds:g} s; '
        f"{len(result.bindings)} pods bound, {len(result.evictions)} evicted, "
        f"{len(result.pending)} pending; stopped by {html.escape(str(result.stopped_by))}.</p>"
    )


def _legend(color: Mapping[str, str]) -> str:
    items = "".join(
        f'<span><i style="background:{c}"></i>queue {html.escape(q)}</span>'
        for q, c in color.items()
    )
    return (
        f'<p class="legend">{items}<span><i style="background:#d62728"></i>'
        "preemption or reclaim, victim's end</span></p>"
    )


def _devices_table(recorder: RunRecorder) -> str:
    """Per node, each DRA device and the pods that held it during the run."""
    rows = []
    for node in sorted(recorder.devices):
        for device in recorder.devices[node]:
            held = ", ".join(recorder.holders.get(device, ())) or "-"
            rows.append(
                f"<tr><td>{html.escape(node)}</td><td>{html.escape(device)}</td>"
                f"<td>{html.escape(held)}</td></tr>"
            )
    return (
        '<h2>Devices</h2><table class="devices"><tr><th>node</th><th>device</th>'
        f"<th>held by</th></tr>{''.join(rows)}</table>"
    )


def _axis(x: Callable[[float], float], end: float, y: float) -> str:
    step = max(1, round(end / 10))
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{x(end):.1f}" y2="{y}" stroke="#999"/>']
    t = 0
    while t <= end:
        out.append(f'<text x="{x(t):.1f}" y="{y + 14}" text-anchor="middle">{t:g}s</text>')
        t += step
    return "".join(out)


def _nodes_svg(
    nodes: list[str],
    bars: list[_Bar],
    *,
    timeline: list[dict[str, Any]],
    recorder: RunRecorder,
    color: Mapping[str, str],
    x: Callable[[float], float],
    end: float,
) -> str:
    lanes: dict[str, list[list[_Bar]]] = {n: [] for n in nodes}
    for bar in bars:
        lanes_of = lanes.setdefault(bar.node, [])
        for lane in lanes_of:
            last = lane[-1]
            if last.end is not None and last.end <= bar.start:
                lane.append(bar)
                break
        else:
            lanes_of.append([bar])
    rows: list[str] = []
    y = 10
    row_of: dict[str, float] = {}
    for node in nodes:
        height = max(1, len(lanes[node])) * 6 + 10
        row_of[node] = y
        rows.append(f'<text x="4" y="{y + height / 2 + 4}" class="node">{html.escape(node)}</text>')
        rows.append(
            f'<rect x="{LEFT}" y="{y}" width="{x(end) - LEFT:.1f}" height="{height}" '
            'fill="#f6f6f6"/>'
        )
        for i, lane in enumerate(lanes[node]):
            for bar in lane:
                stop = bar.end if bar.end is not None else end
                fill = color.get(recorder.queue_of.get(bar.pod, ""), "#888")
                rows.append(
                    f'<rect class="pod" x="{x(bar.start):.1f}" y="{y + 5 + i * 6}" '
                    f'width="{max(1.0, x(stop) - x(bar.start)):.1f}" height="5" fill="{fill}">'
                    f"<title>{html.escape(bar.pod)} on {html.escape(bar.node)}: "
                    f"{bar.start:g}s to {stop:g}s</title></rect>"
                )
                if bar.evicted:
                    rows.append(
                        f'<rect class="victim" x="{x(stop) - 2:.1f}" y="{y + 4 + i * 6}" '
                        f'width="3" height="7" fill="#d62728"/>'
                    )
        y += height + 4
    for e in timeline:
        if e["event"] in ("preempt", "reclaim", "dissolve") and e.get("node") in row_of:
            cx, cy = x(e["t"]), row_of[e["node"]]
            victims = ", ".join(e.get("victims") or ()) or "none"
            what = (
                "what was left of a gang below its minimum"
                if e["event"] == "dissolve"
                else html.escape(str(e["pod"]))
            )
            rows.append(
                f'<path class="{e["event"]}" d="M{cx - 5:.1f},{cy - 2} L{cx + 5:.1f},{cy - 2} '
                f'L{cx:.1f},{cy + 7} Z" fill="#d62728"><title>{e["event"]} for '
                f"{what} at {e['t']:g}s: victims {html.escape(victims)}</title></path>"
            )
    rows.append(_axis(x, end, y + 4))
    return (
        f'<h2>Nodes</h2><svg class="nodes" width="{WIDTH}" height="{y + 24}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(rows)}</svg>'
    )


def _gates_svg(timeline: list[dict[str, Any]], x: Callable[[float], float], end: float) -> str:
    decided: dict[str, float] = {}
    bound: dict[str, float] = {}
    for e in timeline:
        if e["event"] in ("preempt", "reclaim") and e.get("victims"):
            decided.setdefault(str(e["pod"]), e["t"])
        elif e["event"] == "bind" and e.get("pod") in decided:
            bound.setdefault(str(e["pod"]), e["t"])
    if not decided:
        return "<h2>Preemption gates</h2><p>No preemption in this run.</p>"
    rows: list[str] = []
    y = 6
    for pod, t0 in sorted(decided.items(), key=lambda kv: (kv[1], kv[0])):
        t1 = bound.get(pod, end)
        rows.append(f'<text x="4" y="{y + 10}">{html.escape(pod.split("/")[-1])}</text>')
        rows.append(
            f'<rect class="gate" x="{x(t0):.1f}" y="{y + 2}" '
            f'width="{max(1.0, x(t1) - x(t0)):.1f}" height="10" fill="#bbb">'
            f"<title>{html.escape(pod)}: gated from {t0:g}s, bound at {t1:g}s</title></rect>"
        )
        y += ROW - 6
    rows.append(_axis(x, end, y + 4))
    return (
        "<h2>Preemption gates</h2><p>Each preemptor from the decision to its bind: its "
        "calls run and its victims go while the rest of the cluster is scheduled.</p>"
        f'<svg class="gates" width="{WIDTH}" height="{y + 24}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(rows)}</svg>'
    )


def _series_svg(
    recorder: RunRecorder, color: Mapping[str, str], x: Callable[[float], float], end: float
) -> str:
    samples = recorder.samples
    if not samples:
        return ""
    height = 140
    top = max(
        [
            1.0,
            *(v for s in samples for v in s[1].values()),
            *(v for s in samples for v in s[2].values()),
        ]
    )
    most = max(1, *(s[3] for s in samples))

    def line(points: list[tuple[float, float]], stroke: str, dash: str, cls: str) -> str:
        if not points:
            return ""
        path = " ".join(f"{x(t):.1f},{height - v:.1f}" for t, v in points)
        return (
            f'<polyline class="{cls}" points="{path}" fill="none" stroke="{stroke}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>'
        )

    shares: list[str] = []
    for queue, c in color.items():
        held = [(t, h.get(queue, 0.0) / top * (height - 10)) for t, h, _, _ in samples]
        deserved = [(t, d.get(queue, 0.0) / top * (height - 10)) for t, _, d, _ in samples]
        shares.append(line(held, c, "none", "held"))
        shares.append(line(deserved, c, "4 3", "deserved"))
    pending = line(
        [(t, p / most * (height - 10)) for t, _, _, p in samples], "#444", "none", "pending"
    )
    return (
        f"<h2>Queue shares (CPU cores: held solid, deserved dashed; top {top:g})</h2>"
        f'<svg class="shares" width="{WIDTH}" height="{height + 24}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(shares)}{_axis(x, end, height + 2)}</svg>'
        f"<h2>Pending pods (top {most})</h2>"
        f'<svg class="pending" width="{WIDTH}" height="{height + 24}" '
        f'xmlns="http://www.w3.org/2000/svg">{pending}{_axis(x, end, height + 2)}</svg>'
    )
