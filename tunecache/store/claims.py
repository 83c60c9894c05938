"""Task claims as the executors use them: who holds a claim, and a lease that renews it.

A claim (:meth:`tunecache.store.contract.BaseStore.claim`) keeps two warmers off the same task;
the lease renews the claims of the tasks being searched in a background thread and releases
them at the end. A claim whose holder is a process of this host that died is taken over at once
instead of waiting for its lease.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from types import TracebackType

from tunecache.errors import StoreError
from tunecache.store.contract import BaseStore
from tunecache.store.keys import HardwareKey, WorkloadKey

__all__ = ["Lease", "default_holder", "holder_is_dead"]


def default_holder() -> str:
    """Return a claim holder id unique to this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_is_dead(holder: str | None) -> bool:
    """Return whether ``holder`` is a process of this host that no longer runs.

    Its claims can be taken over at once instead of waiting for the lease to expire.
    """
    if not holder:
        return False
    host, _, rest = holder.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lease:
    """Hold claims on tasks while they are searched, renewing them in a background thread.

    Parameters
    ----------
    store
        The store the claims live in.
    hardware
        The hardware key of the tasks.
    keys
        The workloads claimed.
    holder
        The claims' holder.
    lease_s
        Lease length; claims are renewed every ``lease_s / 3`` seconds.
    """

    def __init__(
        self, store: BaseStore, hardware: HardwareKey, keys: list[WorkloadKey], holder: str, lease_s: float
    ) -> None:
        self.store, self.hardware, self.keys, self.holder, self.lease_s = store, hardware, keys, holder, lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True)

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            for k in self.keys:
                try:
                    self.store.claim(k, self.hardware, self.holder, self.lease_s)
                except StoreError:  # a failed renewal only risks a duplicate search
                    pass

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for k in self.keys:
            try:
                self.store.release(k, self.hardware, self.holder)
            except StoreError:  # the lease expires by itself
                pass
