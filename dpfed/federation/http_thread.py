"""A standard-library HTTP server in a daemon thread: what the coordinator's console and metrics
(coordinator/web.py) and a party's ledger page (party/ledger_page.py) are built on."""
from __future__ import annotations

import http.server
import threading

__all__ = ["ThreadedHTTPServer"]


class ThreadedHTTPServer(http.server.ThreadingHTTPServer):
    """One thread per connection (daemon threads); ``start()`` serves in a daemon thread, ``stop()`` ends it."""

    daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self, name: str) -> None:
        # polled every 0.1 s: stop() returns within that (a daemon stopping on SIGTERM has a 2 s grace)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, name=name, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
