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
from typing import NoReturn, Sequence

_COMMAND_MODULES = (
    "dpfed.cli.privacy",      # dpfed privacy epsilon|noise
    "dpfed.cli.simulate",     # dpfed simulate
    "dpfed.cli.schema",       # dpfed schema template
    "dpfed.cli.coordinator",        # dpfed coordinator serve, status, job submit, model get
    "dpfed.cli.certs",              # dpfed certs
    "dpfed.cli.party",              # dpfed party serve
    "dpfed.cli.stats",              # dpfed stats
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: MESSAGE``, exit 2), no usage dump:
    ``dpfed COMMAND -h`` shows the usage. Sub-command parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} -h)\n")


#: commands whose module imports little: a command line starting with one builds only that module's parser
#: (the others import every learner and the accountants, about 2 s of CPU per process)
_LIGHT_COMMANDS = {"certs": "dpfed.cli.certs"}


def build_parser(modules: Sequence[str] = _COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = _Parser(prog="dpfed", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"dpfed {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
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


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (dpfed's messages name arguments, files, columns and counts,
    never record values)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush does not fail on the closed pipe again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``dpfed`` command. A deliberate error (any :class:`DpfedError`: bad parameters, a bad
    file, a refused job) ends with exit code 2 and one line on stderr; anything else is a bug and keeps
    its traceback."""
    from dpfed.core.errors import DpfedError

    argv = sys.argv[1:] if argv is None else list(argv)
    light = _LIGHT_COMMANDS.get(argv[0]) if argv else None
    parser = build_parser((light,) if light else _COMMAND_MODULES)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:  # `dpfed status | head`: the reader left; no traceback, nothing more to say
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as if the signal had ended the process
    except DpfedError as exc:
        name = " ".join(x for x in ("dpfed", args.command, getattr(args, "sub_command_name", None)) if x)
        print(f"{name}: error: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
