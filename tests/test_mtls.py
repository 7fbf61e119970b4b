"""mTLS: `serve --tls-server-certs-dir` accepts only clients with a certificate from its CA.

A CA, a server certificate (SAN localhost and 127.0.0.1) and a client certificate are made
with `cryptography` into a temporary directory laid out as Crossplane mounts them
(tls.crt, tls.key, ca.crt). A second CA signs an impostor's client certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from function import fn
from tests import strategies as gen

TIMEOUT_S = 5


@dataclass(frozen=True)
class Pair:
    """A PEM certificate and its PEM private key."""

    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(name: str) -> tuple[Pair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA."""
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)), cert, key


def make_leaf(
    ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, name: str, *, server: bool
) -> Pair:
    """A certificate signed by the CA: server (SAN localhost, 127.0.0.1) or client."""
    key = _key()
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


@dataclass(frozen=True)
class PKI:
    """Everything the tests connect with."""

    ca: Pair
    client: Pair
    other_ca: Pair
    impostor: Pair


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[PKI, Path]:
    ca, ca_cert, ca_key = make_ca("function-cluster-plugin test CA")
    other_ca, other_cert, other_key = make_ca("someone else's CA")
    server = make_leaf(ca_cert, ca_key, "function-cluster-plugin", server=True)
    certs = tmp_path_factory.mktemp("tls")
    (certs / "tls.crt").write_bytes(server.cert)
    (certs / "tls.key").write_bytes(server.key)
    (certs / "ca.crt").write_bytes(ca.cert)
    return (
        PKI(
            ca=ca,
            client=make_leaf(ca_cert, ca_key, "crossplane", server=False),
            other_ca=other_ca,
            impostor=make_leaf(other_cert, other_key, "crossplane", server=False),
        ),
        certs,
    )


@pytest.fixture(scope="module")
def server(pki: tuple[PKI, Path]) -> Iterator[gen.Served]:
    _, certs = pki
    with gen.serve("--tls-server-certs-dir", str(certs)) as served:
        yield served


@pytest.fixture(scope="module")
def request_() -> fnv1.RunFunctionRequest:
    return gen.converged_request("external-eks", 4)


def _call(channel: grpc.Channel, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=TIMEOUT_S)


def _secure(served: gen.Served, *, root: bytes, client: Pair | None, host: str = "127.0.0.1") -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=client.key if client else None,
        certificate_chain=client.cert if client else None,
    )
    port = served.address.rsplit(":", 1)[1]
    return grpc.secure_channel(f"{host}:{port}", creds)


def _refused(channel: grpc.Channel, req: fnv1.RunFunctionRequest) -> None:
    with channel, pytest.raises(grpc.RpcError) as err:
        _call(channel, req)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value  # type: ignore[attr-defined]
    gen.figure("mtls", "refused connections")


def _accepted(served: gen.Served, pki: PKI, req: fnv1.RunFunctionRequest) -> None:
    with _secure(served, root=pki.ca.cert, client=pki.client) as ch:
        assert _call(ch, req) == fn.run(req)
    assert served.alive()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_client_with_a_certificate_from_the_ca_is_served(
    server: gen.Served, pki: tuple[PKI, Path], request_: fnv1.RunFunctionRequest, host: str
) -> None:
    p, _ = pki
    with _secure(server, root=p.ca.cert, client=p.client, host=host) as ch:
        got = _call(ch, request_)
    assert got == fn.run(request_)
    assert len(got.desired.resources) > 3


def test_plaintext_is_refused(server: gen.Served, pki: tuple[PKI, Path], request_: fnv1.RunFunctionRequest) -> None:
    _refused(grpc.insecure_channel(server.address), request_)
    _accepted(server, pki[0], request_)


def test_a_client_without_a_certificate_is_refused(
    server: gen.Served, pki: tuple[PKI, Path], request_: fnv1.RunFunctionRequest
) -> None:
    _refused(_secure(server, root=pki[0].ca.cert, client=None), request_)
    _accepted(server, pki[0], request_)


def test_a_client_certificate_from_another_ca_is_refused(
    server: gen.Served, pki: tuple[PKI, Path], request_: fnv1.RunFunctionRequest
) -> None:
    _refused(_secure(server, root=pki[0].ca.cert, client=pki[0].impostor), request_)
    _accepted(server, pki[0], request_)


def test_a_client_that_does_not_trust_the_servers_ca_does_not_connect(
    server: gen.Served, pki: tuple[PKI, Path], request_: fnv1.RunFunctionRequest
) -> None:
    # Server authentication too: a caller pinning another CA never talks to this server.
    _refused(_secure(server, root=pki[0].other_ca.cert, client=pki[0].client), request_)
    _accepted(server, pki[0], request_)


def test_without_insecure_or_certificates_serve_refuses_to_start() -> None:
    # One line saying what to pass, not a traceback; exit 2 like other usage errors.
    with pytest.raises(RuntimeError, match=r"serve exited with 2: Error: serve needs --tls-server-certs-dir DIR") as err, gen.serve(startup_s=20):
        pass
    assert "Traceback" not in str(err.value)
    assert "or --insecure" in str(err.value)
