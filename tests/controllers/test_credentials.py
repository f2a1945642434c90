"""``sluice controller``'s login from its pod's ServiceAccount (scheduler/controllers/
credentials.py): the API server from KUBERNETES_SERVICE_HOST/PORT as client-go finds it
(kopf's own login always names kubernetes.default.svc, which needs the cluster's DNS: the
controller's image failed that way on a host network), the token, CA and namespace from
the mounted files."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest

from scheduler.controllers.credentials import in_cluster_server, service_account_login


@pytest.mark.parametrize(
    ("environ", "server"),
    [
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            "https://10.96.0.1:443",
            id="ipv4",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
            "https://[fd00::1]:6443",
            id="ipv6",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "https://kubernetes.default.svc", id="no port"
        ),
        pytest.param({}, "https://kubernetes.default.svc", id="neither"),
    ],
)
def test_in_cluster_server(environ: dict[str, str], server: str) -> None:
    assert in_cluster_server(environ) == server


def test_the_service_account_login_reads_the_mounted_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0k3n\n")
    (tmp_path / "namespace").write_text("sluice-system")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    info = service_account_login(kopf.OperatorSettings(), directory=tmp_path, environ=environ)
    assert info is not None
    assert info.server == "https://127.0.0.1:6443"
    assert info.token == "t0k3n"
    assert info.default_namespace == "sluice-system"
    assert info.ca_path == str(tmp_path / "ca.crt")


def test_no_token_no_login(tmp_path: Path) -> None:
    assert service_account_login(kopf.OperatorSettings(), directory=tmp_path, environ={}) is None
