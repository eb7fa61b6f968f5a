"""One background writer thread per tier, with a single pending slot.

The slot bounds memory (at most one running + one pending snapshot per tier). A save that arrives
while another is pending replaces it (coalescing to the newest state) and the replaced step is
reported as skipped. A failed save can be kept for a retry (S3 catch-up after an outage) until a
newer save supersedes it.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class TierWriter:
    def __init__(self, tier: str, write_fn: Callable, on_skip: Callable, retry_failed: bool = False,
                 retry_backoff_s: float = 1.0, max_backoff_s: float = 30.0):
        self.tier = tier
        self._write_fn = write_fn  # write_fn(snapshot, attempt) -> bool (True = done)
        self._on_skip = on_skip    # on_skip(tier, snapshot, reason)
        self._retry_failed = retry_failed
        self._backoff0 = retry_backoff_s
        self._max_backoff = max_backoff_s
        self._cv = threading.Condition()
        self._pending = None
        self._busy = False
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"ckpt-{tier}", daemon=True)
        self._thread.start()

    def submit(self, snapshot) -> None:
        with self._cv:
            replaced, self._pending = self._pending, snapshot
            self._cv.notify()
        if replaced is not None:
            self._on_skip(self.tier, replaced, f"coalesced: step {snapshot.step} arrived while the previous "
                                    f"{self.tier} save was still running")

    def busy(self) -> bool:
        with self._cv:
            return self._busy or self._pending is not None

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the running and pending saves are done; True if they were within timeout."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._busy or self._pending is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _run(self) -> None:
        retry, attempt, backoff = None, 0, self._backoff0
        while True:
            with self._cv:
                deadline = time.monotonic() + backoff if retry is not None else None
                while self._pending is None and not self._closing:
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    self._cv.wait(wait)
                if self._pending is not None:
                    job, self._pending = self._pending, None
                    if retry is not None:
                        self._on_skip(self.tier, retry, f"superseded by step {job.step} before its retry succeeded")
                    retry, attempt, backoff = None, 0, self._backoff0
                elif retry is not None and not self._closing:
                    job, attempt = retry, attempt + 1
                    backoff = min(backoff * 2, self._max_backoff)
                else:
                    return  # closing with nothing to do (a failed save is dropped at shutdown)
                self._busy = True
            try:
                done = self._write_fn(job, attempt)
            except Exception:  # the write_fn reports its own errors; never kill the thread
                log.exception("%s checkpoint writer crashed on step %s", self.tier, job.step)
                done = True
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
            if not done and self._retry_failed:
                retry = job

    def close(self, timeout: float) -> bool:
        """Finish the running and pending save; True if done within timeout."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()
