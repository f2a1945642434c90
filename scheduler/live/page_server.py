"""The live page on a port of its own (layer 4, live): ``sluice simulate --serve``, whose API
port is the embedded cluster's (``sluice run`` adds the routes to its metrics port
instead)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from scheduler.live.routes import add_routes
from scheduler.live.service import LivePage


@asynccontextmanager
async def serve_page(page: LivePage, port: int = 0, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``page`` on ``host:port`` (0: a free port) while the block runs; yields the
    page's address."""
    app = web.Application()
    add_routes(app, lambda: page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield f"http://{host}:{runner.addresses[0][1]}/ui"
    finally:
        await runner.cleanup()
