"""``sluice run``'s live page (issue 27 point 1) in headless Chromium, against the API
server: served on the metrics port beside ``/metrics``, it shows what the API shows (the
run's queue status, the pending pod's condition, the pods on each node, the victims of a
preemption), explains a pending pod on a click, and ``--no-ui`` turns it off. On a real
cluster the port is guarded (issue 40 item 4): the page's HTML loads, its data is refused
until the viewer gives a token RBAC allows in the page's form."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from harness import Cluster, NodeSpec, condition, node_of, pod_requests, wait_for

from tests.browser import CHROMIUM, chromium

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install chromium`"),
]

SHOWN = """(() => {
  const text = (r, c) => (r.querySelector(c) || {textContent: ""}).textContent;
  return {
    cycle: Number(document.getElementById("status").dataset.cycle || -1),
    queues: Object.fromEntries([...document.querySelectorAll("#queues tr.queue")].map((r) =>
      [r.dataset.queue, {deserved: text(r, ".deserved"), allocated: text(r, ".allocated")}])),
    jobs: Object.fromEntries([...document.querySelectorAll("#queues tr.job")].map((r) =>
      [r.dataset.job, text(r, ".reason .why")])),
    nodes: Object.fromEntries([...document.querySelectorAll("#nodes tr.node")].map((r) =>
      [r.dataset.node, text(r, ".cpu")])),
    victims: [...document.querySelectorAll("#decisions tr.decision")].flatMap((r) =>
      text(r, ".victims").split(", ")),
  };
})()"""


def _quantities(text: str) -> dict[str, str]:
    return {} if text in ("—", "") else dict(p.split(" ", 1) for p in text.split(", "))


def _cpu(text: str) -> Decimal:
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)


async def test_the_page_of_sluice_run_shows_what_the_api_shows(
    cluster: Cluster, start_scheduler: Any
) -> None:
    nodes = await cluster.create_nodes(2, NodeSpec(cpu="2"))
    queue = await cluster.create_queue("team")
    low = await cluster.create_priority_class("low", 100)
    high = await cluster.create_priority_class("high", 10_000)
    sluice = await start_scheduler()
    fill = ["low-0", "low-1", "low-2", "low-3"]
    await cluster.create_pods(fill, cpu="1", priority=low, queue=queue)
    await wait_for(lambda: cluster.all_running(fill), timeout=30, what="the low pods Running")
    await cluster.create_pod("urgent", cpu="1", priority=high, queue=queue)
    await cluster.create_pod("huge", cpu="3", priority=low, queue=queue)
    await wait_for(
        lambda: node_of(cluster.pod("urgent") or {}) != "",
        timeout=30,
        what="the preemptor bound",
        detail=cluster.describe_pods,
    )

    def huge_says_why() -> bool:
        c = condition(cluster.pod("huge") or {}, "PodScheduled")
        return c is not None and c.get("status") == "False"

    await wait_for(huge_says_why, timeout=30, what="huge's PodScheduled=False")

    async with (
        chromium() as browser,
        browser.open(f"{sluice.url}/ui?refresh=1") as tab,
    ):
        if sluice.port_token is not None:  # the guarded port: the page asks for a token
            why = await tab.wait_for(
                "!document.getElementById('token-form').hidden && "
                "document.getElementById('token-why').textContent"
            )
            assert "without a token" in why
            await tab.evaluate(
                f"document.getElementById('token-input').value = {sluice.port_token!r}; "
                "document.querySelector('#token-form button').click()"
            )
        victims = [h.name for h in map(cluster.recorder.history, fill) if h and h.deleted]
        assert len(victims) == 1, cluster.describe_pods()

        async def settled() -> dict[str, Any]:
            """The page once its queue row matches the Queue's status (both written from
            the same cycle; the status lands a moment after the cycle)."""
            huge = f"{cluster.namespace}/huge"
            shown: dict[str, Any] = await tab.wait_for(
                f"(() => {{ const s = {SHOWN}; return s.cycle > 0 && s.jobs['{huge}'] && s; }})()"
            )
            status = (await cluster.get_queue(queue) or {}).get("status") or {}
            row = shown["queues"].get(queue, {})
            if _quantities(row.get("allocated", "")) == status.get("allocated") and _quantities(
                row.get("deserved", "")
            ) == status.get("deserved"):
                return shown
            return {}

        shown = await wait_for(settled, timeout=30, what="the page and the Queue's status agree")
        huge = cluster.pod("huge") or {}
        message = (condition(huge, "PodScheduled") or {}).get("message")
        assert shown["jobs"][f"{cluster.namespace}/huge"] == message
        pods = await cluster.list_pods()
        for node in nodes:
            used = sum(
                (pod_requests(p).get("cpu", Decimal(0)) for p in pods if node_of(p) == node),
                Decimal(0),
            )
            assert _cpu(shown["nodes"][node].split(" / ")[0]) == used, node
        assert f"{cluster.namespace}/{victims[0]}" in shown["victims"]

        await tab.click(f"#queues tr.job[data-job='{cluster.namespace}/huge'] a.explain-link")
        text = await tab.wait_for(
            "document.getElementById('explain').dataset.loaded && "
            "document.querySelector('#explain pre.explain-text')?.textContent"
        )
        assert text.startswith(f"pod {cluster.namespace}/huge ")
        assert "Insufficient cpu" in text


async def test_no_ui_turns_the_page_off(cluster: Cluster, start_scheduler: Any) -> None:
    sluice = await start_scheduler(extra_args=["--no-ui"])
    assert (await sluice.http_get("/ui"))[0] == 404
    assert (await sluice.http_get("/metrics"))[0] == 200
    on = await start_scheduler()
    status, body = await on.http_get("/ui")
    assert status == 200 and "<title>" in body
