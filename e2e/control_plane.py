"""What the end-to-end suite does to a real control plane besides using it: RBAC and
ServiceAccount tokens, the admission webhook's registration, ``sluice controller`` as a
subprocess, and killing and restarting the API server of ``../shared/k8s/up``.

* :func:`apply_manifests`: create or replace objects of ``manifests/`` (the RBAC).
* :func:`service_account_kubeconfig`: a kubeconfig whose user is a ServiceAccount, with a
  token from the TokenRequest API (``serviceaccounts/<name>/token``).
* :func:`webhook_configuration`: ``manifests/webhook.yaml`` pointed at a webhook served on
  127.0.0.1 (a ``url`` clientConfig and its ``caBundle``), limited to one run's objects.
* :class:`ControllerProcess`: ``sluice controller`` in a subprocess.
* :class:`LocalControlPlane`: the ``up`` state directory: the API server killed with
  SIGKILL and started again with the same command line (same port, same etcd), through
  its pid file, so that ``down`` still stops it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import yaml
from harness import (
    REPO,
    RUN_LABEL,
    Api,
    ApiFailure,
    SchedulerProcess,
    core_path,
    free_port,
    sluice_command,
    wait_for,
)

MANIFESTS: Final = REPO / "manifests"
SYSTEM_NAMESPACE: Final = "sluice-system"
SCHEDULER_ACCOUNT: Final = "sluice-scheduler"
CONTROLLER_ACCOUNT: Final = "sluice-controller"
RBAC_FILES: Final = (
    "namespace.yaml",
    "serviceaccount.yaml",
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "clusterrole-port.yaml",
    "role.yaml",
    "controller-rbac.yaml",
)

#: kind -> (group/version, plural, namespaced) for what the suite applies.
_KINDS: Final[Mapping[str, tuple[str, str, bool]]] = {
    "Namespace": ("", "namespaces", False),
    "ServiceAccount": ("", "serviceaccounts", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingWebhookConfiguration": (
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}


def load_manifests(names: Iterable[str]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in names:
        text = (MANIFESTS / name).read_text()
        docs.extend(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
    return docs


def object_path(obj: Mapping[str, Any], *, named: bool = False) -> str:
    group, plural, namespaced = _KINDS[str(obj["kind"])]
    meta = obj["metadata"]
    namespace = meta.get("namespace") if namespaced else None
    return core_path(plural, namespace, meta["name"] if named else "", group=group)


async def apply(api: Api, obj: Mapping[str, Any]) -> None:
    """Create ``obj``, or replace the one of its name (kubectl apply, roughly)."""
    try:
        await api.request("POST", object_path(obj), body=dict(obj))
    except ApiFailure as exc:
        if exc.status != 409:
            raise
        path = object_path(obj, named=True)
        existing = await api.request("GET", path)
        meta = {**obj["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}
        await api.request("PUT", path, body={**obj, "metadata": meta})


async def apply_manifests(api: Api, names: Iterable[str] = RBAC_FILES) -> None:
    for obj in load_manifests(names):
        await apply(api, obj)


#: (account, verb, group, resource, namespace) that must be allowed before a test starts:
#: the API server's authorizer sees new bindings a moment after they are written.
RBAC_PROBES: Final = (
    (SCHEDULER_ACCOUNT, "watch", "scheduling.sluice.dev", "queues", ""),
    (SCHEDULER_ACCOUNT, "create", "", "pods/binding", ""),
    (SCHEDULER_ACCOUNT, "update", "coordination.k8s.io", "leases", SYSTEM_NAMESPACE),
    (SCHEDULER_ACCOUNT, "create", "authentication.k8s.io", "tokenreviews", ""),
    (CONTROLLER_ACCOUNT, "create", "scheduling.sluice.dev", "queues", ""),
)


async def wait_for_rbac(api: Api, timeout: float = 30.0) -> None:
    """Wait until a SubjectAccessReview allows each of :data:`RBAC_PROBES`."""

    async def allowed() -> bool:
        for account, verb, group, resource, namespace in RBAC_PROBES:
            plural, _, sub = resource.partition("/")
            attributes = {"verb": verb, "group": group, "resource": plural}
            if sub:
                attributes["subresource"] = sub
            if namespace:
                attributes["namespace"] = namespace
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{SYSTEM_NAMESPACE}:{account}",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": attributes,
                },
            }
            path = core_path("subjectaccessreviews", group="authorization.k8s.io/v1")
            reply = await api.request("POST", path, body=review)
            if not (reply.get("status") or {}).get("allowed"):
                return False
        return True

    await wait_for(allowed, timeout=timeout, what="the RBAC of manifests/ in force")


async def delete_object(api: Api, obj: Mapping[str, Any]) -> None:
    try:
        await api.request("DELETE", object_path(obj, named=True))
    except ApiFailure as exc:
        if exc.status != 404:
            raise


async def service_account_token(
    api: Api, name: str, *, namespace: str = SYSTEM_NAMESPACE, seconds: int = 7200
) -> str:
    """A token of ServiceAccount ``namespace/name`` from the TokenRequest API."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    reply = await api.request(
        "POST", core_path("serviceaccounts", namespace, name, "token"), body=request
    )
    return str(reply["status"]["token"])


