"""Sluice's image run as ``manifests/`` runs it, with podman on this machine (issue 40
item 1), for ``e2e/test_image.py``.

:func:`pod_run_args` turns a Deployment of ``manifests/`` into ``podman run`` arguments,
field by field, so that what the test runs is what the manifests ask for:

* the container's ``args``, ``image`` replaced by ``$SLUICE_E2E_IMAGE``;
* its ``securityContext``: ``runAsUser``/``runAsGroup`` (``--user``), ``runAsNonRoot``
  (refused if the user is 0), ``readOnlyRootFilesystem`` (``--read-only``),
  ``capabilities.drop`` (``--cap-drop``), ``allowPrivilegeEscalation: false``
  (``no-new-privileges``); seccomp ``RuntimeDefault`` is podman's default;
* ``env`` (the downward API's ``metadata.name`` and ``metadata.namespace``);
* its volumes: a ConfigMap's or Secret's data as read-only files, an ``emptyDir`` as a
  tmpfs of its ``sizeLimit``;
* the ServiceAccount as the kubelet mounts it: a token of the TokenRequest API, the
  cluster's CA and the namespace at ``/var/run/secrets/kubernetes.io/serviceaccount``,
  and ``KUBERNETES_SERVICE_HOST``/``PORT`` naming the API server (the in-cluster
  configuration).

One departure, because the container shares this machine's network (``--network host``,
the way it reaches the API server here, IMAGES.md): its ports are moved to free ones with
the command's own flags (``--port``; ``--webhook-port``, ``--health-port``), and
:attr:`ContainerProcess.ports` maps each container port to where it is. The probes of the
manifest (:meth:`ContainerProcess.probe`) are then asked as a kubelet asks them.

podman runs with the flags IMAGES.md found to work here (runc, cgroupfs, ulimits);
``SLUICE_E2E_PODMAN`` replaces them (``podman`` alone where podman's defaults work).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import ssl
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import anyio.abc
from harness import wait_for

__all__ = ["IMAGE", "PODMAN", "ContainerProcess", "pod_run_args", "podman_problem"]

IMAGE: Final = os.environ.get("SLUICE_E2E_IMAGE", "")
PODMAN: Final = shlex.split(
    os.environ.get(
        "SLUICE_E2E_PODMAN",
        "podman --runtime runc --cgroup-manager cgroupfs",
    )
)
RUN_FLAGS: Final = (
    "--network",
    "host",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
)
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"


def podman_problem() -> str | None:
    """Why the image cannot be run here (None: it can): no image named, no podman, or
    the image not in podman's store."""
    if not IMAGE:
        return "no image: build one with image/build and set SLUICE_E2E_IMAGE to its name"
    if shutil.which(PODMAN[0]) is None:
        return f"no {PODMAN[0]} on PATH (apt-get install podman runc)"
    found = subprocess.run(
        [*PODMAN, "image", "exists", IMAGE], capture_output=True, check=False, timeout=60
    )
    if found.returncode != 0:
        return f"podman has no image {IMAGE} ({found.stderr.decode().strip() or 'not found'})"
    return None


def _mounts_and_volumes(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    files: Path,
    data: Mapping[str, Mapping[str, bytes]],
) -> list[str]:
    """``-v``/``--tmpfs`` for each volumeMount: ``data`` holds each ConfigMap's or
    Secret's files by its name."""
    volumes = {v["name"]: v for v in pod.get("volumes") or ()}
    args: list[str] = []
    for mount in container.get("volumeMounts") or ():
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "emptyDir" in volume:
            size = (volume["emptyDir"] or {}).get("sizeLimit", "64Mi")
            megabytes = int(size.removesuffix("Mi"))
            args += ["--tmpfs", f"{target}:rw,size={megabytes}m,mode=1777"]
            continue
        source = volume.get("configMap", {}).get("name") or volume.get("secret", {}).get(
            "secretName"
        )
        if source is None:
            raise AssertionError(f"volume {mount['name']}: only configMap, secret and emptyDir")
        directory = files / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in data[source].items():
            (directory / name).write_bytes(content)
            (directory / name).chmod(0o444)
        directory.chmod(0o755)
        args += ["-v", f"{directory}:{target}:ro"]
    return args


