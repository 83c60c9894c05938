"""The one place where tunecache reads its environment.

Algorithm code never reads environment variables: it receives values from here (or from
keyword arguments, which always win).

Variables
---------
TUNECACHE_DB
    Store URL used when none is given (``sqlite:///path``, ``postgresql+psycopg://...``).
XDG_CACHE_HOME
    Base of the default store location (``$XDG_CACHE_HOME/tunecache/tunecache.db``).
TUNECACHE_USER
    Name recorded as the author of records (default: the login name).
TUNECACHE_LIB_CACHE
    Directory of built model libraries (:mod:`tunecache.libcache`; default
    ``$XDG_CACHE_HOME/tunecache/libs``), or ``off`` to always build.
TUNECACHE_TUNE
    Tuning mode of compiles that are not given one explicitly: the ``torch.compile`` backend
    and ``CompiledModel`` variants of new shapes (``auto``, ``never``, ``background``,
    ``always``; default ``background``).
TUNECACHE_DEBUG
    ``1`` (or ``true``, ``yes``): the command line prints tracebacks and third-party warnings and
    logs, as ``--debug`` does.
TVM_NUM_THREADS
    Threads of TVM's runtime thread pool (TVM's own variable). When unset, tunecache sets it to
    the physical core count before TVM starts (:func:`default_tvm_threads`): TVM would otherwise
    take half the logical CPUs on x86, assuming two hyper-threads a core, which on a VM with one
    thread per core runs every tuned kernel on half the cores.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path

ENV_DB = "TUNECACHE_DB"
ENV_USER = "TUNECACHE_USER"
ENV_LIB_CACHE = "TUNECACHE_LIB_CACHE"
ENV_TVM_THREADS = "TVM_NUM_THREADS"
ENV_DEBUG = "TUNECACHE_DEBUG"
ENV_TUNE = "TUNECACHE_TUNE"

#: Every tuning mode: ``auto`` tunes misses now; ``never`` measures nothing; ``background``
#: measures nothing now and queues the misses for ``tunecache worker``; ``always`` re-tunes.
TUNE_MODES = ("auto", "never", "background", "always")

#: The searches of the ladder's last rung (``search=`` of ``compile`` and ``warm``, ``--search``):
#: MetaSchedule's evolutionary search, or the gradient search (:mod:`tunecache.search.gradient`,
#: for tasks with a multi-level tiling; the others get the evolutionary one).
SEARCHES = ("evolutionary", "gradient")

#: The search when none is given: the one ``tools/bench_gradient.py`` shows wins (docs/gradient.md:
#: fewer trials and seconds to 90% of the best on 5 of 5 tasks at 256 trials, the same final best,
#: whole models at parity or better). Tasks without a multi-level tiling keep the evolutionary.
DEFAULT_SEARCH = "gradient"

#: Trials of one task's full search when none is given: ``tunecache.compile``'s
#: ``trials_per_task``, ``tunecache.warm``'s ``full_trials`` and ``--trials-per-task`` /
#: ``--budget`` of ``compile``, ``plan`` and ``warm``.
DEFAULT_TRIALS_PER_TASK = 32

#: Records re-measured a workload, and interleaved rounds, of a re-rank (``tunecache db rerank``,
#: :func:`tunecache.search.remeasure.rerank_store`): 16 rounds of every one of 12 records took
#: ~13 s a ResNet-18 convolution on an AMD Zen 3 (session 42).
RERANK_TOP = 8
RERANK_ROUNDS = 8


def default_reuse_trials(full_trials: int) -> int:
    """Trials of a narrowed (reuse) search when none is given: a quarter of a full search's, but no
    more than 8 or a tenth of it, whichever is larger; at least 4.

    A narrowed search's round 0 (the source's programs replayed and the task's predicted program,
    :func:`tunecache.search.execute.search_reuse`) is where most of what it finds comes from. At
    128 trials a full search (BERT at 64 and 256 tokens from a store tuned at 128, AMD Zen 5,
    ``tools/bench_newmodel.py``) 12 trials a reused task gave 0.94x and 1.00x the full search's
    model latency; a quarter (32) gave 1.05x and 1.14x in an earlier run (docs/newmodel.md).

    Examples
    --------
    >>> [default_reuse_trials(b) for b in (8, 16, 32, 64, 128, 256)]
    [4, 4, 8, 8, 12, 25]
    """
    b = int(full_trials)
    return max(4, min(b // 4, max(8, b // 10)))


def check_trials(name: str, value: object) -> int:
    """Return ``value`` when it is a whole number of trials >= 1; else raise ``ConfigError`` naming ``name``.

    ``name`` is what the caller wrote: a Python parameter (``"trials_per_task"``) or a flag.
    """
    from tunecache.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number of trials (an int >= 1), got {value!r} "
                          f"({type(value).__name__})")
    if value < 1:
        raise ConfigError(f"{name} must be at least 1 trial, got {value}")
    return value


def check_search(name: str, value: object) -> str:
    """Return ``value`` when it is one of :data:`SEARCHES`; else raise ``ConfigError`` naming ``name``."""
    from tunecache.errors import ConfigError

    if value not in SEARCHES:
        raise ConfigError(f"{name} must be one of {', '.join(SEARCHES)}, got {value!r}")
    return str(value)


def check_seconds(name: str, value: object) -> float | None:
    """Return ``value`` as seconds when it is ``None`` or a positive number; else raise ``ConfigError``."""
    from tunecache.errors import ConfigError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds or None, got {value!r} ({type(value).__name__})")
    if not value > 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return float(value)


def debug_enabled() -> bool:
    """Whether ``TUNECACHE_DEBUG`` asks for tracebacks and third-party output."""
    return os.environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


def default_cache_dir() -> Path:
    """Return the per-user cache directory of tunecache (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunecache"


def default_store_url() -> str:
    """Return ``TUNECACHE_DB`` if set, else an SQLite file in the user cache directory."""
    url = os.environ.get(ENV_DB, "").strip()
    if url:
        return url
    return "sqlite:///" + str(default_cache_dir() / "tunecache.db")


def default_library_cache_dir() -> Path | None:
    """Return the built-library cache directory, or ``None`` when ``TUNECACHE_LIB_CACHE=off``."""
    value = os.environ.get(ENV_LIB_CACHE, "").strip()
    if value.lower() in ("off", "0", "no", "false", "none"):
        return None
    return Path(value) if value else default_cache_dir() / "libs"


def default_tune_mode() -> str:
    """Return ``TUNECACHE_TUNE`` (default ``background``): the mode of compiles started for the
    user (the ``torch.compile`` backend, new shapes of a ``dynamic=True`` model).

    Raises
    ------
    ConfigError
        If the variable names no mode of :data:`TUNE_MODES`.
    """
    from tunecache.errors import ConfigError

    value = os.environ.get(ENV_TUNE, "").strip().lower() or "background"
    if value not in TUNE_MODES:
        raise ConfigError(f"{ENV_TUNE}={value!r} is not one of {', '.join(TUNE_MODES)}")
    return value


def current_user() -> str:
    """Return the name recorded as a record's author."""
    name = os.environ.get(ENV_USER, "").strip()
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


def current_host() -> str:
    """Return this machine's host name (recorded in provenance, never part of a key)."""
    return socket.gethostname()


def default_tvm_threads(cores: int) -> int:
    """Set ``TVM_NUM_THREADS`` to ``cores`` unless the user set it; return the value in effect.

    TVM's runtime reads the variable when its thread pool starts (the first parallel kernel of
    a process), and the builder and runner worker processes inherit it. Without it, TVM 0.27
    uses ``hardware_concurrency() / 2`` threads on x86: 1 on a 2-vCPU machine, where a 512x512
    matmul then ran in 313 ms instead of 157 ms, and every tuning measurement was of one core.
    """
    value = os.environ.get(ENV_TVM_THREADS, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    os.environ[ENV_TVM_THREADS] = str(max(1, cores))
    return max(1, cores)
