"""The ``tunecache`` command line. Imports are lazy so ``tunecache --help`` is instant.

Exit codes
----------
0
    Success.
1
    An error the user can fix (a bad model, target, store, file or setting): one
    ``tunecache: error:`` line says which and what to do. Also an unexpected error (a bug: the
    line says to rerun with ``--debug`` and report the traceback).
2
    The command line itself is wrong (unknown option, missing or malformed value).
3
    ``db import``: some entries were skipped (each is listed on stderr).
4
    ``db check``: the store has problems (the report lists them).
5
    ``warm``: some tasks could not be done (claimed by another warmer that did not finish, the
    time budget ran out, or a search found no valid program in a run cut short); run it again
    to retry them. Tasks every candidate of which failed to build or run are reported as
    unmeasurable and do not set this code.
130
    Interrupted (Ctrl-C): what was measured is kept; run the same command to resume.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tunecache.cli import compile as cli_compile
from tunecache.cli import db as cli_db
from tunecache.cli import plan as cli_plan
from tunecache.cli import warm as cli_warm
from tunecache.cli import worker as cli_worker
from tunecache.cli.common import EXIT_CODES, Parser, add_output_options, error_line, output_setup
from tunecache.errors import Interrupted

__all__ = ["EXIT_CODES", "build_parser", "main"]


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``tunecache`` command."""
    codes = "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())
    p = Parser(prog="tunecache", description="A shared cache of tuned TVM tensor programs.",
               epilog=f"exit codes:\n{codes}", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print the tunecache, TVM and store schema versions")
    add_output_options(p, top=True)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)

    # Registered eagerly so that --help lists every command; a module that fails to import is a
    # bug to see at once, not a command that silently disappears.
    for register in (cli_db.register, cli_compile.register, cli_plan.register, cli_warm.register,
                     cli_worker.register):
        register(sub)
    return p


def _versions() -> str:
    from importlib import metadata

    import tunecache
    from tunecache.store import SCHEMA_VERSION

    try:
        tvm_version = metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        tvm_version = "not installed"
    return f"tunecache {tunecache.__version__}, TVM {tvm_version}, store schema v{SCHEMA_VERSION}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see the module docstring)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a Ctrl-C while the command was already ending
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed
        return int(stop.code or 0)
    if a.version:
        print(_versions())
        return 0
    if not getattr(a, "fn", None):
        parser.print_help()
        return 2
    with output_setup(verbose=a.verbose, debug=a.debug) as debug:
        try:
            return int(a.fn(a) or 0)
        except Interrupted as stop:
            print(f"tunecache: {stop}", file=sys.stderr)
            return 130
        except KeyboardInterrupt:
            print("tunecache: interrupted; what was committed is kept; run the same command to resume",
                  file=sys.stderr)
            return 130
        except BrokenPipeError:  # `tunecache db ls | head`
            return 0
        except Exception as err:  # noqa: BLE001 - every failure ends in one sentence
            if debug:
                import traceback

                traceback.print_exc()
            print(f"tunecache: error: {error_line(err, debug)}", file=sys.stderr)
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

