"""Teardown on every exit path: context manager (normal, exception, Ctrl-C), SIGTERM/SIGHUP and atexit.

A cluster stays registered until its down() verified that nothing is left, so an interrupted or
failed teardown is retried at exit. Teardown itself runs shielded: a second Ctrl-C (or SIGTERM/SIGHUP)
while it runs is noted and re-raised once it is done, instead of stopping removal half-way. A
SIGKILLed harness runs none of this; its leftovers carry its owner token and the next cluster start
or `chaosbench clean` sweeps them (see owner.py).
"""
from __future__ import annotations

import atexit
import contextlib
import signal
import sys
import threading

# strong references: a cluster whose teardown failed must still be here at exit, also when the run
# that made it has returned (a weak set lost it, and the exit-time retry never ran)
_live: set = set()
_installed = False
_lock = threading.Lock()
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _down_all() -> None:
    for cluster in list(_live):
        try:
            teardown(cluster)
        except BaseException:   # teardown of one cluster must not stop the others'
            pass


def _on_stop_signal(signum, frame):
    # Turn SIGTERM/SIGHUP into an exception so `with cluster:` blocks unwind and tear down.
    raise SystemExit(128 + signum)


def track(cluster) -> None:
    global _installed
    with _lock:
        _live.add(cluster)
        if not _installed:
            atexit.register(_down_all)
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    if signal.getsignal(sig) in (signal.SIG_DFL, None):
                        signal.signal(sig, _on_stop_signal)
            _installed = True


def untrack(cluster) -> None:
    with _lock:
        _live.discard(cluster)


@contextlib.contextmanager
def shielded():
    """Defer SIGINT/SIGTERM/SIGHUP while the block runs (main thread only; elsewhere signals never
    arrive anyway); a signal that came in is re-raised afterwards as KeyboardInterrupt / SystemExit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def note(signum, frame):
        got.append(signum)
        print("chaosbench: still tearing down, the signal takes effect once that is done", file=sys.stderr)

    old = {sig: signal.signal(sig, note) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if got:
        if got[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + got[0])


def teardown(cluster) -> bool:
    """down(), shielded from stop signals; True when the cluster verified that nothing is left."""
    with shielded():
        try:
            cluster.down()
        except Exception as exc:
            print(f"chaosbench: teardown incomplete: {type(exc).__name__}: {exc}", file=sys.stderr)
    return bool(getattr(cluster, "torn_down", False))


class UpDown:
    """`with x:` runs up(), and down() on every way out -- also when up() itself fails half-way.
    collect() (logs, exit codes) runs before down() when the class has one; an interrupt during
    collect() skips the rest of it, never the teardown."""

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            teardown(self)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            getattr(self, "collect", lambda: None)()
        finally:
            teardown(self)
