"""The live page's HTTP routes (layer 4, live): added to an aiohttp application that serves
other things too (``sluice run``'s ``/metrics`` and probes, on one port, behind whatever
guards that port).

* ``GET /ui``: the page, one self-contained HTML document (:data:`PAGE`: inline CSS and
  script, nothing fetched from elsewhere). Its script asks ``/ui/state`` every few
  seconds (``?refresh=SECONDS``, default 3) and redraws; a click on a pending job asks
  ``/ui/explain`` and shows the answer; the address keeps the job explained
  (``/ui#explain=podgroup:ns/name``), so a link opens it.
* ``GET /ui/state``: :meth:`~scheduler.live.service.LivePage.state`, as JSON.
* ``GET /ui/explain?kind=pod|podgroup&name=NS/NAME``: :meth:`~scheduler.live.service.
  LivePage.explain`, as JSON; 404 with ``{"error": ...}`` when there is no such object, 400
  without a kind or a name.

Read-only: only GET is routed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from scheduler.api.errors import InvalidInputError

if TYPE_CHECKING:  # the page is made once the caches are synced, by whoever adds routes
    from scheduler.live.service import LivePage

PAGE = resources.files("scheduler.live").joinpath("page.html").read_text(encoding="utf-8")
"""The page's HTML (``scheduler/live/page.html``)."""

NO_CACHE = {"Cache-Control": "no-store"}
STARTING = "the scheduler is starting: its caches are not synced yet"


def add_routes(
    app: web.Application, page: Callable[[], LivePage | None], *, prefix: str = "/ui"
) -> None:
    """Route ``prefix``, ``prefix/state`` and ``prefix/explain`` of ``app`` to the page
    ``page()`` returns: None while there is none yet (``sluice run`` builds its loop once
    its caches are synced), and the JSON routes then answer 503."""

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", headers=NO_CACHE)

    async def state(_: web.Request) -> web.Response:
        live = page()
        if live is None:
            return _json({"error": STARTING}, 503)
        return web.Response(
            text=live.state_json(), content_type="application/json", headers=NO_CACHE
        )

    async def explain(request: web.Request) -> web.Response:
        live = page()
        if live is None:
            return _json({"error": STARTING}, 503)
        kind = request.query.get("kind", "")
        name = request.query.get("name", "")
        if not kind or not name:
            return _json({"error": "explain needs ?kind=pod|podgroup&name=NS/NAME"}, 400)
        try:
            return _json(await live.explain(kind, name))
        except InvalidInputError as exc:
            return _json({"error": str(exc)}, 404)

    app.router.add_get(prefix, index)
    app.router.add_get(f"{prefix}/", index)
    app.router.add_get(f"{prefix}/state", state)
    app.router.add_get(f"{prefix}/explain", explain)


def _json(doc: object, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(doc, separators=(",", ":")),
        status=status,
        content_type="application/json",
        headers=NO_CACHE,
    )
