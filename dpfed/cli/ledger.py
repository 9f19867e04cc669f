"""``dpfed party ledger [ACTION] --config party.toml``: the data owner's own ledger.

Actions (the optional first word; each a function in ``ACTIONS``):

- ``show`` (default): every charge (job, algorithm, parameters digest, coordinator, time, epsilon, delta,
  accountant), every answered round's digests and the remaining budget, as text, ``--json``, ``--csv`` or a
  self-contained HTML page with the cumulative epsilon over time (``--html FILE``); see
  :mod:`party.ledger_report`. It reads the ledger and changes nothing in it except creating tables a newer
  dpfed keeps (empty) in an older ledger file.
- ``migrate --accountant pld|rdp``: move the ledger to another accountant keeping every recorded charge, never
  lowering the recorded spend (:mod:`dpfed.core.ledger_migration`; one SQLite transaction, so a crash leaves
  the old ledger intact), then set ``accountant`` in ``party.toml`` to match. Stop the party first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

__all__ = ["add_ledger_command", "ACTIONS"]


def _show(args: argparse.Namespace) -> int:
    from dpfed.core.ledger import BudgetLedger
    from party.config import PartyConfig
    from party.ledger_report import ledger_report, report_csv, report_html, report_text

    cfg = PartyConfig.load(args.config)
    if not cfg.ledger.exists():
        print(f"dpfed party ledger: error: no ledger at {cfg.ledger} (nothing was ever charged)", file=sys.stderr)
        return 2
    with BudgetLedger(cfg.ledger, epsilon_limit=cfg.epsilon_limit, delta_limit=cfg.delta_limit,
                      accountant=cfg.accountant) as led:
        report = ledger_report(led, cfg.name)
    if args.html:
        Path(args.html).write_text(report_html(report), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=1))
    elif args.csv:
        sys.stdout.write(report_csv(report))
    elif not args.html:
        sys.stdout.write(report_text(report))
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from dpfed.core.ledger_migration import migrate_ledger
    from party.config import PartyConfig, set_accountant

    if args.accountant is None:
        print("dpfed party ledger migrate: error: --accountant pld|rdp is required", file=sys.stderr)
        return 2
    cfg = PartyConfig.load(args.config)
    done = migrate_ledger(cfg.ledger, args.accountant, epsilon_limit=cfg.epsilon_limit, delta_limit=cfg.delta_limit)
    if cfg.accountant != args.accountant:
        set_accountant(args.config, args.accountant)
    if args.json:
        print(json.dumps({**done, "ledger": str(cfg.ledger), "config": str(args.config)}, indent=1))
    elif done["changed"]:
        print(f"ledger {cfg.ledger} moved from {done['from']} to {done['to']}: {done['charges']} charges kept, "
              f"spent {done['spent_after']:.6g} (was {done['spent_before']:.6g}); {args.config} now says "
              f"accountant = \"{done['to']}\"")
    else:
        print(f"ledger {cfg.ledger} already uses {done['to']}: nothing to do")
    return 0


ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {"show": _show, "migrate": _migrate}


def _run(args: argparse.Namespace) -> int:
    return ACTIONS[args.ledger_action](args)


def add_ledger_command(party_sub: argparse._SubParsersAction) -> None:
    """Add ``ledger`` under ``dpfed party``."""
    p = party_sub.add_parser("ledger", help="this party's privacy ledger: what was released, to whom, at what cost")
    p.add_argument("ledger_action", nargs="?", default="show", choices=sorted(ACTIONS), metavar="ACTION",
                   help="show (default): print the ledger; migrate: move it to --accountant, keeping every charge")
    p.add_argument("--accountant", choices=("pld", "rdp"), default=None, help="migrate: the new accountant")
    p.add_argument("--config", required=True, help="party.toml")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object")
    fmt.add_argument("--csv", action="store_true", help="CSV: one row per charge and per answered round")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with the epsilon plot")
    p.set_defaults(func=_run)
