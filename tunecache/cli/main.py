"""The ``tunecache`` command line. Imports are lazy so ``tunecache --help`` is instant."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tunecache.cli import compile as cli_compile
from tunecache.cli import db as cli_db
from tunecache.cli import plan as cli_plan
from tunecache.cli import warm as cli_warm
from tunecache.cli.common import setup_logging
from tunecache.errors import TunecacheError

__all__ = ["main"]


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``tunecache`` command."""
    p = argparse.ArgumentParser(prog="tunecache", description="A shared cache of tuned TVM tensor programs.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    # Registered eagerly so that --help lists every command; a module that fails to import is a
    # bug to see at once, not a command that silently disappears.
    for register in (cli_db.register, cli_compile.register, cli_plan.register, cli_warm.register):
        register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.version:
        import tunecache

        print(tunecache.__version__)
        return 0
    if not getattr(a, "fn", None):
        parser.print_help()
        return 2
    try:
        setup_logging()
        return int(a.fn(a) or 0)
    except TunecacheError as err:
        print(f"tunecache: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tunecache: interrupted; everything committed so far is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
