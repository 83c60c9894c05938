"""What every subcommand shares: the parser class, ``--db``, ``-q``/``-v``/``--debug``, budget
flags, exit codes, and what reaches the terminal (tunecache's own words; third-party output only
with ``--debug``)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from tunecache.config import DEFAULT_TRIALS_PER_TASK, debug_enabled
from tunecache.errors import did_you_mean

__all__ = [
    "EXIT_CODES",
    "Parser",
    "add_budget",
    "add_db",
    "add_output_options",
    "error_line",
    "output_setup",
    "reads_named_store",
    "seconds",
    "store_line",
    "target_flag",
    "trials",
]

#: The exit codes of every command (``tunecache --help`` lists them).
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "an error you can fix (the message says what to do), or a bug (rerun with --debug)",
    2: "the command line is wrong",
    3: "db import: some entries were skipped",
    4: "db check: the store has problems",
    5: "warm: some tasks could not be done (run it again to retry them)",
    130: "interrupted (Ctrl-C): what was measured is kept; run the same command to resume",
}

log = logging.getLogger("tunecache")


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one ``tunecache: error:`` line (exit 2),
    with the likeliest meaning of a mistyped command, choice or flag."""

    def error(self, message: str) -> NoReturn:
        hint = _did_you_mean(message, self._option_strings())
        self.exit(2, f"tunecache: error: {message}{hint} (see `{self.prog} --help`)\n")

    def _option_strings(self) -> list[str]:
        """Every ``--flag`` of this parser and its subcommands (an unknown flag after a
        subcommand is reported by the top parser)."""
        out: list[str] = []
        todo: list[argparse.ArgumentParser] = [self]
        while todo:
            parser = todo.pop()
            for action in parser._actions:
                out.extend(o for o in action.option_strings if o.startswith("--"))
                if isinstance(action, argparse._SubParsersAction):
                    todo.extend(action.choices.values())
        return sorted(set(out))


def _close_flag(word: str, flags: Sequence[str]) -> str | None:
    """The flag an unknown ``--word`` most likely means: one it extends with a dash
    (``--tune-never``: ``--tune``), else a close spelling (``--trails-per-task``)."""
    name = word.split("=", 1)[0]
    longer = [f for f in flags if name.startswith(f + "-")]
    if longer:
        return max(longer, key=len)
    close = difflib.get_close_matches(name, list(flags), n=1, cutoff=0.75)
    return close[0] if close else None


def _did_you_mean(message: str, flags: Sequence[str]) -> str:
    """``"; did you mean 'X'?"`` for argparse's invalid-choice and unrecognized-argument
    messages (the wording of Python 3.10-3.13, choices quoted or not), else ``""``."""
    m = re.search(r"invalid choice: '?([^'\s]+)'? \(choose from (.*)\)", message)
    if m:
        hint = did_you_mean(m.group(1), [c.strip().strip("'") for c in m.group(2).split(",")])
        return f"; {hint}" if hint else ""
    m = re.search(r"unrecognized arguments: (.*)", message)
    if m:
        for word in m.group(1).split():
            guess = _close_flag(word, flags) if word.startswith("--") else None
            if guess:
                return f"; did you mean {guess}?"
    return ""



def reads_named_store(db: str | None) -> bool:
    """Whether ``--db`` names a store that a command which only reads must not create: any
    location but the default (created on first use) and ``memory`` (nothing on disk)."""
    return db is not None and db.strip() != "memory"

def at_least(text: str, least: int, unit: str = "") -> int:
    """A whole number >= ``least`` read from a flag (argparse names the flag in its error)."""
    what = f" of {unit}s" if unit else ""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number{what}, got {text!r}") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}{' ' + unit if unit else ''}, got {n}")
    return n


def at_least_one(text: str, unit: str = "") -> int:
    """``type=`` of a count flag: a whole number >= 1 (argparse names the flag in its error)."""
    return at_least(text, 1, unit)


def trials(text: str) -> int:
    """``type=`` of a trial-budget flag: a whole number of trials >= 1."""
    return at_least_one(text, "trial")


def seconds(text: str) -> float:
    """``type=`` of a time-budget flag: a positive number of seconds."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return s


def add_db(p: argparse.ArgumentParser) -> None:
    """Add the ``--db URL`` option (the store) to a subcommand's parser."""
    p.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="store URL or SQLite path (default: $TUNECACHE_DB or ~/.cache/tunecache/tunecache.db)",
    )


def add_budget(p: argparse.ArgumentParser, *flags: str, what: str) -> None:
    """Add the full-search trial budget flag(s) with the one default every command shares."""
    p.add_argument(*flags, dest="budget", type=trials, default=DEFAULT_TRIALS_PER_TASK, metavar="N",
                   help=f"{what} (default: {DEFAULT_TRIALS_PER_TASK})")


def add_reuse_budget(p: argparse.ArgumentParser) -> None:
    """Add ``--reuse-budget``, the most trials of one narrowed search (``reuse_trials``)."""
    p.add_argument("--reuse-budget", type=trials, default=None, metavar="N",
                   help="most trials of one narrowed search (default: a quarter of --budget, at most 8 or a "
                        "tenth of it, at least 4)")


