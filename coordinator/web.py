"""The coordinator's read-only HTTPS endpoints (console and metrics) and who may read them.

Server: the standard library's ``ThreadingHTTPServer`` wrapped in ``ssl``, in a daemon thread. Why not a
web framework: the endpoints are a few read-only GET routes next to a threaded gRPC server; what they need
from a server is mutual TLS with our CA and revocation list checked on every request, which the ``ssl``
module gives directly (the peer's verified certificate), and nothing else (no forms, no sessions, no
asyncio loop beside gRPC's threads). The TLS handshake runs in the request's own thread (a slow client
holds only its thread), every socket has a timeout, and only GET and HEAD are answered.

Who gets in (:class:`Access`): a client certificate of our CA with role ``operator`` that is not revoked,
or an operator token (:mod:`dpfed.federation.console_token`, ``dpfed certs token``) as ``Authorization:
Bearer TOKEN``, as the cookie the console sets, or once as ``?token=`` (answered with the cookie and a
redirect that drops it from the address). A party or coordinator certificate, a revoked operator
certificate, a bad or expired token and no credential at all get 403. A coordinator with ``insecure =
true`` serves plain HTTP on 127.0.0.1 only, to anyone there (debugging only, warned).
"""
from __future__ import annotations

import http.server
import logging
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import cookies
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from cryptography import x509
from cryptography.x509.oid import NameOID

from dpfed.core.errors import DpfedError
from dpfed.federation.console_token import TokenError, verify_token
from dpfed.federation.http_thread import ThreadedHTTPServer
from dpfed.federation.tls import PeerRefused, TlsFiles, revoked_serials

__all__ = ["Access", "Denied", "Reply", "Route", "WebServer", "start_web", "COOKIE"]

log = logging.getLogger("dpfed.coordinator.web")

COOKIE = "dpfed_operator"
SECURITY_HEADERS = (("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                     "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                     "form-action 'none'"),
                    ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                    ("Cache-Control", "no-store"), ("X-Frame-Options", "DENY"))


class Denied(DpfedError):
    """A request that does not get in; the message says why (shown to the client: no secrets in it)."""


@dataclass
class Reply:
    """A route's answer: a body (bytes), or ``stream`` (an iterator of chunks, e.g. server-sent events)."""

    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    stream: Iterator[bytes] | None = None


Route = Callable[[dict[str, str]], Reply]


class Access:
    """Decides whether a request is an operator's (see the module's docstring)."""

    def __init__(self, tls: TlsFiles | None) -> None:
        self.tls = tls

    def operator(self, peer_der: bytes | None, headers: Any, query: dict[str, str]) -> str:
        """The operator's name, or :class:`Denied`."""
        if self.tls is None:
            return "insecure"
        if peer_der:
            cert = x509.load_der_x509_certificate(peer_der)  # verified by the handshake against our CA
            cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
            name, role = (str(cn[0].value) if cn else ""), (str(ou[0].value) if ou else "")
            if role != "operator":
                raise Denied(f"certificate {name!r} has role {role or 'none'!r}, not operator")
            try:
                if cert.serial_number in revoked_serials(self.tls):
                    raise Denied(f"operator certificate {name!r} is revoked")
            except PeerRefused as exc:
                raise Denied(str(exc)) from None
            return name
        token = query.get("token") or _bearer(headers) or _cookie(headers)
        if not token:
            raise Denied("an operator certificate or operator token is required (dpfed certs token NAME --ca DIR)")
        try:
            return verify_token(token, self.tls.ca)
        except TokenError as exc:
            raise Denied(f"token refused: {exc}") from None


def _bearer(headers: Any) -> str:
    value = headers.get("Authorization", "")
    return value[7:].strip() if value.lower().startswith("bearer ") else ""


