"""What every subcommand shares: the ``--db`` option and tunecache's log on stderr."""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["add_db", "setup_logging"]


def add_db(p: argparse.ArgumentParser) -> None:
    """Add the ``--db URL`` option (the store) to a subcommand's parser."""
    p.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="store URL or SQLite path (default: $TUNECACHE_DB or ~/.cache/tunecache/tunecache.db)",
    )


def setup_logging(verbose: bool = False) -> None:
    """Send tunecache's log to stderr (the summary line at INFO)."""
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("tunecache: %(message)s"))
    lg = logging.getLogger("tunecache")
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG if verbose else logging.INFO)
