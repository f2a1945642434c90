"""Where ``sluice controller`` gets its credentials (layer 4, controllers): kopf's login.

In this order: ``--kubeconfig`` (kopf's kubeconfig reader: tokens, client certificates,
basic auth); the pod's ServiceAccount (:func:`service_account_login`); the
kubernetes-asyncio loader (``KUBECONFIG`` or ``~/.kube/config``, exec plugins included);
kopf's kubeconfig reader on those.

kopf's own service-account login always names ``https://kubernetes.default.svc``, which
needs the cluster's DNS; a pod is told where the API server is by
``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``, which client-go's in-cluster
configuration (and ``sluice run``'s) use, so :func:`service_account_login` does too (a pod
on the host's network, or a cluster without DNS for it, then works as well).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Protocol

import kopf

__all__ = ["SERVICE_ACCOUNT_DIR", "obtain_credentials", "service_account_login"]

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_DNS_SERVER: Final = "https://kubernetes.default.svc"


class ControllerOptionsLike(Protocol):
    """What the login reads of :class:`~scheduler.controllers.operator.ControllerOptions`."""

    @property
    def kubeconfig(self) -> str | None: ...


def in_cluster_server(environ: Mapping[str, str]) -> str:
    """``https://HOST:PORT`` from ``KUBERNETES_SERVICE_HOST``/``PORT`` (an IPv6 address in
    brackets), or kubernetes.default.svc when they are not both set."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        return _DNS_SERVER
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def service_account_login(
    settings: kopf.OperatorSettings,
    *,
    directory: Path = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> kopf.ConnectionInfo | None:
    """The ServiceAccount's token, CA and namespace from ``directory``, for the server of
    :func:`in_cluster_server`; None when there is no token there."""
    token_file = directory / "token"
    if not token_file.is_file():
        return None
    token = token_file.read_text(encoding="utf-8").strip()
    namespace_file, ca_file = directory / "namespace", directory / "ca.crt"
    namespace = (
        namespace_file.read_text(encoding="utf-8").strip() if namespace_file.is_file() else ""
    )
    return kopf.ConnectionInfo(
        server=in_cluster_server(os.environ if environ is None else environ),
        ca_path=str(ca_file) if ca_file.is_file() else None,
        token=token or None,
        default_namespace=namespace or None,
        trust_env=settings.networking.trust_env,
        priority=20,  # kopf's own service-account login's priority
    )


async def obtain_credentials(
    options: ControllerOptionsLike, *, settings: kopf.OperatorSettings, logger: kopf.Logger
) -> kopf.ConnectionInfo:
    """Credentials for the API server, from the first source that has them (the module's
    docstring). Raises kopf.LoginError when none has."""
    if options.kubeconfig:
        # kopf's reader takes the path from the environment only; this is our own process.
        os.environ["KUBECONFIG"] = options.kubeconfig
        info = kopf.login_with_kubeconfig(settings=settings)
        if info is None:
            raise kopf.LoginError(f"no credentials in kubeconfig {options.kubeconfig}")
        return info
    info = service_account_login(settings)
    if info is not None:
        return info
    try:
        info = await kopf.login_via_async_client(logger=logger, settings=settings)
    except kopf.LoginError:
        info = None
    if info is None:
        info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.LoginError(
            "no credentials: not in a pod with a service account, and no kubeconfig "
            "(--kubeconfig, KUBECONFIG or ~/.kube/config)"
        )
    return info
