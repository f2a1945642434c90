"""Self-signed webhook certificates for ``sluice controller --dev`` and for tests (layer 4).

kopf makes its own self-signed certificate with ``certbuilder`` and ``oscrypto``, and its
auto server guesses the cluster with ``certvalidator``; ``oscrypto`` 1.3 (the last release)
cannot read the version of OpenSSL 3, so neither works here. This module makes the same
kind of certificate with ``cryptography`` (the ``dev`` extra; a ``MissingDependency``
one-line error without it): a CA, and a serving certificate it signs for the given
hosts (IP addresses and DNS names). The CA's PEM is what a webhook configuration's
``caBundle`` carries. No kopf here.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MissingDependencyError", "WebhookCertificate", "make_webhook_certificate"]


class MissingDependencyError(RuntimeError):
    """The ``cryptography`` package is not installed."""


@dataclass(frozen=True, slots=True)
class WebhookCertificate:
    """Files written by :func:`make_webhook_certificate` (PEM)."""

    ca: Path
    """The CA certificate: the ``caBundle`` of a webhook configuration."""
    cert: Path
    """The serving certificate (``tls.crt``)."""
    key: Path
    """Its private key (``tls.key``)."""


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        raise MissingDependencyError(
            "a self-signed webhook certificate needs the `cryptography` package: "
            "pip install 'sluice[dev]', or mount tls.crt and tls.key in --cert-dir"
        ) from exc
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def make_webhook_certificate(
    directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost"), *, days: int = 30
) -> WebhookCertificate:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` into ``directory`` (created if
    missing; existing files are replaced): a new CA, and a serving certificate signed by
    it whose subject alternative names are ``hosts``. Raises MissingDependencyError."""
    x509, hashes, serialization, ec, eku, name_oid = _crypto()
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, "sluice-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[Any] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([eku.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    out = WebhookCertificate(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    out.ca.write_bytes(ca.public_bytes(pem))
    out.cert.write_bytes(cert.public_bytes(pem))
    out.key.touch(mode=0o600)
    out.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return out
