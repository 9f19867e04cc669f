"""The certificate authority: CA and leaf certificates, key permissions, names, roles, SANs, CLI."""
from __future__ import annotations

import ipaddress
import stat

import pytest
from cryptography import x509

from dpfed.cli import main
from dpfed.federation import certs


def test_init_and_issue(tmp_path):
    ca_crt = certs.init_ca(tmp_path / "ca")
    crt, key = certs.issue("hospital-a", tmp_path / "ca", tmp_path / "out")
    for k in (tmp_path / "ca" / "ca.key", key):
        assert stat.S_IMODE(k.stat().st_mode) == 0o600
    assert (tmp_path / "out" / "ca.crt").read_bytes() == ca_crt.read_bytes()
    ca = x509.load_pem_x509_certificate(ca_crt.read_bytes())
    leaf = x509.load_pem_x509_certificate(crt.read_bytes())
    leaf.verify_directly_issued_by(ca)  # raises when the signature or issuer is wrong
    assert certs.cert_identity(crt.read_bytes()) == ("hospital-a", "party")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_roles_sans_and_refusals(tmp_path):
    certs.init_ca(tmp_path)
    with pytest.raises(FileExistsError):
        certs.init_ca(tmp_path)
    crt, _ = certs.issue("coordinator", tmp_path, sans=["coord.example.org", "10.0.0.7"])
    assert certs.cert_identity(crt.read_bytes())[1] == "coordinator"
    san = x509.load_pem_x509_certificate(crt.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert "coord.example.org" in san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("10.0.0.7") in san.get_values_for_type(x509.IPAddress)
    assert certs.cert_identity(certs.issue("operator", tmp_path)[0].read_bytes())[1] == "operator"
    assert certs.cert_identity(certs.issue("ops", tmp_path, role="operator")[0].read_bytes())[1] == "operator"
    for bad in ("", "../x", "a b", "x" * 65):
        with pytest.raises(ValueError, match="invalid name"):
            certs.issue(bad, tmp_path)
    with pytest.raises(ValueError, match="role"):
        certs.issue("p", tmp_path, role="king")
    with pytest.raises(FileNotFoundError, match="certs init"):
        certs.issue("p", tmp_path / "nowhere")


def test_cli(tmp_path, capsys):
    assert main(["certs", "init", str(tmp_path / "ca")]) == 0
    assert main(["certs", "init", str(tmp_path / "ca")]) == 1
    assert "already holds a CA" in capsys.readouterr().err
    assert main(["certs", "issue", "party-7", "--ca", str(tmp_path / "ca"), "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "party-7.crt").exists() and (tmp_path / "p" / "party-7.key").exists()
    assert main(["certs", "issue", "bad name", "--ca", str(tmp_path / "ca")]) == 1
