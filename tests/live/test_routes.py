"""The live page's routes (issue 27 point 1): the page itself, its JSON, the explanation
of a job, and what they answer before the scheduler has a loop, or for what is not there."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from scheduler.live import LivePage, add_routes
from scheduler.live.page_server import serve_page
from tests.builders import node, pod
from tests.live.loops import loop_of, running

pytestmark = pytest.mark.anyio


async def _get(url: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        body = await r.text()
        kind = r.headers.get("Content-Type", "")
        return r.status, kind, body


async def test_the_page_its_state_and_explanations() -> None:
    loop = loop_of(node("n1", cpu="2"), pod("big", cpu="4"))
    page = LivePage(loop)
    async with running(loop), serve_page(page) as url:
        await loop.run_cycle()
        status, kind, body = await _get(url)
        assert status == 200 and kind.startswith("text/html")
        assert "<script" in body and 'src="http' not in body  # self-contained
        status, _, body = await _get(f"{url}/state")
        assert status == 200 and '"cycle":1' in body
        status, _, body = await _get(f"{url}/explain?kind=pod&name=default/big")
        assert status == 200 and '"Insufficient cpu"' in body
        status, _, body = await _get(f"{url}/explain?kind=pod&name=default/nope")
        assert status == 404 and "pod default/nope: not found" in body
        status, _, body = await _get(f"{url}/explain?kind=pod")
        assert status == 400
        status, _, body = await _get(f"{url}/explain?kind=node&name=n1")
        assert status == 404 and "must be one of pod, podgroup" in body


async def test_before_the_loop_exists_the_json_routes_say_so() -> None:
    app = web.Application()
    add_routes(app, lambda: None)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/ui"
        assert (await _get(base))[0] == 200
        status, _, body = await _get(f"{base}/state")
        assert status == 503 and "caches are not synced" in body
        assert (await _get(f"{base}/explain?kind=pod&name=a/b"))[0] == 503
    finally:
        await runner.cleanup()
