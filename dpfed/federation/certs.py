"""A small certificate authority for dpfed deployments and simulations (``dpfed certs``).

``init_ca(DIR)`` writes ``ca.crt`` and ``ca.key``. Keys never need to leave a site:
``request(NAME, role, OUT)`` writes ``NAME.key`` and a certificate signing request ``NAME.csr`` at
the site, ``sign(CSR, ca_dir)`` signs it at the CA (``NAME.crt`` beside the CSR, with a copy of
``ca.crt``), and ``revoke(NAME, ca_dir)`` puts every certificate issued to NAME on the CA's
certificate revocation list ``crl.pem``, which coordinator and parties load (:mod:`dpfed.federation.tls`)
and refuse revoked certificates by. ``issue(NAME, ca_dir)`` does request and sign in one place
(simulations, tests). Keys are ECDSA P-256, written with mode 0600.

The certificate's common name is the identity the coordinator trusts (a party's name), its
organizational unit the role (``party``, ``coordinator``, ``operator``). Only a coordinator
certificate may serve: it alone gets the serverAuth extended key usage and subject alternative
names (its name, ``localhost``, ``127.0.0.1`` and any ``sans``); party and operator certificates get
clientAuth only and no host names (one URI SAN ``urn:dpfed:ROLE:NAME``), so they cannot pass as a
server a party would dial. Every
certificate the CA signs is listed in ``DIR/issued.jsonl`` (serial, name, role) for revocation.
"""
from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dpfed.core import names

__all__ = ["ROLES", "init_ca", "issue", "request", "sign", "revoke", "revoked_serials", "cert_identity",
           "default_role", "valid_name", "CRL_FILE"]

CRL_FILE = "crl.pem"

ROLES = ("party", "coordinator", "operator")


def valid_name(name: str) -> bool:
    """Names are 1-64 characters of letters, digits, '.', '_' and '-' (they become file names)."""
    return names.valid_name(name)  # one rule (dpfed.core.names): the whole string, no trailing newline


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


def _load_ca(ca_dir: str | os.PathLike) -> tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca = Path(ca_dir)
    try:
        ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), password=None)
    except FileNotFoundError:
        raise FileNotFoundError(f"{ca} holds no CA (ca.crt and ca.key); run 'dpfed certs init {ca}' first") from None
    return ca, ca_cert, ca_key  # type: ignore[return-value]


def _check(name: str, role: str) -> None:
    if not valid_name(name):
        raise ValueError(f"invalid name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")


def _subject(name: str, role: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dpfed")])


def _general_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    alt: list[x509.GeneralName] = []
    for s in hosts:
        try:
            gn: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(s))
        except ValueError:
            gn = x509.DNSName(s)
        if gn not in alt:
            alt.append(gn)
    return alt


def request(name: str, role: str | None = None, out_dir: str | os.PathLike = ".", *,
            sans: Sequence[str] = ()) -> tuple[Path, Path]:
    """At the site: a new key ``NAME.key`` and a signing request ``NAME.csr`` in ``out_dir``; return both.

    ``sans`` (host names or addresses) are requested for a coordinator only.
    """
    role = role or default_role(name)
    _check(name, role)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(_subject(name, role))
    if role == "coordinator" and sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(_general_names(sans)), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    key_path, csr_path = out / f"{name}.key", out / f"{name}.csr"
    _write_private(key_path, _key_pem(key))
    csr_path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return key_path, csr_path


