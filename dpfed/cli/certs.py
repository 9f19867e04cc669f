"""``dpfed certs init|issue|request|sign|revoke|token``: a small certificate authority for mutual TLS.

A module of its own, importing nothing beyond the certificate code when its command runs: ``dpfed certs``
is registered without the learners, the accountants and gRPC, which the other commands' parsers import
(:func:`dpfed.cli.main` builds only this parser for a ``certs`` command line). deploy/provision-certs.sh
runs it once per key and certificate: about 0.2 s of CPU each instead of 2.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

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


def _printed(command: str, call: Callable[[], Any], errors: tuple[type[Exception], ...] = (ValueError,
             FileNotFoundError), hint: str = "") -> int:
    """Run one ``dpfed certs`` command: print the paths (or token) it returns, one per line, or its one-line
    error (exit 1)."""
    try:
        out = call()
    except errors as exc:
        print(f"dpfed certs {command}: error: {exc}{hint}", file=sys.stderr)
        return 1
    for line in out if isinstance(out, tuple) else (out,):
        print(line)
    return 0


def _cmd_certs_init(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import init_ca

    return _printed("init", lambda: init_ca(args.dir, overwrite=args.force), (FileExistsError,),
                    " (use --force to replace it)")


def _cmd_certs_issue(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import issue

    return _printed("issue", lambda: issue(args.name, args.ca, args.out, role=args.role, sans=args.san))


def _cmd_certs_request(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import request

    return _printed("request", lambda: request(args.name, args.role, args.out, sans=args.san), (ValueError,))


def _cmd_certs_sign(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import sign

    return _printed("sign", lambda: sign(args.csr, args.ca, args.out))


def _cmd_certs_revoke(args: argparse.Namespace) -> int:
    from dpfed.federation.certs import revoke

    return _printed("revoke", lambda: revoke(args.name, args.ca))


def _cmd_certs_token(args: argparse.Namespace) -> int:
    from dpfed.federation.console_token import issue_token

    return _printed("token", lambda: issue_token(args.name, args.ca, hours=args.hours))
