"""Start a throw-away PostgreSQL server on loopback in a temporary directory (for benchmarks).

Usage as a context manager::

    with pg_server() as url:   # postgresql://postgres@127.0.0.1:PORT/postgres
        ...

Uses ``TUNECACHE_TEST_PG_URL`` when set (the server tools/test.sh started) instead.
Needs Debian's ``postgresql`` package (tools/test.sh installs it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


@contextlib.contextmanager
def pg_server() -> Iterator[str]:
    """Yield the URL of a running PostgreSQL server; stop and delete it afterwards."""
    env_url = os.environ.get("TUNECACHE_TEST_PG_URL")
    if env_url:
        yield env_url
        return
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (tools/test.sh does it)")
    pgbin = bins[-1]
    tmp = tempfile.mkdtemp(prefix="tunecache-pg-")
    as_pg: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    data = os.path.join(tmp, "data")
    run = lambda *a: subprocess.run([*as_pg, *a], check=True, stdout=subprocess.DEVNULL)  # noqa: E731
    try:
        run(f"{pgbin}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync")
        run(
            f"{pgbin}/pg_ctl", "-D", data, "-l", os.path.join(tmp, "log"), "-w", "-t", "60", "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {tmp} -c max_connections=200", "start",
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_pg, f"{pgbin}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