def add_output_options(p: argparse.ArgumentParser, top: bool = False) -> None:
    """Add ``-q``, ``-v`` and ``--debug`` (accepted before or after the subcommand)."""
    default: Any = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("-q", "--quiet", action="store_true", **(default or {"default": False}),
                   help="print only the result and errors (no progress, no notes)")
    p.add_argument("-v", "--verbose", action="store_true", **(default or {"default": False}),
                   help="also print tunecache's informational log")
    p.add_argument("--debug", action="store_true", **(default or {"default": False}),
                   help="print tracebacks and third-party warnings and logs (also TUNECACHE_DEBUG=1)")


class _Plain(logging.Formatter):
    """``tunecache: <message>``, without a ``tunecache:`` the message may start with already."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        while text.startswith("tunecache: "):
            text = text[len("tunecache: "):]
        return f"tunecache: {text}"


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


@contextlib.contextmanager
def _native_stderr_hidden(enabled: bool) -> Iterator[None]:
    """Send what TVM's C++ code and worker processes write to file descriptor 2 to an anonymous
    file (gone at exit), while Python's ``sys.stderr`` keeps writing to the real stderr.

    TVM logs from C++ straight to descriptor 2 (``Warning: Fast mode segfaults when there are
    out-of-bounds indices``, ``Scope Saving: ...``); Python cannot filter those lines, only move
    them. Skipped when ``sys.stderr`` is not the process's own (a test capturing it).
    """
    original: Any = sys.stderr
    if not enabled or original is None or id(original) != id(sys.__stderr__):
        yield
        return
    import tempfile

    try:
        original.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    sink = tempfile.TemporaryFile()
    real = os.fdopen(saved, "w", buffering=1, encoding=getattr(original, "encoding", None) or "utf-8",
                     errors="backslashreplace", closefd=False)
    os.dup2(sink.fileno(), 2)
    sys.stderr = real
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            real.flush()
        os.dup2(saved, 2)
        sys.stderr = original
        real.close()
        os.close(saved)
        sink.close()


@contextlib.contextmanager
def output_setup(*, verbose: bool, debug: bool) -> Iterator[bool]:
    """Set up what a command prints on stderr for its duration; yield whether debugging.

    tunecache's log goes to stderr as ``tunecache: ...`` lines: warnings by default, its
    informational lines too with ``-v``, everything with ``--debug``. Without ``--debug`` (or
    ``TUNECACHE_DEBUG=1``) Python warnings of other packages (torch's ``LeafSpec``
    FutureWarning, ...) and TVM's native log lines are not shown.
    """
    debug = debug or debug_enabled()
    handler = _CurrentStderr()
    handler.setFormatter(_Plain("%(message)s"))
    lg = logging.getLogger("tunecache")
    old_level, old_propagate = lg.level, lg.propagate
    lg.addHandler(handler)
    lg.setLevel(logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING)
    lg.propagate = False
    with contextlib.ExitStack() as stack:
        if not debug:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            if "PYTHONWARNINGS" not in os.environ:  # worker processes
                os.environ["PYTHONWARNINGS"] = "ignore"
                stack.callback(os.environ.pop, "PYTHONWARNINGS", None)
        stack.enter_context(_native_stderr_hidden(not debug))
        try:
            yield debug
        finally:
            lg.removeHandler(handler)
            lg.setLevel(old_level)
            lg.propagate = old_propagate


def error_line(err: BaseException, debug: bool = False) -> str:
    """The one line that ends a failed command: what went wrong and what to do."""
    from tunecache.errors import TunecacheError

    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    if isinstance(err, TunecacheError):
        return text if len(text) <= 600 else text[:600].rsplit(" ", 1)[0] + " ... (--debug shows all of it)"
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror}"
    if isinstance(err, ImportError) and err.name:
        return (f"a dependency is missing (no module named {err.name!r}): install tunecache with its extras, "
                "e.g. `pip install -e '.[all]'`")
    first = text.split(". ")[0][:300] if text else ""
    hint = "" if debug else "; rerun with --debug for the traceback and"
    return (f"unexpected {type(err).__name__}{': ' + first if first else ''}{hint} please report it "
            "(this is a bug in tunecache)")


def store_line(store: Any) -> str:
    """Which store a command used, e.g. ``store: /home/me/.cache/tunecache/tunecache.db``."""
    url = str(getattr(store, "url", "") or "")
    target = getattr(store, "overlay", store)  # where new records go
    if url in ("sqlite://", "sqlite:///:memory:") or getattr(target, "persistent", True) is False:
        return "store: in memory (nothing tuned now will be kept; give --db PATH to keep it)"
    shown = str(getattr(store, "display_url", "") or url).replace("sqlite:///", "")
    return f"store: {shown}"


def target_flag(text: str | None) -> Any:
    """Resolve ``--target`` (a ``tvm.target.Target``); an error names the flag and its value."""
    from tunecache.errors import TargetError
    from tunecache.tvm_layer.target import resolve_target

    try:
        return resolve_target(text)
    except TargetError as err:
        raise TargetError(f"--target {text!r}: {err}") from err
