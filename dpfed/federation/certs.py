"""A small certificate authority for dpfed deployments and simulations (``dpfed certs``).

``init_ca(DIR)`` writes ``ca.crt`` and ``ca.key``; ``issue(NAME, ca_dir)`` writes ``NAME.crt`` and
``NAME.key`` (and a copy of ``ca.crt``) for a party, the coordinator or an operator. Keys are
ECDSA P-256, written with mode 0600. The certificate's common name is the identity the coordinator
trusts (a party's name), its organizational unit the role (``party``, ``coordinator``,
``operator``), and its subject alternative names include ``localhost`` and ``127.0.0.1`` so a
coordinator certificate works on loopback (add real host names with ``sans``).
"""
from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ROLES", "init_ca", "issue", "cert_identity", "default_role", "valid_name"]

ROLES = ("party", "coordinator", "operator")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def valid_name(name: str) -> bool:
    """Names are 1-64 characters of letters, digits, '.', '_' and '-' (they become file names)."""
    return bool(_NAME.match(name))


def default_role(name: str) -> str:
    """``coordinator`` and ``operator``/``admin`` name themselves; anything else is a party."""
    if name == "coordinator":
        return "coordinator"
    if name in ("operator", "admin"):
        return "operator"
    return "party"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def init_ca(directory: str | os.PathLike, *, common_name: str = "dpfed CA", days: int = 3650,
            overwrite: bool = False) -> Path:
    """Create a CA in ``directory`` (``ca.crt``, ``ca.key``); return the certificate path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    crt, keyf = d / "ca.crt", d / "ca.key"
    if not overwrite and (crt.exists() or keyf.exists()):
        raise FileExistsError(f"{d} already holds a CA (ca.crt/ca.key); refusing to overwrite it")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dpfed")])
    now = _dt.datetime.now(_dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(keyf, _key_pem(key))
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt


def issue(name: str, ca_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
          role: str | None = None, sans: Sequence[str] = (), days: int = 825) -> tuple[Path, Path]:
    """Issue a certificate for ``name`` signed by the CA in ``ca_dir``; return (cert, key) paths.

    Written to ``out_dir`` (default ``ca_dir``) as ``NAME.crt``/``NAME.key``, with ``ca.crt``
    copied beside them. ``role`` defaults to :func:`default_role`. ``sans`` adds DNS names or IP
    addresses (``localhost`` and ``127.0.0.1`` are always included).
    """
    if not valid_name(name):
        raise ValueError(f"invalid name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    role = role or default_role(name)
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    ca = Path(ca_dir)
    try:
        ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), password=None)
    except FileNotFoundError:
        raise FileNotFoundError(f"{ca} holds no CA (ca.crt and ca.key); run 'dpfed certs init {ca}' first") from None
    out = Path(out_dir) if out_dir is not None else ca
    out.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dpfed")])
    alt: list[x509.GeneralName] = []
    for s in (name, "localhost", "127.0.0.1", *sans):
        try:
            gn: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(s))
        except ValueError:
            gn = x509.DNSName(s)
        if gn not in alt:
            alt.append(gn)
    now = _dt.datetime.now(_dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt_path, key_path = out / f"{name}.crt", out / f"{name}.key"
    _write_private(key_path, _key_pem(key))
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if (out / "ca.crt").resolve() != (ca / "ca.crt").resolve():
        shutil.copyfile(ca / "ca.crt", out / "ca.crt")
    return crt_path, key_path


def cert_identity(pem: bytes) -> tuple[str, str]:
    """(common name, role) of a PEM certificate (role '' when the certificate names none)."""
    cert = x509.load_pem_x509_certificate(pem)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return (str(cn[0].value) if cn else "", str(ou[0].value) if ou else "")
