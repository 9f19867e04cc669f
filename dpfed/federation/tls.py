"""Transport security shared by both ends: mutual TLS credentials and the peer's identity.

Mutual TLS is the default: the coordinator requires a client certificate signed by the
deployment's CA, and clients verify the coordinator's certificate against the same CA. The
identity of a caller is the common name of its certificate; its role (party/operator) is the
certificate's organizational unit (see :mod:`dpfed.federation.certs`). ``insecure`` (plain text) exists
for debugging only and always warns loudly.

Both ends refuse revoked certificates: the CA's revocation list (``crl`` in the ``[tls]`` table, or
``crl.pem`` beside the CA certificate) is checked against its CA signature and re-read when it
changes. A party also checks, before it registers, that the server it dialled holds a
*coordinator* certificate (:func:`check_coordinator`): gRPC verifies the chain and the host name,
and only coordinator certificates carry serverAuth and host names, but certificates issued before
that rule carried both for every role.
"""
from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from dpfed.core.errors import DpfedError

__all__ = ["TlsFiles", "server_credentials", "channel_credentials", "peer_identity", "warn_insecure",
           "INSECURE_WARNING", "PeerRefused", "check_coordinator", "revoked_serials", "peer_revoked",
           "peer_certificate_facts", "TlsFileMissing", "HandshakeFailed"]

INSECURE_WARNING = ("WARNING: --insecure: plain-text gRPC WITHOUT TLS. Anyone on the network can read "
                    "the released statistics and impersonate parties or the coordinator. Use only for "
                    "local debugging.")


class TlsFileMissing(DpfedError, FileNotFoundError):
    """A certificate, key or CA file named in the configuration does not exist (one line names it)."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one endpoint: the CA certificate, its own certificate and private key."""

    ca: Path
    cert: Path
    key: Path
    crl: Path | None = None  # default: crl.pem beside the CA certificate, when it exists

    def crl_path(self) -> Path | None:
        if self.crl is not None:
            return Path(self.crl)
        beside = Path(self.ca).parent / "crl.pem"
        return beside if beside.exists() else None

    def read(self) -> tuple[bytes, bytes, bytes]:
        try:
            return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()
        except FileNotFoundError as exc:
            raise TlsFileMissing(f"TLS file missing: {exc.filename} (create it with 'dpfed certs')") from None


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Server side of mutual TLS: clients must present a certificate signed by our CA."""
    ca, cert, key = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Client side of mutual TLS: verify the server against the CA, present our certificate."""
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def peer_identity(context: grpc.ServicerContext) -> tuple[str, str] | None:
    """(common name, role) of the caller's verified certificate, or None on a plain-text channel."""
    auth = context.auth_context()
    pem = auth.get("x509_pem_cert")
    if pem:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        cert = x509.load_pem_x509_certificate(pem[0])  # already verified by the TLS handshake
        cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        return (str(cn[0].value) if cn else "", str(ou[0].value) if ou else "")
    cn = auth.get("x509_common_name")
    if cn:
        return cn[0].decode(), ""
    return None


def peer_certificate_facts(context: grpc.ServicerContext) -> dict[str, float | str]:
    """Public facts of the caller's verified certificate for the operator's console: its expiry (unix time)
    and serial number (hex); empty on a plain-text channel."""
    pem = context.auth_context().get("x509_pem_cert")
    if not pem:
        return {}
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem[0])
    return {"cert_expires": cert.not_valid_after_utc.timestamp(), "cert_serial": format(cert.serial_number, "x")}


class PeerRefused(DpfedError, ConnectionError):
    """The other end's certificate is revoked or does not have the role this end needs."""


class HandshakeFailed(PeerRefused):
    """The TLS handshake failed: one side does not accept the other's certificate. ``refused_us``: the server
    refused this end's certificate (a party stops after ``max_auth_failures`` of these in a row), not the reverse."""

    def __init__(self, message: str, *, refused_us: bool = False) -> None:
        super().__init__(message)
        self.refused_us = refused_us