def pod_run_args(
    deployment: Mapping[str, Any],
    *,
    name: str,
    pod_name: str,
    namespace: str,
    files: Path,
    token: str,
    ca_pem: bytes,
    api_host: str,
    api_port: int,
    data: Mapping[str, Mapping[str, bytes]],
    extra_args: list[str],
) -> list[str]:
    """``podman run`` arguments (after ``run``) for the one container of ``deployment``,
    its files under ``files`` (see the module docstring)."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    uid, gid = security.get("runAsUser", 0), security.get("runAsGroup", security.get("runAsUser"))
    if security.get("runAsNonRoot") and uid == 0:
        raise AssertionError(f"{name}: runAsNonRoot with user 0")
    args = ["--name", name, "--rm", *RUN_FLAGS, "--user", f"{uid}:{gid}"]
    if security.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    for cap in (security.get("capabilities") or {}).get("drop") or ():
        args += ["--cap-drop", cap]
    if security.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    for env in container.get("env") or ():
        if "value" in env:
            value = env["value"]
        else:
            value = fields[env["valueFrom"]["fieldRef"]["fieldPath"]]
        args += ["-e", f"{env['name']}={value}"]
    account = files / "serviceaccount"
    account.mkdir(parents=True, exist_ok=True)
    for file, content in (
        ("token", token.encode()),
        ("ca.crt", ca_pem),
        ("namespace", namespace.encode()),
    ):
        (account / file).write_bytes(content)
        (account / file).chmod(0o444)
    account.chmod(0o755)
    args += ["-v", f"{account}:{SERVICE_ACCOUNT_DIR}:ro"]
    args += ["-e", f"KUBERNETES_SERVICE_HOST={api_host}"]
    args += ["-e", f"KUBERNETES_SERVICE_PORT={api_port}"]
    args += _mounts_and_volumes(pod, container, files, data)
    return [*args, IMAGE, *container.get("args", []), *extra_args]


class ContainerProcess:
    """One container in the foreground (``podman run``), its output in ``log_path``;
    ``ports`` maps each containerPort of the manifest to the port it really has."""

    def __init__(
        self,
        deployment: Mapping[str, Any],
        run_args: list[str],
        name: str,
        log_path: Path,
        ports: Mapping[int, int],
    ) -> None:
        self.deployment = deployment
        self.argv = [*PODMAN, "run", *run_args]
        self.name = name
        self.log_path = log_path
        self.ports = dict(ports)
        self.proc: anyio.abc.Process | None = None

    @property
    def container(self) -> Mapping[str, Any]:
        (container,) = self.deployment["spec"]["template"]["spec"]["containers"]
        return container

    async def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = await anyio.open_process(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def _port(self, port: int | str) -> int:
        if isinstance(port, str):
            named = {p["name"]: p["containerPort"] for p in self.container.get("ports") or ()}
            port = named[port]
        return self.ports.get(port, port)

    async def probe(self, kind: str) -> tuple[bool, str]:
        """The manifest's ``livenessProbe`` or ``readinessProbe``, asked as the kubelet
        asks it: an ``httpGet`` (its scheme; no certificate check, no credentials) is
        passed by a 2xx or 3xx, a ``tcpSocket`` by a connection."""
        spec = self.container[kind]
        if "tcpSocket" in spec:
            port = self._port(spec["tcpSocket"]["port"])
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError as exc:
                return False, str(exc)
            await stream.aclose()
            return True, f"tcp {port} open"
        get = spec["httpGet"]
        url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{self._port(get['port'])}"
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
                session.get(url + get["path"], ssl=insecure) as resp,
            ):
                return 200 <= resp.status < 400, f"{resp.status} {await resp.text()}"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return False, repr(exc)

    async def wait_probe(self, kind: str, timeout: float = 90.0) -> str:
        async def passed() -> str | None:
            if self.returncode is not None:
                raise AssertionError(f"{self.name} exited with {self.returncode}\n{self.tail()}")
            ok, said = await self.probe(kind)
            return said if ok else None

        return await wait_for(passed, timeout=timeout, what=f"{self.name} {kind}", detail=self.tail)

    async def stop(self, timeout: int = 30) -> int:
        """``podman stop`` (SIGTERM, then SIGKILL after ``timeout``); the exit code."""
        if self.proc is None:
            return 0
        if self.proc.returncode is None:
            await anyio.run_process([*PODMAN, "stop", "-t", str(timeout), self.name], check=False)
        with anyio.fail_after(timeout + 30):
            return await self.proc.wait()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.stop()
        await anyio.run_process([*PODMAN, "rm", "-f", self.name], check=False)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        text = self.log_text().splitlines()[-lines:]
        return f"--- {self.log_path} ({self.name}, exit {self.returncode}) ---\n" + "\n".join(text)
