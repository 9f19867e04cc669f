"""The ``dpfed`` command line.

Each area registers its own sub-commands: a module listed in ``_COMMAND_MODULES`` exposes
``add_commands(subparsers)``, which adds parsers whose ``func`` attribute takes the parsed
arguments and returns an exit code. Modules are imported lazily-by-listing so that the
networking packages stay out of ``dpfed``'s import graph until a network command is used.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

_COMMAND_MODULES = (
    "dpfed.cli.privacy",      # dpfed privacy epsilon|noise
    "dpfed.cli.simulate",     # dpfed simulate
    "dpfed.cli.coordinator",        # dpfed coordinator serve, status, job submit, model get, certs
    "dpfed.cli.party",              # dpfed party serve
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpfed", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"dpfed {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # area not built yet
                continue
            raise
        module.add_commands(sub)
    return parser


def _version() -> str:
    from dpfed import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
