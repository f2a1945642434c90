"""``sluice controller``: run the kopf operator in this process (layer 4).

kopf owns the event loop it runs on and installs its own SIGINT/SIGTERM handlers, so
:func:`run_controller` must be the whole life of its process: ``sluice controller`` calls it
and exits with what it returns. It never returns while the operator runs.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
from pathlib import Path

import kopf

from scheduler.api.labels import SCHEDULER_NAME
from scheduler.controllers.operator import (
    DEFAULT_CERT_DIR,
    ControllerOptions,
    build_registry,
)
from scheduler.serving.certificates import make_certificate

__all__ = ["run_controller"]

log = logging.getLogger("sluice.controller")


def run_controller(
    *,
    kubeconfig: str | None,
    namespace: str | None,
    dev: bool,
    verbose: int,
    webhook_port: int = 9443,
    cert_dir: str = DEFAULT_CERT_DIR,
    health_port: int = 8080,
    webhook_address: str | None = None,
    scheduler_name: str = SCHEDULER_NAME,
) -> int:
    """Run the controller until SIGTERM/SIGINT; the process's exit code.

    ``kubeconfig``: a kubeconfig file (else the pod's service account, else ``KUBECONFIG`` or
    ``~/.kube/config``). ``namespace``: validate only the PodGroups of that namespace (Queues
    are cluster-scoped and always validated; the operator itself is cluster-wide). ``dev``:
    plain-text logs and :class:`kopf.WebhookAutoServer` for a controller run outside the
    cluster: the webhook listens on 127.0.0.1 (unless ``webhook_address`` is given) and, when
    ``cert_dir`` holds no certificate, with a self-signed one made in a temporary directory,
    whose CA (``ca.crt`` there, logged) is the ``caBundle`` to register it with.
    ``verbose``: kube-style level; 4 and above log at DEBUG. The webhook listens with TLS on
    ``webhook_address`` (default every interface) and ``webhook_port``, with
    ``cert_dir``/``tls.crt`` and ``tls.key``; kopf's liveness endpoint is
    ``http://0.0.0.0:<health_port>/healthz`` (0 turns it off). ``scheduler_name``: the pod
    grouper groups the pods of this ``schedulerName``.

    Returns 0 after a clean stop, 2 for a bad option (missing certificate), 1 when the
    operator fails (no credentials, a startup handler that cannot succeed, ...).
    """
    kopf.configure(
        debug=verbose >= 4,
        log_format=kopf.LogFormat.FULL if dev else kopf.LogFormat.JSON,
        log_refkey="object" if not dev else None,
    )
    options = ControllerOptions(
        kubeconfig=kubeconfig,
        namespace=namespace,
        dev=dev,
        webhook_port=webhook_port,
        cert_dir=cert_dir,
        webhook_address=webhook_address,
        scheduler_name=scheduler_name,
    )
    missing = [str(p) for p in (options.certfile, options.pkeyfile) if not p.is_file()]
    if dev and missing:
        directory = Path(tempfile.mkdtemp(prefix="sluice-webhook-"))
        hosts = ["127.0.0.1", "localhost"]
        if options.address not in (*hosts, "0.0.0.0", "::"):
            hosts.append(options.address)
        made = make_certificate(directory, hosts)
        options = dataclasses.replace(options, cert_dir=str(directory))
        log.warning(
            f"--dev: a self-signed webhook certificate in {directory}; register the webhook "
            f"with url https://{options.address}:{webhook_port}/<validate-podgroup|"
            f"validate-queue> and the caBundle of {made.ca}"
        )
    elif not dev and missing:
        print(
            f"error: webhook certificate not found: {', '.join(missing)} "
            "(mount the Secret sluice-webhook-cert there, or use --dev)",
            file=sys.stderr,
        )
        return 2
    liveness = f"http://0.0.0.0:{health_port}/healthz" if health_port else None
    try:
        kopf.run(
            registry=build_registry(options),
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness,
        )
    except Exception:
        log.exception("sluice controller failed")
        return 1
    return 0