_CRL_CACHE: dict[tuple[str, int, int], frozenset[int]] = {}
_CRL_LOCK = threading.Lock()


def revoked_serials(files: TlsFiles | None) -> frozenset[int]:
    """Serials on the deployment's revocation list (empty without one); re-read when the file changes."""
    path = None if files is None else files.crl_path()
    if path is None:
        return frozenset()
    from dpfed.federation.certs import revoked_serials as load

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise PeerRefused(f"revocation list {path} is missing") from None
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _CRL_LOCK:
        hit = _CRL_CACHE.get(key)
        if hit is None:
            hit = frozenset(load(path, files.ca))
            _CRL_CACHE[key] = hit
        return hit


def peer_revoked(context: grpc.ServicerContext, files: TlsFiles | None) -> bool:
    """True when the caller's (verified) certificate is on the revocation list."""
    pem = context.auth_context().get("x509_pem_cert")
    if not pem or files is None:
        return False
    revoked = revoked_serials(files)
    if not revoked:
        return False
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem[0]).serial_number in revoked


def _host_port(address: str) -> tuple[str, int]:
    addr = address.split("://", 1)[-1].lstrip("/")
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def _server_accepts(tls: ssl.SSLSocket, address: str) -> None:
    """Under TLS 1.3 the client's handshake ends before the server has checked the client's certificate: read the
    server's first bytes (gRPC sends its HTTP/2 settings at once), so that a refusal of OUR certificate (an alert:
    unknown CA, expired, revoked) is seen here, with its cause, not as a closed socket later."""
    tls.settimeout(2.0)
    try:
        first = tls.recv(1)
    except ssl.SSLError as exc:
        raise HandshakeFailed(f"the server at {address} refused this party's certificate: {exc.reason or exc}",
                              refused_us=True) from None
    except OSError:  # a timeout or a reset says nothing about the certificate
        return
    if first == b"":  # a gRPC server sends its settings at once; closing instead is how it refuses a client
        raise HandshakeFailed(f"the server at {address} closed the connection right after the TLS handshake: it does "
                              "not accept this party's certificate (another CA? revoked there?)", refused_us=True)


def check_coordinator(address: str, files: TlsFiles, timeout: float = 10.0) -> str:
    """Handshake with ``address`` as gRPC will (mutual TLS, HTTP/2 ALPN) and check that the server's
    certificate is an unrevoked *coordinator* certificate of our CA; return its name or raise
    :class:`PeerRefused` (``OSError`` when it cannot be reached)."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # gRPC checks the host name on its own connection; here: chain and role
    ctx.load_verify_locations(cafile=str(files.ca))
    ctx.load_cert_chain(str(files.cert), str(files.key))
    ctx.set_alpn_protocols(["h2"])
    host, port = _host_port(address)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=host or None) as tls:
                der = tls.getpeercert(binary_form=True)
                _server_accepts(tls, address)
        except ssl.SSLError as exc:
            raise HandshakeFailed(f"TLS handshake with {address} failed: {exc.reason or exc}") from None
    cert = x509.load_der_x509_certificate(der)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    name, role = (str(cn[0].value) if cn else ""), (str(ou[0].value) if ou else "")
    if role != "coordinator":
        raise PeerRefused(f"the server at {address} presents certificate {name!r} of role {role or 'none'!r}, "
                          "not a coordinator certificate; not registering")
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.SERVER_AUTH not in eku:
            raise PeerRefused(f"the coordinator certificate {name!r} is not valid for a server")
    except x509.ExtensionNotFound:
        pass
    if cert.serial_number in revoked_serials(files):
        raise PeerRefused(f"the coordinator certificate {name!r} is revoked; not registering")
    return name


def warn_insecure(logger: logging.Logger | None = None) -> None:
    """Print the plain-text warning to stderr (and the log)."""
    print(INSECURE_WARNING, file=sys.stderr, flush=True)
    if logger is not None:
        logger.warning(INSECURE_WARNING)
