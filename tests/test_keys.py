"""function.public_keys reads public keys as ``cryptography`` does (the function no longer imports it).

``cryptography`` stays a test dependency: it is the reference for every key form a
``<cluster>-sa`` Secret can hold, and for which mangled inputs are keys at all.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function import public_keys as keys
from function.addons import oidc_issuer as oidc

PEM, DER = serialization.Encoding.PEM, serialization.Encoding.DER
SPKI, PKCS1 = serialization.PublicFormat.SubjectPublicKeyInfo, serialization.PublicFormat.PKCS1


def _certificate(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "service-account")])
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(7)
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=1))
        .sign(private, hashes.SHA256())
    )
    return cert.public_bytes(PEM)


def _private(kind: str) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    if kind == "p256":
        return ec.generate_private_key(ec.SECP256R1())
    bits, exponent = {"rsa2048": (2048, 65537), "rsa4096": (4096, 65537), "rsa3072-e3": (3072, 3)}[
        kind
    ]
    return rsa.generate_private_key(public_exponent=exponent, key_size=bits)


def _reference_jwk(pem: bytes) -> dict[str, str]:
    """The JWK as the function computed it when it used ``cryptography``."""
    if b"BEGIN CERTIFICATE" in pem:
        key = x509.load_pem_x509_certificate(pem).public_key()
    else:
        key = serialization.load_pem_public_key(pem)
    kid = oidc._b64url(hashlib.sha256(key.public_bytes(DER, SPKI)).digest())
    if isinstance(key, rsa.RSAPublicKey):
        nums = key.public_numbers()
        return {"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256",
                "n": oidc._uint(nums.n), "e": oidc._uint(nums.e)}  # fmt: skip
    assert isinstance(key, ec.EllipticCurvePublicKey)
    point = key.public_numbers()
    return {"use": "sig", "kty": "EC", "kid": kid, "alg": "ES256", "crv": "P-256",
            "x": oidc._b64url(point.x.to_bytes(32, "big")),
            "y": oidc._b64url(point.y.to_bytes(32, "big"))}  # fmt: skip


@pytest.mark.parametrize("kind", ["rsa2048", "rsa4096", "rsa3072-e3", "p256"])
def test_every_key_form_gives_the_jwk_cryptography_gives(kind: str) -> None:
    private = _private(kind)
    public = private.public_key()
    forms = {"PUBLIC KEY": public.public_bytes(PEM, SPKI), "CERTIFICATE": _certificate(private)}
    if kind != "p256":
        forms["RSA PUBLIC KEY"] = public.public_bytes(PEM, PKCS1)
    kids = set()
    for label, pem in forms.items():
        assert pem.startswith(f"-----BEGIN {label}-----".encode())
        jwk = json.loads(oidc.jwks_document(pem))["keys"][0]
        assert jwk == _reference_jwk(pem), label
        kids.add(jwk["kid"])
    assert len(kids) == 1  # the kid is the key's, whatever wraps it


def test_a_compressed_p256_point_is_the_same_key() -> None:
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    compressed = public.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )
    nums = public.public_numbers()
    assert keys._p256(compressed) == keys.ECKey(nums.x, nums.y)


@pytest.mark.parametrize(
    ("pem", "problem"),
    [
        (b"not a key", "not a PEM public key or certificate"),
        (b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n", "not valid base64"),
        (b"-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n", "malformed PUBLIC KEY"),
        (b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "malformed"),
        (b"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n", "not a PUBLIC KEY"),
    ],
)
def test_what_is_not_a_key_says_why(pem: bytes, problem: str) -> None:
    with pytest.raises(keys.KeyProblemError, match=problem):
        oidc.jwks_document(pem)


def test_keys_sts_cannot_use_are_refused() -> None:
    # 1024 bits on purpose: refusing it is the test.
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()  # noqa: S505
    with pytest.raises(keys.KeyProblemError, match="1024 bits; STS needs at least 2048"):
        oidc.jwks_document(small.public_bytes(PEM, SPKI))
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    with pytest.raises(keys.KeyProblemError, match="not on curve P-256"):
        oidc.jwks_document(p384.public_bytes(PEM, SPKI))


_RSA_DER = (
    rsa.generate_private_key(public_exponent=65537, key_size=2048)
    .public_key()
    .public_bytes(DER, SPKI)
)
_EC_DER = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(DER, SPKI)


@st.composite
def _mangled(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from([_RSA_DER, _EC_DER])))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "append"]))
        if op == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif op == "cut":
            data = data[: draw(st.integers(0, len(data)))]
        else:
            data += draw(st.binary(min_size=1, max_size=5))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mangled())
def test_a_mangled_key_is_a_key_exactly_when_cryptography_says_so(der: bytes) -> None:
    pem = b"-----BEGIN PUBLIC KEY-----\n" + base64.encodebytes(der) + b"-----END PUBLIC KEY-----\n"
    try:
        expected = _reference_jwk(pem)
    except (ValueError, UnsupportedAlgorithm):
        expected = None
    try:
        mine = keys.load_public_key(pem)
    except keys.KeyProblemError:
        assert expected is None
        return
    assert expected is not None
    assert oidc._b64url(hashlib.sha256(mine.spki_der()).digest()) == expected["kid"]


def test_the_function_answers_with_a_key_without_importing_cryptography() -> None:
    # RSS: cryptography's native module alone is ~7 MiB in a serving process.
    code = """
import sys
from function import fn
from tests.scenarios import SCENARIOS
world = SCENARIOS[0].world()
world.run(12)
assert world.composed["irsa-jwks"].obj["spec"]["forProvider"]["content"].startswith('{"keys"')
leaked = sorted(m for m in sys.modules if m.split(".")[0] == "cryptography")
assert not leaked, leaked
"""
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=120)
