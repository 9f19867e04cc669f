"""Operator tokens for the coordinator's console and metrics: ``dpfed certs token NAME --ca DIR``.

A browser or a scraper that holds no operator certificate may present a token instead. A token is
``dpfed1.PAYLOAD.SIGNATURE``: PAYLOAD is base64url JSON ``{"sub": NAME, "role": "operator", "iat", "exp",
"jti"}``, SIGNATURE the CA key's ECDSA-P256/SHA-256 signature over ``dpfed1.PAYLOAD``. The coordinator
checks it with the CA certificate it already holds (no shared secret, no token list to keep): signed by
the deployment CA, role operator, not expired. Tokens cannot be revoked one by one, so they are short-lived
(default 12 hours, at most 30 days); revoking a name's certificates does not end its tokens early.
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import time
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dpfed.core.errors import DpfedError
from dpfed.core.names import valid_name

__all__ = ["TokenError", "issue_token", "verify_token", "MAX_HOURS"]

PREFIX = "dpfed1"
MAX_HOURS = 30 * 24
MAX_TOKEN_CHARS = 2048


class TokenError(DpfedError, ValueError):
    """A token that does not let its bearer in (malformed, not signed by the CA, expired, wrong role)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(name: str, ca_dir: str | os.PathLike, *, hours: float = 12.0, now: float | None = None) -> str:
    """A token for operator ``name``, signed with the CA key in ``ca_dir``, valid for ``hours``."""
    if not valid_name(name):
        raise ValueError(f"invalid operator name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if not 0 < hours <= MAX_HOURS:
        raise ValueError(f"hours must be in (0, {MAX_HOURS}], got {hours!r}")
    try:
        key = serialization.load_pem_private_key((Path(ca_dir) / "ca.key").read_bytes(), password=None)
    except FileNotFoundError:
        raise FileNotFoundError(f"{ca_dir} holds no CA key (ca.key); run 'dpfed certs init {ca_dir}' first") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    t = time.time() if now is None else now
    payload = {"sub": name, "role": "operator", "iat": int(t), "exp": int(t + hours * 3600),
               "jti": secrets.token_hex(8)}
    head = f"{PREFIX}.{_b64(json.dumps(payload, sort_keys=True).encode())}"
    return f"{head}.{_b64(key.sign(head.encode(), ec.ECDSA(hashes.SHA256())))}"


def verify_token(token: str, ca_cert: str | os.PathLike | bytes, *, now: float | None = None) -> str:
    """The operator name a valid token carries, or :class:`TokenError` saying why it is refused."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise TokenError("malformed token")
    prefix, body, sig = token.split(".")
    if prefix != PREFIX:
        raise TokenError("not a dpfed operator token")
    pem = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
    public = x509.load_pem_x509_certificate(pem).public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise TokenError("the CA key is not an ECDSA key")
    try:
        public.verify(_unb64(sig), f"{prefix}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
        claims = json.loads(_unb64(body))
    except (InvalidSignature, ValueError):
        raise TokenError("the token is not signed by this deployment's CA") from None
    if not isinstance(claims, dict) or claims.get("role") != "operator" or not valid_name(str(claims.get("sub"))):
        raise TokenError("not an operator token")
    t = time.time() if now is None else now
    if not isinstance(claims.get("exp"), int) or t >= claims["exp"]:
        raise TokenError("the token has expired")
    return str(claims["sub"])
