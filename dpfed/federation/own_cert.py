"""An endpoint checks its OWN certificate and key at start-up: the cause of a TLS failure in its own log.

Without this, a coordinator with a garbage certificate died with gRPC's "Failed to bind to address", and a
party with an expired, foreign-CA or garbage certificate retried every 2 s forever while the real cause
appeared only in the coordinator's log (issue 29). :func:`check_own_certificate` reads the ``[tls]`` files
and raises :class:`CertificateProblem` with one line naming the file and the cause: a missing or unreadable
file, a certificate not signed by the configured CA, outside its validity period, of another role or name,
revoked by the CA's list, or a key that is not the certificate's.
"""
from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from dpfed.core.errors import DpfedError
from dpfed.federation.tls import TlsFiles, revoked_serials

__all__ = ["CertificateProblem", "check_own_certificate"]


class CertificateProblem(DpfedError, ValueError):
    """This endpoint's own certificate or key cannot work (the message names the file and the cause)."""


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CertificateProblem(f"{what} file not found: {path} (create it with 'dpfed certs')") from None
    except OSError as exc:
        raise CertificateProblem(f"{what} file {path} cannot be read: {exc.strerror or exc}") from None


def _load_cert(path: Path, what: str) -> x509.Certificate:
    data = _read(path, what)
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise CertificateProblem(f"{what} {path} is not a PEM certificate") from None


def check_own_certificate(files: TlsFiles, role: str, name: str | None = None) -> None:
    """Raise :class:`CertificateProblem` unless ``files`` hold a key and a certificate of ``role`` (and
    ``name``) that match, signed by the CA in ``files.ca``, valid now and not revoked (module docstring)."""
    ca = _load_cert(files.ca, "CA certificate")
    cert = _load_cert(files.cert, "certificate")
    key_pem = _read(files.key, "private key")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise CertificateProblem(f"private key {files.key} is not an unencrypted PEM private key") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if (key.public_key().public_bytes(serialization.Encoding.DER, pub)
            != cert.public_key().public_bytes(serialization.Encoding.DER, pub)):
        raise CertificateProblem(f"private key {files.key} does not belong to certificate {files.cert}")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateProblem(f"certificate {files.cert} is not signed by the CA in {files.ca} "
                                 f"({type(exc).__name__}): a certificate of another deployment?") from None
    now = datetime.datetime.now(datetime.timezone.utc)
    if now < cert.not_valid_before_utc:
        raise CertificateProblem(f"certificate {files.cert} is not valid before "
                                 f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    if now > cert.not_valid_after_utc:
        raise CertificateProblem(f"certificate {files.cert} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} "
                                 "UTC; request a new one ('dpfed certs request' / 'dpfed certs sign')")
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    have_name, have_role = (str(cn[0].value) if cn else ""), (str(ou[0].value) if ou else "")
    if have_role != role:
        raise CertificateProblem(f"certificate {files.cert} is of role {have_role or 'none'!r}, not {role!r}")
    if name is not None and have_name != name:
        raise CertificateProblem(f"certificate {files.cert} is issued to {have_name!r}, not to {name!r}")
    try:
        revoked = cert.serial_number in revoked_serials(files)
    except Exception as exc:  # noqa: BLE001 - an unreadable revocation list is a configuration problem too
        raise CertificateProblem(f"the revocation list beside {files.ca} cannot be used: {exc}") from None
    if revoked:
        raise CertificateProblem(f"certificate {files.cert} is revoked by the CA's list; request a new one")
