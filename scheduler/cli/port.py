"""``sluice run``'s port (layer 5): ``/metrics``, the live page and the probes on one
aiohttp application, served over TLS behind the guard of :mod:`scheduler.serving`
(TokenReview, SubjectAccessReview of the path, probes open), or over plain HTTP to anyone
with ``--insecure-serving``.

:func:`port_security` reads the flags before the event loop starts (a bad flag ends the
command with exit code 2 before anything connects); :func:`serve` starts the port in the
command's event loop once the client exists (the guard's reviews use a sibling of it).
"""

from __future__ import annotations

import argparse
import ipaddress
import ssl
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.api.errors import ConfigError
from scheduler.live.routes import add_routes
from scheduler.logging import get_logger
from scheduler.metrics import Metrics
from scheduler.serving.settings import GuardSettings, parse_paths
from scheduler.serving.tls import ServingCertificate, server_context
from scheduler.sim.durations import parse_duration

if TYPE_CHECKING:
    from scheduler.kube import KubeClient
    from scheduler.live.service import LivePage

__all__ = ["PortSecurity", "Readiness", "http_app", "port_security", "serve"]

log = get_logger("sluice.run")

PAGE_SHELL = ("/ui", "/ui/")
"""The live page's HTML: the same static file for everyone, no data in it; served to
anyone so that a browser can load it, and its script then sends the viewer's token for the
data (``/ui/state``, ``/ui/explain``), which are guarded."""


class Readiness(Protocol):
    """What ``/readyz`` asks (``sluice run``'s Health)."""

    def ready(self) -> tuple[bool, str]: ...


def http_app(
    metrics: Metrics,
    health: Readiness,
    ui: Callable[[], LivePage | None] | None = None,
    middlewares: Sequence[object] = (),
) -> web.Application:
    """The port's routes: ``/metrics``, ``/healthz``, ``/livez``, ``/readyz`` and, with
    ``ui``, the live page (``/ui``, :func:`scheduler.live.routes.add_routes`)."""

    async def metrics_handler(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ok, why = health.ready()
        return web.Response(text=why, status=200 if ok else 503)

    http = web.Application(middlewares=list(middlewares))  # type: ignore[arg-type]
    http.router.add_get("/metrics", metrics_handler)
    http.router.add_get("/healthz", healthz)
    http.router.add_get("/livez", healthz)
    http.router.add_get("/readyz", readyz)
    if ui is not None:  # the live page, on the same port as /metrics
        add_routes(http, ui)
    return http


@dataclass(frozen=True)
class PortSecurity:
    """How the port is served: ``tls`` None with ``--insecure-serving``; ``guard`` None
    likewise (nobody is asked for anything)."""

    tls: ssl.SSLContext | None
    guard: GuardSettings | None
    certificate: str
    """Which certificate is served, for the log ("" without TLS)."""


def _seconds(args: argparse.Namespace, flag: str) -> float:
    text = getattr(args, flag.lstrip("-").replace("-", "_"))
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError("sluice run", flag, str(exc)) from exc


def port_security(args: argparse.Namespace) -> PortSecurity:
    """The port's security from ``sluice run``'s flags. Raises ConfigError naming the flag
    (a certificate without its key, an unreadable file, a bad duration or path)."""
    if args.insecure_serving:
        given = [
            f
            for f in ("--tls-cert-file", "--tls-private-key-file")
            if getattr(args, f[2:].replace("-", "_"))
        ]
        if given:
            raise ConfigError("sluice run", given[0], "has no use with --insecure-serving")
        return PortSecurity(tls=None, guard=None, certificate="")
    settings = GuardSettings(
        always_allow_paths=parse_paths(args.authorization_always_allow_paths),
        public_paths=PAGE_SHELL if args.ui else (),
        token_ttl=_seconds(args, "--authentication-token-webhook-cache-ttl"),
        allowed_ttl=_seconds(args, "--authorization-webhook-cache-authorized-ttl"),
        denied_ttl=_seconds(args, "--authorization-webhook-cache-unauthorized-ttl"),
    )
    certificate = ServingCertificate(args.tls_cert_file, args.tls_private_key_file)
    context, which = server_context(certificate, hosts=[args.bind_address])
    return PortSecurity(tls=context, guard=settings, certificate=which)


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


async def serve(
    stack: AsyncExitStack,
    args: argparse.Namespace,
    security: PortSecurity,
    app: Callable[[Sequence[object]], web.Application],
    client: KubeClient,
) -> None:
    """Serve ``app(middlewares)`` on ``--bind-address``:``--port`` until ``stack`` closes;
    behind the guard (its reviews on a sibling of ``client``, closed with ``stack``)
    unless ``--insecure-serving``."""
    middlewares: list[object] = []
    if security.guard is not None:
        from scheduler.kube.reviews import KubeAccessReviewer
        from scheduler.serving.guard import Guard

        reviewer = KubeAccessReviewer.for_client(client)
        stack.push_async_callback(reviewer.close)
        middlewares.append(Guard(reviewer, security.guard).middleware)
    runner = web.AppRunner(app(middlewares), access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, args.bind_address, args.port, ssl_context=security.tls).start()
    if security.guard is None:
        log.info("serving metrics, the live page and probes", port=args.port, security="none")
        if not _loopback(args.bind_address):
            log.warning(
                "--insecure-serving on a non-loopback address: anyone who reaches the port "
                "reads /metrics and the live page",
                address=args.bind_address,
            )
        return
    log.info(
        "serving metrics, the live page and probes",
        port=args.port,
        security="TLS, TokenReview, SubjectAccessReview",
        certificate=security.certificate,
        open=",".join((*security.guard.always_allow_paths, *security.guard.public_paths)),
    )
