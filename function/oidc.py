"""The two public documents of a self-hosted service-account issuer.

The JWKS is computed from the public half of CAPI's ``<cluster>-sa`` key pair
(``tls.crt``). Only that public key is ever parsed here; the private key
(``tls.key``) is never read by the function.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json

from function import keys
from function.keys import KeyProblemError

__all__ = ["KeyProblemError", "discovery_document", "jwks_algorithms", "jwks_document"]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8 or 1, "big"))


@functools.lru_cache(maxsize=256)  # per issuer: it never changes for an XR
def discovery_document(issuer_url: str, algorithms: tuple[str, ...] = ("RS256",)) -> str:
    """The ``.well-known/openid-configuration`` document, as compact JSON.

    ``algorithms`` are those of the keys the JWKS publishes, nothing more.
    """
    doc = {
        "issuer": issuer_url,
        "jwks_uri": f"{issuer_url}/keys.json",
        "authorization_endpoint": "urn:kubernetes:programmatic_authorization",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": list(algorithms),
        "claims_supported": ["sub", "iss"],
    }
    return json.dumps(doc, separators=(",", ":"))


@functools.lru_cache(maxsize=256)
def jwks_algorithms(public_pem: bytes) -> tuple[str, ...]:
    """The signing algorithms of the keys in ``jwks_document(public_pem)``."""
    return tuple(k["alg"] for k in json.loads(jwks_document(public_pem))["keys"])


@functools.lru_cache(maxsize=256)
def jwks_document(public_pem: bytes) -> str:
    """The JWKS (``keys.json``) for a PEM public key or certificate, as compact JSON.

    The ``kid`` is base64url(SHA-256(DER SubjectPublicKeyInfo)), as kube-apiserver
    computes it, so tokens' ``kid`` headers match. Cached by key: it changes only
    when the cluster's key pair does.
    """
    key = keys.load_public_key(public_pem)
    kid = _b64url(hashlib.sha256(key.spki_der()).digest())
    if isinstance(key, keys.RSAKey):
        if key.n.bit_length() < 2048:
            msg = f"the RSA key has {key.n.bit_length()} bits; STS needs at least 2048"
            raise KeyProblemError(msg)
        jwk = {"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256"}
        jwk |= {"n": _uint(key.n), "e": _uint(key.e)}
    else:
        jwk = {"use": "sig", "kty": "EC", "kid": kid, "alg": "ES256", "crv": "P-256"}
        jwk |= {"x": _b64url(key.x.to_bytes(32, "big")), "y": _b64url(key.y.to_bytes(32, "big"))}
    return json.dumps({"keys": [jwk]}, separators=(",", ":"))
