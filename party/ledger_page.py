"""The party daemon's ledger page for its data owner: ``console_port`` in ``party.toml``.

The same report as ``dpfed party ledger`` (:mod:`party.ledger_report`), served fresh on every request by the
running daemon at ``http://127.0.0.1:PORT/`` (``/ledger.json``, ``/ledger.csv`` too). Loopback only, by
construction (the address is not configurable), plain HTTP and no login: whoever can open a connection on
the party's own machine can read it, as they could read the ledger file; put nothing in front of it that
exposes it further. It answers only requests addressed to ``127.0.0.1:PORT`` or ``localhost:PORT`` (the Host
header; anything else gets 421): a web page elsewhere whose own name is made to resolve to 127.0.0.1 (DNS
rebinding) would otherwise read the ledger through the data owner's browser. Read-only: GET and HEAD, nothing
else. The standard library's server, in a daemon thread (see coordinator/web.py on why no framework).
"""
from __future__ import annotations

import http.server
import json
import logging
from typing import Any

from dpfed.core.ledger import BudgetLedger
from dpfed.federation.http_thread import ThreadedHTTPServer
from party.ledger_report import ledger_report, report_csv, report_html

__all__ = ["LedgerPage", "serve_ledger_page"]

log = logging.getLogger("dpfed.party")

_HEADERS = (("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:"),
            ("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store"), ("Referrer-Policy", "no-referrer"))


class _Handler(http.server.BaseHTTPRequestHandler):
    server: LedgerPage
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("ledger page: %s", format % args)

    def _reply(self, status: int, body: bytes, kind: str, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in _HEADERS:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _get(self, head: bool) -> None:
        port = self.server.port
        host = self.headers.get("Host", "")
        if host not in (f"127.0.0.1:{port}", f"localhost:{port}"):  # another name resolved to 127.0.0.1
            self._reply(421, f"421 this page answers only at http://127.0.0.1:{port}/ (asked for host "
                             f"{host[:80]!r})\n".encode(), "text/plain; charset=utf-8", head)
            return
        path = self.path.split("?", 1)[0]
        if path not in ("/", "/ledger.json", "/ledger.csv"):
            self._reply(404, b"404 not found\n", "text/plain; charset=utf-8", head)
            return
        report = ledger_report(self.server.ledger, self.server.party)
        if path == "/ledger.json":
            self._reply(200, json.dumps(report, indent=1).encode(), "application/json", head)
        elif path == "/ledger.csv":
            self._reply(200, report_csv(report).encode(), "text/csv; charset=utf-8", head)
        else:
            self._reply(200, report_html(report).encode(), "text/html; charset=utf-8", head)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._get(False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(True)

    def _read_only(self) -> None:
        self._reply(405, b"405 read-only\n", "text/plain; charset=utf-8")

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only  # noqa: N815


class LedgerPage(ThreadedHTTPServer):
    """The page's server (loopback only); ``port`` it listens on, ``stop()``."""

    def __init__(self, ledger: BudgetLedger, party: str, port: int) -> None:
        self.ledger, self.party = ledger, party
        super().__init__(("127.0.0.1", port), _Handler)

def serve_ledger_page(ledger: BudgetLedger, party: str, port: int) -> LedgerPage:
    """Start the page on 127.0.0.1:``port`` (0: a free port) in a daemon thread."""
    page = LedgerPage(ledger, party, port)
    page.start("dpfed-ledger-page")
    log.info("party %s: ledger report on http://127.0.0.1:%d/", party, page.port)
    return page