PORT_READER: Final = "sluice-e2e-port-reader"
"""The suite's reader of ``sluice run``'s guarded port: a ServiceAccount bound to both
ClusterRoles of ``manifests/clusterrole-port.yaml`` (the harness scrapes ``/metrics`` and
reads the live page with its token)."""


async def port_reader_token(api: Api) -> str:
    """Once per session on a real cluster: the ClusterRoles of ``clusterrole-port.yaml``,
    the :data:`PORT_READER` ServiceAccount bound to them, and its token, once a
    SubjectAccessReview shows the binding in force."""
    await apply_manifests(api, ("namespace.yaml", "clusterrole-port.yaml"))
    await apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": PORT_READER, "namespace": SYSTEM_NAMESPACE},
        },
    )
    for role in ("sluice-metrics-reader", "sluice-live-page-viewer"):
        await apply(
            api,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{PORT_READER}-{role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": PORT_READER, "namespace": SYSTEM_NAMESPACE}
                ],
            },
        )
    user = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{PORT_READER}"

    async def allowed() -> bool:
        for path in ("/metrics", "/ui/state"):
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "nonResourceAttributes": {"path": path, "verb": "get"},
                },
            }
            path_ = core_path("subjectaccessreviews", group="authorization.k8s.io/v1")
            reply = await api.request("POST", path_, body=review)
            if not (reply.get("status") or {}).get("allowed"):
                return False
        return True

    await wait_for(allowed, timeout=30, what="the port reader's bindings in force")
    return await service_account_token(api, PORT_READER)


