"""Headless Chromium driven over the DevTools protocol, for the tests of pages that run a
script (the live page): open a page, evaluate JavaScript in it, wait for what it draws,
click. Debian's ``chromium`` (``.ci/run`` installs it); :data:`CHROMIUM` is None without
it, and the tests that need it skip.

Used by ``tests/live`` and the e2e suite (``e2e/test_live_page.py``), which reach it as
``tests.browser`` through the editable install's path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from itertools import count
from typing import Any

import aiohttp
import anyio

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-allow-origins=*",
    # sluice run's guarded port serves a self-made certificate
    "--ignore-certificate-errors",
)


class BrowserError(Exception):
    """The page's script raised, or the browser said no."""


class Page:
    """One tab, spoken to over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = count(1)

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        await self._ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = await self._ws.receive()
            if msg.type is not aiohttp.WSMsgType.TEXT:
                raise BrowserError(f"the browser closed the connection ({msg.type})")
            reply = json.loads(msg.data)
            if reply.get("id") == n:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited)."""
        result = await self._call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return (result.get("result") or {}).get("value")

    async def wait_for(self, expression: str, *, timeout: float = 30.0) -> Any:
        """Evaluate ``expression`` every 0.1 s until it is truthy; returns its value.
        Raises TimeoutError with the page's text when it never is."""
        with anyio.move_on_after(timeout):
            while True:
                value = await self.evaluate(expression)
                if value:
                    return value
                await anyio.sleep(0.1)
        text = await self.evaluate("document.body.innerText")
        raise TimeoutError(f"{expression} never held; the page says:\n{text}")

    async def click(self, selector: str) -> None:
        """Click the first element matching ``selector`` (as a user's click would)."""
        found = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.click(); return true; })()"
        )
        if not found:
            raise BrowserError(f"nothing matches {selector}")

    async def screenshot(self, path: str) -> None:
        import base64

        shot = await self._call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def chromium(width: int = 1200, height: int = 900) -> AsyncIterator[Browser]:
    """A headless Chromium for the block (its profile in a temporary directory)."""
    if CHROMIUM is None:
        raise BrowserError("no chromium on PATH")
    port = _free_port()
    # the profile is removed after every process of the browser is gone; a helper that
    # outlives the group's SIGKILL by a moment must not fail the test in its cleanup
    with tempfile.TemporaryDirectory(
        prefix="sluice-chromium-", ignore_cleanup_errors=True
    ) as profile:
        proc = await anyio.open_process(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--remote-debugging-port={port}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            async with aiohttp.ClientSession() as session:
                browser = Browser(session, f"127.0.0.1:{port}")
                await browser.wait_up()
                yield browser
        finally:
            _signal_group(proc.pid, signal.SIGTERM)
            with anyio.move_on_after(10):
                await proc.wait()
            # the browser's helpers (zygote, renderers, crashpad) are in its group
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, sig)


class Browser:
    def __init__(self, session: aiohttp.ClientSession, address: str) -> None:
        self._session = session
        self._address = address

    async def wait_up(self, timeout: float = 60.0) -> None:
        with anyio.fail_after(timeout):
            while True:
                try:
                    async with self._session.get(f"http://{self._address}/json/version") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await anyio.sleep(0.2)

    @asynccontextmanager
    async def open(self, url: str) -> AsyncIterator[Page]:
        """A new tab at ``url``, closed after the block."""
        # the address goes whole in the query: a fragment (#...) must not end it there
        target_url = urllib.parse.quote(url, safe=":/?&=")
        async with self._session.put(f"http://{self._address}/json/new?{target_url}") as r:
            target = await r.json(content_type=None)
        async with self._session.ws_connect(
            target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024
        ) as ws:
            page = Page(ws)
            await page.wait_for(
                "document.readyState === 'complete' && location.href !== 'about:blank'"
            )
            yield page
        async with self._session.get(f"http://{self._address}/json/close/{target['id']}"):
            pass
