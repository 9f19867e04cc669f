"""``dpfed certs init|issue|request|sign|revoke|token``: a small certificate authority for mutual TLS.

A module of its own, importing nothing beyond the certificate code when its command runs: ``dpfed certs``
is registered without the learners, the accountants and gRPC, which the other commands' parsers import
(:func:`dpfed.cli.main` builds only this parser for a ``certs`` command line). deploy/provision-certs.sh
runs it once per key and certificate: about 0.2 s of CPU each instead of 2.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["add_commands"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``dpfed certs``."""
    _add_certs(sub)


def _add_certs(sub: argparse._SubParsersAction) -> None:
    """``dpfed certs init|issue|request|sign|revoke``."""
    ce = sub.add_parser("certs", help="a small certificate authority for mutual TLS")
    csub = ce.add_subparsers(dest="certs_command", metavar="{init,issue,request,sign,revoke,token}")
    ce.set_defaults(func=lambda a: (ce.print_help(), 2)[1])
    init = csub.add_parser("init", help="create a CA (ca.crt, ca.key) in DIR")
    init.add_argument("dir", metavar="DIR")
    init.add_argument("--force", action="store_true", help="overwrite an existing CA")
    init.set_defaults(func=_cmd_certs_init)
    iss = csub.add_parser("issue", help="issue NAME.crt/NAME.key signed by the CA")
    iss.add_argument("name", metavar="NAME", help="party name, 'coordinator' or 'operator'")
    iss.add_argument("--ca", required=True, metavar="DIR", help="the CA directory (from 'certs init')")
    iss.add_argument("--out", default=None, metavar="DIR", help="where to write (default: the CA directory)")
    iss.add_argument("--role", choices=("party", "coordinator", "operator"), default=None,
                     help="default: coordinator/operator for those names, else party")
    iss.add_argument("--san", action="append", default=[], metavar="HOST",
                     help="extra DNS name or IP address (repeatable; localhost and 127.0.0.1 are always in)")
    iss.set_defaults(func=_cmd_certs_issue)
    req = csub.add_parser("request", help="at a site: a new key NAME.key and a signing request NAME.csr "
                                          "(the key never leaves the site)")
    req.add_argument("name", metavar="NAME", help="party name, 'coordinator' or 'operator'")
    req.add_argument("--role", choices=("party", "coordinator", "operator"), required=True)
    req.add_argument("--out", default=".", metavar="DIR", help="where to write (default: here)")
    req.add_argument("--san", action="append", default=[], metavar="HOST",
                     help="coordinator only: its DNS name or IP address (repeatable)")
    req.set_defaults(func=_cmd_certs_request)
    sg = csub.add_parser("sign", help="at the CA: sign a request; writes NAME.crt (and ca.crt) beside it")
    sg.add_argument("csr", metavar="CSR", help="NAME.csr from 'dpfed certs request'")
    sg.add_argument("--ca", required=True, metavar="DIR", help="the CA directory (from 'certs init')")
    sg.add_argument("--out", default=None, metavar="DIR", help="where to write (default: beside the CSR)")
    sg.set_defaults(func=_cmd_certs_sign)
    rv = csub.add_parser("revoke", help="revoke every certificate issued to NAME (writes DIR/crl.pem: copy it "
                                        "beside ca.crt at the coordinator and the parties)")
    rv.add_argument("name", metavar="NAME")
    rv.add_argument("--ca", required=True, metavar="DIR", help="the CA directory")
    rv.set_defaults(func=_cmd_certs_revoke)
    tk = csub.add_parser("token", help="a short-lived operator token for the console and metrics (signed by the CA)")
    tk.add_argument("name", metavar="NAME", help="the operator's name")
    tk.add_argument("--ca", required=True, metavar="DIR", help="the CA directory")
    tk.add_argument("--hours", type=float, default=12.0, help="validity in hours (default 12, at most 720)")
    tk.set_defaults(func=_cmd_certs_token)


def _cmd_certs_init(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import init_ca

    try:
        path = init_ca(args.dir, overwrite=args.force)
    except FileExistsError as exc:
        print(f"dpfed certs init: error: {exc} (use --force to replace it)", file=sys.stderr)
        return 1
    print(path)
    return 0


def _cmd_certs_issue(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import issue

    try:
        crt, key = issue(args.name, args.ca, args.out, role=args.role, sans=args.san)
    except (ValueError, FileNotFoundError) as exc:
        print(f"dpfed certs issue: error: {exc}", file=sys.stderr)
        return 1
    print(crt)
    print(key)
    return 0


def _cmd_certs_request(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import request

    try:
        key, csr = request(args.name, args.role, args.out, sans=args.san)
    except ValueError as exc:
        print(f"dpfed certs request: error: {exc}", file=sys.stderr)
        return 1
    print(key)
    print(csr)
    return 0


def _cmd_certs_sign(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import sign

    try:
        crt = sign(args.csr, args.ca, args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"dpfed certs sign: error: {exc}", file=sys.stderr)
        return 1
    print(crt)
    return 0


def _cmd_certs_revoke(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import revoke

    try:
        crl = revoke(args.name, args.ca)
    except (ValueError, FileNotFoundError) as exc:
        print(f"dpfed certs revoke: error: {exc}", file=sys.stderr)
        return 1
    print(crl)
    return 0


def _cmd_certs_token(args: argparse.Namespace) -> int:
    from dpfed.federation.console_token import issue_token

    try:
        token = issue_token(args.name, args.ca, hours=args.hours)
    except (ValueError, FileNotFoundError) as exc:
        print(f"dpfed certs token: error: {exc}", file=sys.stderr)
        return 1
    print(token)
    return 0