def _cookie(headers: Any) -> str:
    raw = headers.get("Cookie", "")
    if not raw:
        return ""
    try:
        jar = cookies.SimpleCookie(raw)
    except cookies.CookieError:
        return ""
    return jar[COOKIE].value if COOKIE in jar else ""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: WebServer
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # here, in this request's thread, within its timeout

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, ConnectionError, TimeoutError, socket.timeout):
            pass

    def _send(self, reply: Reply, extra: tuple[tuple[str, str], ...] = (), head: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        for k, v in (*SECURITY_HEADERS, *extra):
            self.send_header(k, v)
        if reply.stream is not None:
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for chunk in reply.stream:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (ConnectionError, TimeoutError, ssl.SSLError, OSError):
                return
            return
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if not head:
            self.wfile.write(reply.body)

    def _get(self, head: bool) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        peer = self.connection.getpeercert(binary_form=True) if isinstance(self.connection, ssl.SSLSocket) else None
        try:
            who = self.server.access.operator(peer, self.headers, query)
        except Denied as exc:
            log.info("refused %s %s: %s", self.address_string(), url.path, exc)
            self._send(Reply(f"403 forbidden: {exc}\n".encode(), "text/plain; charset=utf-8", 403), head=head)
            return
        if "token" in query and self.server.tls:  # once in the address: keep it in a cookie, drop it from the URL
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            cookie = f"{COOKIE}={query['token']}; Path=/; Secure; HttpOnly; SameSite=Strict"
            self._send(Reply(b"", status=303), (("Location", url.path + (f"?{rest}" if rest else "")),
                                                ("Set-Cookie", cookie)), head=head)
            return
        route = self.server.routes.get(url.path) or self.server.prefix_route(url.path)
        if route is None:
            self._send(Reply(b"404 not found\n", "text/plain; charset=utf-8", 404), head=head)
            return
        query["_path"], query["_operator"] = url.path, who
        try:
            reply = route(query)
        except Exception:  # noqa: BLE001 - the coordinator keeps serving whatever a page does
            log.exception("console page %s failed", url.path)
            reply = Reply(b"500 internal error (see the coordinator's log)\n", "text/plain; charset=utf-8", 500)
        self._send(reply, head=head)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._get(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(head=True)

    def _read_only(self) -> None:
        self._send(Reply(b"405 read-only: GET and HEAD only\n", "text/plain; charset=utf-8", 405),
                   (("Allow", "GET, HEAD"),))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _read_only  # noqa: N815


class WebServer(ThreadedHTTPServer):
    """HTTPS (or, insecure, plain HTTP on loopback) with a table of read-only routes."""

    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], routes: dict[str, Route], tls: TlsFiles | None,
                 prefixes: dict[str, Route] | None = None) -> None:
        self.routes, self.prefixes, self.tls, self.access = routes, prefixes or {}, tls, Access(tls)
        self.context: ssl.SSLContext | None = None
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(str(tls.cert), str(tls.key))
            ctx.load_verify_locations(cafile=str(tls.ca))
            ctx.verify_mode = ssl.CERT_OPTIONAL  # a certificate, or a token, decides (Access)
            self.context = ctx
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        sock.settimeout(_Handler.timeout)
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (a refused handshake, a client gone): logged, not printed as a traceback."""
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def prefix_route(self, path: str) -> Route | None:
        for prefix, route in self.prefixes.items():
            if path.startswith(prefix):
                return route
        return None

def start_web(host: str, port: int, routes: dict[str, Route], tls: TlsFiles | None, name: str,
              prefixes: dict[str, Route] | None = None) -> WebServer:
    """Start a :class:`WebServer` in a daemon thread; ``tls`` None (insecure coordinator): 127.0.0.1 only."""
    if tls is None:
        log.warning("%s: plain HTTP without TLS or access control on 127.0.0.1:%d (insecure coordinator: "
                    "debugging only)", name, port)
        host = "127.0.0.1"
    server = WebServer((host, port), routes, tls, prefixes)
    server.start(f"dpfed-{name}")
    log.info("%s on https://%s:%d/", name, host, server.port)
    return server
