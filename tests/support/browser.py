"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by selenium) for the console's
browser test and bench/console_screenshots.py.

The flags keep Chromium from reaching for the network on a closed machine (it otherwise stalls), and
a fresh profile per browser. The coordinator's certificate is trusted by pinning its public key
(``--ignore-certificate-errors-spki-list``): the browser then accepts that one key, as an operator
who imported the deployment CA would.
"""
from __future__ import annotations

import base64
import hashlib
import shutil
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900")


def spki_pin(cert_pem: bytes) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate, as Chromium's SPKI list wants it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    spki = x509.load_pem_x509_certificate(cert_pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


class Browser:
    """A headless Chromium trusting the server key of ``server_cert``; ``quit()`` removes its profile."""

    def __init__(self, server_cert: Path, width: int = 1280, height: int = 900) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="dpfed-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self.profile}",
                     f"--ignore-certificate-errors-spki-list={spki_pin(Path(server_cert).read_bytes())}"):
            opts.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.driver.set_window_size(width, height)
        self.driver.set_page_load_timeout(60)

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
