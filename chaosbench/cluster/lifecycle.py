"""Teardown on every exit path: context manager (normal, exception, Ctrl-C), SIGTERM and atexit.

A SIGKILLed harness runs none of this; its leftovers carry its owner token and the next cluster
start sweeps them (see owner.py).
"""
from __future__ import annotations

import atexit
import signal
import threading
import weakref

_live: "weakref.WeakSet" = weakref.WeakSet()
_installed = False
_lock = threading.Lock()


def _down_all() -> None:
    for cluster in list(_live):
        try:
            cluster.down()
        except Exception:   # teardown of one cluster must not stop the others'
            pass


def _on_sigterm(signum, frame):
    # Turn SIGTERM into an exception so `with cluster:` blocks unwind and tear down.
    raise SystemExit(128 + signum)


def track(cluster) -> None:
    global _installed
    with _lock:
        _live.add(cluster)
        if not _installed:
            atexit.register(_down_all)
            if threading.current_thread() is threading.main_thread() and \
                    signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)
            _installed = True


def untrack(cluster) -> None:
    with _lock:
        _live.discard(cluster)


class UpDown:
    """`with x:` runs up(), and down() on every way out -- also when up() itself fails half-way.
    collect() (logs, exit codes) runs before down() when the class has one."""

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            getattr(self, "collect", lambda: None)()
        finally:
            self.down()
