"""The live page (layer 4, beside sim and kube): what a running scheduler holds, shown
in a browser by ``sluice run`` (on its metrics port) and ``sluice simulate --serve``. It
reads the loop's state (layer 3) and serves HTTP; the command line (layer 5) wires it.

:mod:`.summary` keeps a little of each cycle (an observer of the loop); :mod:`.state`
reads the rest from the cache when the page asks; :mod:`.service` memoizes it per cycle
and runs ``explain`` on a click off the event loop; :mod:`.routes` serves the page
(``page.html``) and its JSON on an aiohttp application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.live.routes import add_routes
    from scheduler.live.service import LivePage

__all__ = ["LivePage", "add_routes"]


def __getattr__(name: str) -> Any:
    """``LivePage`` and ``add_routes``, imported when first asked for: ``sluice run``
    serves its probes before its caches are synced, and the page's service (the
    decision side's state and ``explain``) is not needed before then."""
    if name == "add_routes":
        from scheduler.live.routes import add_routes

        return add_routes
    if name == "LivePage":
        from scheduler.live.service import LivePage

        return LivePage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
