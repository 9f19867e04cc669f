"""``dpfed party serve --config party.toml`` (run the daemon), ``dpfed party check`` (validate
the data against the declared schema and show the ledger, without connecting) and ``dpfed party ledger``
(:mod:`dpfed.cli.ledger`)."""
from __future__ import annotations

import argparse
import json
import sys

from dpfed.cli.ledger import add_ledger_command

__all__ = ["add_commands"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    pa = sub.add_parser("party", help="run a party daemon beside its data")
    psub = pa.add_subparsers(dest="party_command", metavar="{serve,check,ledger}")
    pa.set_defaults(func=lambda a: (pa.print_help(), 2)[1])
    serve = psub.add_parser("serve", help="validate the data, then serve the coordinator's jobs until stopped")
    serve.add_argument("--config", required=True, help="party.toml (see party/config.py)")
    serve.add_argument("--insecure", action="store_true",
                       help="override the config: plain text without TLS (debugging only; warns loudly)")
    serve.add_argument("--log-level", default="INFO")
    serve.set_defaults(func=_cmd_serve)
    check = psub.add_parser("check", help="validate the data against the schema; print the ledger's budget")
    check.add_argument("--config", required=True, help="party.toml")
    check.set_defaults(func=_cmd_check)
    add_ledger_command(psub)


def _cmd_serve(args: argparse.Namespace) -> int:
    from party.daemon import serve_from_config

    return serve_from_config(args.config, log_level=args.log_level, insecure=args.insecure)


def _cmd_check(args: argparse.Namespace) -> int:
    from dpfed.core.ledger import BudgetLedger
    from dpfed.data.schema import DataValidationError
    from party.config import ConfigError, PartyConfig

    try:
        cfg = PartyConfig.load(args.config)
        X, y = cfg.load_data()
    except (ConfigError, DataValidationError) as exc:
        print(f"dpfed party check: error: {exc}", file=sys.stderr)
        return 2
    with BudgetLedger(cfg.ledger, epsilon_limit=cfg.epsilon_limit, delta_limit=cfg.delta_limit,
                      accountant=cfg.accountant) as led:
        report = led.report()
    print(json.dumps({"party": cfg.name, "records": int(X.shape[0]), "features": int(X.shape[1]),
                      "labelled": y is not None, "budget": report}, indent=1))
    return 0