async def service_account_kubeconfig(
    api: Api,
    admin_kubeconfig: str,
    path: Path,
    *,
    name: str,
    namespace: str = SYSTEM_NAMESPACE,
    seconds: int = 7200,
) -> Path:
    """Write a kubeconfig for ServiceAccount ``namespace/name`` to ``path``: the admin
    kubeconfig's server and CA, and a token of the TokenRequest API."""
    token = await service_account_token(api, name, namespace=namespace, seconds=seconds)
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context_name = admin.get("current-context") or admin["contexts"][0]["name"]
    context = next(c for c in admin["contexts"] if c["name"] == context_name)["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": f"{namespace}:{name}", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": f"{namespace}:{name}"}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


#: How a 403 shows in the logs of sluice (``HTTP 403 Forbidden``), of kopf
#: (``APIForbiddenError``) and in the API server's message (``... is forbidden: User``).
#: Not a bare "Forbidden": a 422's field error says ``status.nominatedNodeName:
#: Forbidden: may not be set ...``, which is validation, not RBAC.
_FORBIDDEN_MARKS: Final = ("HTTP 403", '"code": 403', "ForbiddenError", "is forbidden:")
#: A 403 of the NamespaceLifecycle admission (a create in a namespace being deleted, as a
#: test's namespace is at its end): not RBAC's.
_NAMESPACE_TERMINATING: Final = "because it is being terminated"


def forbidden_lines(
    text: str, *, tolerated_until: str = "", tolerated: Iterable[tuple[str, str]] = ()
) -> list[str]:
    """Log lines that tell of a 403 (RBAC refused a call). Lines whose JSON ``timestamp``
    is not after ``tolerated_until``, or within one of the ``tolerated`` (from, to)
    windows (ISO 8601, UTC), are left out: a restarted API server answers 403 for a
    moment after it is ready, until its authorizer's cache is filled. So are the 403s of
    a namespace being deleted, which admission answers, not RBAC."""
    windows = [("", tolerated_until)] if tolerated_until else []
    windows += list(tolerated)
    out = []
    for line in text.splitlines():
        if not any(mark in line for mark in _FORBIDDEN_MARKS) or _NAMESPACE_TERMINATING in line:
            continue
        if windows:
            with contextlib.suppress(ValueError, AttributeError):
                stamp = str(json.loads(line).get("timestamp", ""))
                if any(begin <= stamp <= end for begin, end in windows):
                    continue
        out.append(line)
    return out


# --------------------------------------------------------------------------- the webhook


def webhook_configuration(
    name: str, port: int, ca_pem: bytes, run_id: str, *, host: str = "127.0.0.1"
) -> dict[str, Any]:
    """``manifests/webhook.yaml`` as a webhook outside the cluster sees it: each webhook
    calls ``https://host:port/<its path>`` and trusts ``ca_pem``; it only judges objects
    labelled with ``run_id`` (so nothing else in the cluster depends on it)."""
    (config,) = load_manifests(["webhook.yaml"])
    config["metadata"] = {"name": name, "labels": {RUN_LABEL: run_id}}
    bundle = base64.b64encode(ca_pem).decode()
    for hook in config["webhooks"]:
        service = hook["clientConfig"]["service"]
        hook["clientConfig"] = {
            "url": f"https://{host}:{port}{service['path']}",
            "caBundle": bundle,
        }
        hook["objectSelector"] = {"matchLabels": {RUN_LABEL: run_id}}
    return config


# --------------------------------------------------------------------------- the controller


class ControllerProcess(SchedulerProcess):
    """``sluice controller`` as a subprocess: its webhook on 127.0.0.1:``webhook_port``,
    kopf's liveness endpoint on ``port``; output in ``log_path``; its pod grouper groups the
    pods of ``scheduler_name``."""

    def __init__(
        self,
        kubeconfig: str | None,
        log_dir: Path,
        *,
        cert_dir: Path | None = None,
        dev: bool = False,
        webhook_port: int | None = None,
        scheduler_name: str = "sluice",
    ) -> None:
        super().__init__(kubeconfig, log_dir)
        self.log_path = log_dir / f"sluice-controller-{self.index}.log"
        self.webhook_port = webhook_port or free_port()
        argv = [*sluice_command(), "controller", "--health-port", str(self.port)]
        argv += ["--webhook-address", "127.0.0.1", "--webhook-port", str(self.webhook_port)]
        if kubeconfig:
            argv += ["--kubeconfig", kubeconfig]
        if cert_dir is not None:
            argv += ["--cert-dir", str(cert_dir)]
        if dev:
            argv.append("--dev")
        if scheduler_name != "sluice":
            argv += ["--scheduler-name", scheduler_name]
        self.argv = argv

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for kopf's liveness endpoint (the operator has started its handlers)."""

        async def ready() -> bool:
            if self.returncode is not None:
                raise AssertionError(
                    f"sluice controller exited with {self.returncode}\n{self.tail()}"
                )
            try:
                return (await self.http_get("/healthz"))[0] == 200
            except OSError:
                return False
            except Exception:
                return False

        await wait_for(ready, timeout=timeout, what="sluice controller /healthz", detail=self.tail)


# --------------------------------------------------------------------------- the API server


class LocalControlPlane:
    """The control plane ``../shared/k8s/up --state DIR`` started, seen through ``DIR``."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.pid_file = state / "run" / "kube-apiserver.pid"
        self.log_file = state / "logs" / "kube-apiserver.log"

    def apiserver_pid(self) -> int:
        return int(self.pid_file.read_text().strip())

    def apiserver_argv(self) -> list[str]:
        raw = Path(f"/proc/{self.apiserver_pid()}/cmdline").read_bytes()
        argv = [a.decode() for a in raw.split(b"\0") if a]
        if not argv or not argv[0].endswith("kube-apiserver"):
            raise RuntimeError(f"pid {self.apiserver_pid()} is not kube-apiserver: {argv[:1]}")
        return argv

    async def kill_apiserver(self) -> list[str]:
        """SIGKILL the API server and wait until it is gone; its command line."""
        argv = self.apiserver_argv()
        pid = self.apiserver_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our child when we started it last time
            await anyio.sleep(0.05)
        return argv

    def start_apiserver(self, argv: list[str]) -> int:
        """Start the API server again with ``argv`` (same port, same etcd), detached as
        ``up`` starts it, and write its pid where ``down`` looks for it."""
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def etcd_url(self) -> str:
        for arg in self.apiserver_argv():
            if arg.startswith("--etcd-servers="):
                return arg.split("=", 1)[1].split(",")[0]
        raise RuntimeError("kube-apiserver has no --etcd-servers")

    async def compact_etcd(self, revision: int) -> None:
        """Compact etcd's history up to ``revision`` (what the API server does by itself
        every 5 minutes), through etcd's JSON gateway."""
        url = f"{self.etcd_url()}/v3/kv/compaction"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json={"revision": str(revision), "physical": True}) as resp,
        ):
            if resp.status != 200:
                raise RuntimeError(f"etcd compaction: HTTP {resp.status} {await resp.text()}")

    async def wait_ready(self, api: Api, timeout: float = 90.0) -> None:
        async def ready() -> bool:
            try:
                await api.request("GET", "/readyz", timeout=5)
                return True
            except ApiFailure:
                return False

        await wait_for(ready, timeout=timeout, what="kube-apiserver /readyz after a restart")
