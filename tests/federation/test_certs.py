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
    # a party certificate cannot serve (finding 5): client authentication only, no server names
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert not san.get_values_for_type(x509.DNSName) and not san.get_values_for_type(x509.IPAddress)
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
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
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    eku = x509.load_pem_x509_certificate(crt.read_bytes()).extensions.get_extension_for_class(
        x509.ExtendedKeyUsage).value
    assert list(eku) == [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
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


def test_request_sign_revoke_keep_keys_at_their_sites(tmp_path, capsys):
    ca = tmp_path / "ca"
    assert main(["certs", "init", str(ca)]) == 0
    site, coord = tmp_path / "site-a", tmp_path / "coord"
    assert main(["certs", "request", "hospital-a", "--role", "party", "--out", str(site)]) == 0
    assert main(["certs", "request", "coordinator", "--role", "coordinator", "--out", str(coord),
                 "--san", "coord.example.org"]) == 0
    key_before = (site / "hospital-a.key").read_bytes()
    assert stat.S_IMODE((site / "hospital-a.key").stat().st_mode) == 0o600
    assert main(["certs", "sign", str(site / "hospital-a.csr"), "--ca", str(ca)]) == 0
    assert main(["certs", "sign", str(coord / "coordinator.csr"), "--ca", str(ca)]) == 0
    assert (site / "hospital-a.key").read_bytes() == key_before and not (ca / "hospital-a.key").exists()
    leaf = x509.load_pem_x509_certificate((site / "hospital-a.crt").read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes()))
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(key_before, password=None)
    assert leaf.public_key().public_numbers() == key.public_key().public_numbers()
    assert certs.cert_identity((site / "hospital-a.crt").read_bytes()) == ("hospital-a", "party")
    c = x509.load_pem_x509_certificate((coord / "coordinator.crt").read_bytes())
    san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "coord.example.org" in san.get_values_for_type(x509.DNSName)
    assert (site / "ca.crt").read_bytes() == (ca / "ca.crt").read_bytes()
    # a request whose role is not one of ours, a tampered request, a missing file: clear one-line errors
    (tmp_path / "junk.csr").write_text("not a csr")
    assert main(["certs", "sign", str(tmp_path / "junk.csr"), "--ca", str(ca)]) == 1
    assert main(["certs", "sign", str(tmp_path / "none.csr"), "--ca", str(ca)]) == 1
    with pytest.raises(ValueError, match="role"):
        certs.request("x", "king", site)
    capsys.readouterr()
    # revoke: a CRL signed by the CA that lists exactly hospital-a's serial
    assert main(["certs", "revoke", "hospital-a", "--ca", str(ca)]) == 0
    assert certs.revoked_serials(ca / "crl.pem", ca / "ca.crt") == {leaf.serial_number}
    assert main(["certs", "revoke", "nobody", "--ca", str(ca)]) == 1
    assert "no record of a certificate issued to 'nobody'" in capsys.readouterr().err
    certs.issue("hospital-b", ca, tmp_path / "b")
    certs.revoke("hospital-b", ca)
    assert len(certs.revoked_serials(ca / "crl.pem", ca / "ca.crt")) == 2   # the list only grows
    other = tmp_path / "other"
    certs.init_ca(other)
    with pytest.raises(ValueError, match="not signed by the CA"):
        certs.revoked_serials(ca / "crl.pem", other / "ca.crt")