def sign(csr_path: str | os.PathLike, ca_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
         days: int = 825) -> Path:
    """At the CA: sign a request from :func:`request`; write ``NAME.crt`` (and ``ca.crt``) to ``out_dir``
    (default: beside the CSR) and return its path. The name and role come from the request's subject."""
    csr_file = Path(csr_path)
    try:
        csr = x509.load_pem_x509_csr(csr_file.read_bytes())
    except FileNotFoundError:
        raise FileNotFoundError(f"signing request not found: {csr_file}") from None
    except ValueError:
        raise ValueError(f"{csr_file}: not a PEM certificate signing request") from None
    if not csr.is_signature_valid:
        raise ValueError(f"{csr_file}: the request's signature is invalid")
    cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ou = csr.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    name, role = (str(cn[0].value) if cn else ""), (str(ou[0].value) if ou else "")
    _check(name, role)
    sans: list[str] = []
    try:
        ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = [*ext.get_values_for_type(x509.DNSName), *map(str, ext.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        pass
    out = Path(out_dir) if out_dir is not None else csr_file.parent
    return _sign_key(name, role, csr.public_key(), ca_dir, out, sans, days)  # type: ignore[arg-type]


def _sign_key(name: str, role: str, public_key: ec.EllipticCurvePublicKey, ca_dir: str | os.PathLike, out: Path,
              sans: Sequence[str], days: int) -> Path:
    ca, ca_cert, ca_key = _load_ca(ca_dir)
    now = _dt.datetime.now(_dt.timezone.utc)
    serial = x509.random_serial_number()
    builder = (x509.CertificateBuilder().subject_name(_subject(name, role)).issuer_name(ca_cert.subject)
               .public_key(public_key).serial_number(serial)
               .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if role == "coordinator":  # the only certificate a party accepts as its server
        builder = (builder.add_extension(x509.SubjectAlternativeName(
                       _general_names((name, "localhost", "127.0.0.1", *sans))), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    else:  # no host names: only a URI naming the identity (verifiers require some SAN)
        builder = (builder.add_extension(x509.SubjectAlternativeName(
                       [x509.UniformResourceIdentifier(f"urn:dpfed:{role}:{name}")]), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    cert = builder.sign(ca_key, hashes.SHA256())
    out.mkdir(parents=True, exist_ok=True)
    crt_path = out / f"{name}.crt"
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if (out / "ca.crt").resolve() != (ca / "ca.crt").resolve():
        shutil.copyfile(ca / "ca.crt", out / "ca.crt")
    with open(ca / "issued.jsonl", "a") as fh:
        fh.write(json.dumps({"serial": str(serial), "name": name, "role": role,
                             "not_after": (now + _dt.timedelta(days=days)).isoformat()}) + "\n")
    return crt_path


def issue(name: str, ca_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
          role: str | None = None, sans: Sequence[str] = (), days: int = 825) -> tuple[Path, Path]:
    """Key and certificate for ``name`` in one step (the key is made here); return (cert, key) paths.

    Written to ``out_dir`` (default ``ca_dir``) as ``NAME.crt``/``NAME.key``, with ``ca.crt``
    copied beside them. ``role`` defaults to :func:`default_role`. ``sans`` adds DNS names or IP
    addresses to a coordinator certificate (which always names ``localhost`` and ``127.0.0.1``);
    party and operator certificates carry no host names. Deployments use :func:`request` + :func:`sign`.
    """
    role = role or default_role(name)
    _check(name, role)
    _load_ca(ca_dir)
    out = Path(out_dir) if out_dir is not None else Path(ca_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    key_path = out / f"{name}.key"
    crt_path = _sign_key(name, role, key.public_key(), ca_dir, out, sans, days)
    _write_private(key_path, _key_pem(key))
    return crt_path, key_path


def _issued(ca: Path) -> list[dict]:
    try:
        lines = (ca / "issued.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def revoke(name: str, ca_dir: str | os.PathLike) -> Path:
    """Revoke every certificate the CA issued to ``name``: (re)write and sign ``DIR/crl.pem``; return it.

    Copy ``crl.pem`` beside ``ca.crt`` at the coordinator and every party (or name it as ``crl`` in
    the ``[tls]`` table); they reload it when it changes and refuse the revoked certificates.
    """
    ca, ca_cert, ca_key = _load_ca(ca_dir)
    serials = {int(r["serial"]) for r in _issued(ca) if r.get("name") == name}
    legacy = ca / f"{name}.crt"  # issued before the CA kept issued.jsonl
    if legacy.exists():
        cert = x509.load_pem_x509_certificate(legacy.read_bytes())
        if cert.issuer == ca_cert.subject:
            serials.add(cert.serial_number)
    if not serials:
        raise ValueError(f"the CA in {ca} has no record of a certificate issued to {name!r}")
    now = _dt.datetime.now(_dt.timezone.utc)
    old = revoked_serials(ca / CRL_FILE, ca / "ca.crt") if (ca / CRL_FILE).exists() else set()
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject).last_update(now)
               .next_update(now + _dt.timedelta(days=3650)))
    for serial in sorted(old | serials):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
    crl = builder.sign(ca_key, hashes.SHA256())
    path = ca / CRL_FILE
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return path


def revoked_serials(crl_path: str | os.PathLike, ca_path: str | os.PathLike) -> set[int]:
    """Serial numbers on a CRL, after checking that the CA in ``ca_path`` signed it (ValueError if not)."""
    crl = x509.load_pem_x509_crl(Path(crl_path).read_bytes())
    ca = x509.load_pem_x509_certificate(Path(ca_path).read_bytes())
    if crl.issuer != ca.subject or not crl.is_signature_valid(ca.public_key()):  # type: ignore[arg-type]
        raise ValueError(f"{crl_path}: the revocation list is not signed by the CA in {ca_path}")
    return {r.serial_number for r in crl}


def cert_identity(pem: bytes) -> tuple[str, str]:
    """(common name, role) of a PEM certificate (role '' when the certificate names none)."""
    cert = x509.load_pem_x509_certificate(pem)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return (str(cn[0].value) if cn else "", str(ou[0].value) if ou else "")
