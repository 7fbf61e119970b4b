"""A throw-away CA, server and client certificate for loopback mTLS.

The server directory is laid out as the SDK's ``--tls-server-certs-dir`` wants it
(tls.crt, tls.key, ca.crt); the client one the same way, for the load generator.
RSA 2048, as Crossplane's own certificate initializer uses.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "function-cluster-plugin"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate(root: Path) -> tuple[Path, Path]:
    """Write ``root/server`` and ``root/client``; return both directories."""
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=1)

    ca_key = _key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("bench-ca"))
        .issuer_name(_name("bench-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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

    def leaf(cn: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]) -> tuple:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    server_key, server_cert = leaf(
        SERVER_NAME,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName(SERVER_NAME),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    client_key, client_cert = leaf("crossplane", ExtendedKeyUsageOID.CLIENT_AUTH, [])

    dirs = []
    for sub, key, cert in (
        ("server", server_key, server_cert),
        ("client", client_key, client_cert),
    ):
        d = root / sub
        d.mkdir(parents=True, exist_ok=True)
        (d / "tls.crt").write_bytes(_pem_cert(cert))
        (d / "tls.key").write_bytes(_pem_key(key))
        (d / "tls.key").chmod(0o600)
        (d / "ca.crt").write_bytes(_pem_cert(ca))
        dirs.append(d)
    return dirs[0], dirs[1]
