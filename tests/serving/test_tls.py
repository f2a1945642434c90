"""TLS of ``sluice run``'s port (scheduler/serving/tls.py) and the flags that shape the
port (scheduler/cli/port.py): a given pair served, a self-made one when none is given, and
each mistake refused naming its flag."""

from __future__ import annotations

import argparse
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from scheduler.api.errors import ConfigError
from scheduler.cli.port import port_security
from scheduler.cli.run_options import add_arguments
from scheduler.serving.certificates import make_certificate
from scheduler.serving.settings import parse_paths
from scheduler.serving.tls import ServingCertificate, server_context


def _served_certificate(context: ssl.SSLContext, trust: Path | None = None) -> x509.Certificate:
    """Handshake with ``context`` on a loopback socket; the certificate the server showed
    (verified against ``trust`` when given)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    client = ssl.create_default_context(cafile=str(trust) if trust else None)
    if trust is None:
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    thread.join(5)
    listener.close()
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_a_given_certificate_is_served(tmp_path: Path) -> None:
    made = make_certificate(tmp_path, ["localhost"])
    context, which = server_context(ServingCertificate(str(made.cert), str(made.key)))
    assert which == f"certificate {made.cert}"
    served = _served_certificate(context, trust=made.ca)
    assert served == x509.load_pem_x509_certificate(made.cert.read_bytes())


def test_a_self_made_certificate_names_this_host() -> None:
    context, which = server_context(ServingCertificate(), hosts=["10.1.2.3", "0.0.0.0"])
    assert which.startswith("a self-made certificate for localhost, 127.0.0.1")
    served = _served_certificate(context)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = names.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    assert {"localhost", socket.gethostname()} <= set(dns)
    assert ips == ["127.0.0.1", "10.1.2.3"]  # not the wildcard address


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        pytest.param(["--tls-cert-file", "c.pem"], "--tls-private-key-file", id="a cert alone"),
        pytest.param(["--tls-private-key-file", "k.pem"], "--tls-cert-file", id="a key alone"),
        pytest.param(
            ["--tls-cert-file", "/nope/c.pem", "--tls-private-key-file", "/nope/k.pem"],
            "--tls-cert-file",
            id="no such file",
        ),
        pytest.param(
            ["--insecure-serving", "--tls-cert-file", "c.pem"],
            "--tls-cert-file",
            id="a certificate with --insecure-serving",
        ),
        pytest.param(
            ["--authentication-token-webhook-cache-ttl", "ten"],
            "--authentication-token-webhook-cache-ttl",
            id="a bad duration",
        ),
        pytest.param(
            ["--authorization-webhook-cache-unauthorized-ttl=-1s"],
            "--authorization-webhook-cache-unauthorized-ttl",
            id="a negative duration",
        ),
        pytest.param(
            ["--authorization-always-allow-paths", "/a*b"],
            "--authorization-always-allow-paths",
            id="a star inside a path",
        ),
    ],
)
def test_mistakes_name_their_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError) as caught:
        port_security(_args(*argv))
    assert flag in str(caught.value)


def test_mismatched_pair_is_refused(tmp_path: Path) -> None:
    one = make_certificate(tmp_path / "one")
    other = make_certificate(tmp_path / "other")
    args = _args("--tls-cert-file", str(one.cert), "--tls-private-key-file", str(other.key))
    with pytest.raises(ConfigError, match=r"--tls-cert-file.*cannot load"):
        port_security(args)


def test_the_defaults_are_kube_schedulers() -> None:
    security = port_security(_args())
    assert security.tls is not None and security.guard is not None
    assert security.guard.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert security.guard.always_allow_groups == ("system:masters",)
    assert security.guard.public_paths == ("/ui", "/ui/")  # the page's HTML, no data
    assert port_security(_args("--no-ui")).guard.public_paths == ()  # type: ignore[union-attr]
    assert (security.guard.token_ttl, security.guard.allowed_ttl, security.guard.denied_ttl) == (
        10.0,
        10.0,
        10.0,
    )


def test_insecure_serving_has_neither_tls_nor_guard() -> None:
    security = port_security(_args("--insecure-serving"))
    assert (security.tls, security.guard) == (None, None)


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        pytest.param("/healthz,/readyz", ("/healthz", "/readyz"), id="plain"),
        pytest.param("healthz, /debug/*", ("/healthz", "/debug/*"), id="leading slash optional"),
        pytest.param("", (), id="none"),
    ],
)
def test_parse_paths(text: str, paths: tuple[str, ...]) -> None:
    assert parse_paths(text) == paths
