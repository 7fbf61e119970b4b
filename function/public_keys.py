"""Public keys from PEM, read with a small DER walker instead of ``cryptography``.

Only what a service-account key pair can hold: an RSA or ECDSA P-256 key as
``PUBLIC KEY`` (SubjectPublicKeyInfo), ``RSA PUBLIC KEY`` (PKCS#1) or inside a
``CERTIFICATE``. Importing ``cryptography`` for two integers cost every server
7.5 MiB of RSS and 30 ms on the first key. The key is re-encoded as
canonical DER for its ``kid``, as kube-apiserver does (``MarshalPKIXPublicKey``);
tests check every form against ``cryptography``. Anything else, and every
malformed input, is a ``KeyProblemError``.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

# DER tags
_INTEGER, _BIT_STRING, _NULL, _OID, _SEQUENCE, _EXPLICIT_0 = 0x02, 0x03, 0x05, 0x06, 0x30, 0xA0

# Object identifiers, as DER content bytes
_RSA_ENCRYPTION = bytes.fromhex("2a864886f70d010101")  # 1.2.840.113549.1.1.1
_EC_PUBLIC_KEY = bytes.fromhex("2a8648ce3d0201")  # 1.2.840.10045.2.1
_PRIME256V1 = bytes.fromhex("2a8648ce3d030107")  # 1.2.840.10045.3.1.7

# NIST P-256: y^2 = x^3 - 3x + b over GF(p)
_P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B

_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


class KeyProblemError(ValueError):
    """The ``<cluster>-sa`` Secret holds no usable public key (waiting, not fatal)."""


@dataclass(frozen=True)
class RSAKey:
    """An RSA public key."""

    n: int
    e: int

    def spki_der(self) -> bytes:
        """Canonical DER SubjectPublicKeyInfo."""
        pkcs1 = _der(_SEQUENCE, _der_int(self.n) + _der_int(self.e))
        alg = _der(_SEQUENCE, _der(_OID, _RSA_ENCRYPTION) + _der(_NULL, b""))
        return _der(_SEQUENCE, alg + _der(_BIT_STRING, b"\x00" + pkcs1))


@dataclass(frozen=True)
class ECKey:
    """An ECDSA P-256 public key (a point on the curve)."""

    x: int
    y: int

    def spki_der(self) -> bytes:
        """Canonical DER SubjectPublicKeyInfo (uncompressed point)."""
        point = b"\x04" + self.x.to_bytes(32, "big") + self.y.to_bytes(32, "big")
        alg = _der(_SEQUENCE, _der(_OID, _EC_PUBLIC_KEY) + _der(_OID, _PRIME256V1))
        return _der(_SEQUENCE, alg + _der(_BIT_STRING, b"\x00" + point))


def load_public_key(pem: bytes) -> RSAKey | ECKey:
    """The public key of the first PEM block of ``pem``; KeyProblemError if there is none."""
    m = _PEM.search(pem)
    if m is None:
        raise KeyProblemError("tls.crt is not a PEM public key or certificate")
    label = m.group(1)
    try:
        der = base64.b64decode(b"".join(m.group(2).split()), validate=True)
    except (binascii.Error, ValueError) as err:
        raise KeyProblemError("tls.crt holds a PEM block that is not valid base64") from err
    try:
        if label == b"PUBLIC KEY":
            return _from_spki(_only(der, _SEQUENCE))
        if label == b"RSA PUBLIC KEY":
            return _rsa(_only(der, _SEQUENCE))
        if label == b"CERTIFICATE":
            return _from_spki(_certificate_spki(_only(der, _SEQUENCE)))
    except KeyProblemError:
        raise
    except (ValueError, IndexError) as err:  # _DERError, or a structure of the wrong size
        msg = f"tls.crt holds a malformed {label.decode()}"
        raise KeyProblemError(msg) from err
    msg = f"tls.crt holds a PEM {label.decode()}, not a PUBLIC KEY or CERTIFICATE"
    raise KeyProblemError(msg)


# --- reading --------------------------------------------------------------------


class _DERError(ValueError):
    pass


def _read(data: bytes, pos: int) -> tuple[int, bytes, int]:
    """(tag, content, position after) of the element at ``pos``."""
    if pos + 2 > len(data):
        raise _DERError("truncated")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if tag & 0x1F == 0x1F:
        raise _DERError("unexpected high tag number")
    if length & 0x80:
        n = length & 0x7F
        if not 1 <= n <= 4 or pos + n > len(data):
            raise _DERError("bad length")
        length = int.from_bytes(data[pos : pos + n], "big")
        if length < 0x80 or data[pos] == 0:
            raise _DERError("non-minimal length")
        pos += n
    end = pos + length
    if end > len(data):
        raise _DERError("truncated")
    return tag, data[pos:end], end


def _children(content: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(content):
        tag, value, pos = _read(content, pos)
        out.append((tag, value))
    return out


def _only(der: bytes, tag: int) -> bytes:
    got, value, end = _read(der, 0)
    if got != tag or end != len(der):
        raise _DERError("not a single DER SEQUENCE")
    return value


def _expect(item: tuple[int, bytes], tag: int, what: str) -> bytes:
    if item[0] != tag:
        raise _DERError(f"{what} missing")
    return item[1]


def _certificate_spki(cert: bytes) -> bytes:
    tbs = _children(_expect(_children(cert)[0], _SEQUENCE, "tbsCertificate"))
    if tbs and tbs[0][0] == _EXPLICIT_0:  # version
        tbs = tbs[1:]
    # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo
    return _expect(tbs[5], _SEQUENCE, "subjectPublicKeyInfo")


def _bit_string(content: bytes) -> bytes:
    if not content or content[0] != 0:
        raise _DERError("the key's BIT STRING has unused bits")
    return content[1:]


def _from_spki(spki: bytes) -> RSAKey | ECKey:
    algorithm, key = _children(spki)
    alg = _children(_expect(algorithm, _SEQUENCE, "algorithm"))
    oid = _expect(alg[0], _OID, "algorithm OID")
    bits = _bit_string(_expect(key, _BIT_STRING, "subjectPublicKey"))
    if oid == _RSA_ENCRYPTION:
        if alg[1:] != [(_NULL, b"")]:
            raise _DERError("rsaEncryption parameters are not NULL")
        return _rsa(_only(bits, _SEQUENCE))
    if oid == _EC_PUBLIC_KEY:
        if len(alg) != 2 or alg[1] != (_OID, _PRIME256V1):
            raise KeyProblemError("the key is ECDSA but not on curve P-256")
        return _p256(bits)
    raise KeyProblemError("the key is neither RSA (2048+ bits) nor ECDSA P-256")


def _int(item: tuple[int, bytes]) -> int:
    value = _expect(item, _INTEGER, "INTEGER")
    if not value:
        raise _DERError("empty INTEGER")
    if len(value) > 1 and (value[0], value[1] >> 7) in ((0x00, 0), (0xFF, 1)):
        raise _DERError("non-minimal INTEGER")
    return int.from_bytes(value, "big", signed=True)


def _rsa(pkcs1: bytes) -> RSAKey:
    items = _children(pkcs1)
    if len(items) != 2:
        raise _DERError("RSAPublicKey is not (modulus, exponent)")
    n, e = _int(items[0]), _int(items[1])
    if n <= 0 or e < 3 or e % 2 == 0 or e >= n:
        raise _DERError("invalid RSA modulus or exponent")
    return RSAKey(n, e)


def _p256(point: bytes) -> ECKey:
    if len(point) == 65 and point[0] == 4:
        x, y = int.from_bytes(point[1:33], "big"), int.from_bytes(point[33:], "big")
    elif len(point) == 33 and point[0] in (2, 3):
        x = int.from_bytes(point[1:], "big")
        y = pow((x * x * x - 3 * x + _B) % _P, (_P + 1) // 4, _P)  # p = 3 mod 4
        if y & 1 != point[0] & 1:
            y = _P - y
    else:
        raise _DERError("not a P-256 point")
    if x >= _P or y >= _P or (y * y - (x * x * x - 3 * x + _B)) % _P:
        raise KeyProblemError("the ECDSA key is not a point on curve P-256")
    return ECKey(x, y)


# --- writing --------------------------------------------------------------------


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes((tag, n)) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + content


def _der_int(n: int) -> bytes:
    return _der(_INTEGER, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True))
