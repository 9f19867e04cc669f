"""Transport security shared by both ends: mutual TLS credentials and the peer's identity.

Mutual TLS is the default: the coordinator requires a client certificate signed by the
deployment's CA, and clients verify the coordinator's certificate against the same CA. The
identity of a caller is the common name of its certificate; its role (party/operator) is the
certificate's organizational unit (see :mod:`dpfed.federation.certs`). ``insecure`` (plain text) exists
for debugging only and always warns loudly.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["TlsFiles", "server_credentials", "channel_credentials", "peer_identity", "warn_insecure",
           "INSECURE_WARNING"]

INSECURE_WARNING = ("WARNING: --insecure: plain-text gRPC WITHOUT TLS. Anyone on the network can read "
                    "the released statistics and impersonate parties or the coordinator. Use only for "
                    "local debugging.")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one endpoint: the CA certificate, its own certificate and private key."""

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        try:
            return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"TLS file missing: {exc.filename} (create it with 'dpfed certs')") from None


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


def warn_insecure(logger: logging.Logger | None = None) -> None:
    """Print the plain-text warning to stderr (and the log)."""
    print(INSECURE_WARNING, file=sys.stderr, flush=True)
    if logger is not None:
        logger.warning(INSECURE_WARNING)
