"""The ``tunecache`` command line: argument parsing and printing only; the work is in the library."""

from tunecache.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
