"""Three lines in your training loop give chaosbench every check (docs/byo-trainer.md):

    from chaosbench import instrument as cb
    cb.restored(tier="nvme", step=start)   # or cb.fresh_start("no snapshot"), or let cb.load() say it
    cb.step(step, loss=loss.item())
    cb.saved(tier="nvme", step=step)       # or let cb.save() / cb.dcp_save() say it

Cooperative faults and replica digests: `cb.watch(model, optimizer, digest_every=K)` once, and
cb.step (or `cb.fault_point(step)`) acts on the harness's commands (worker_error, gil_hang,
corrupt_replica; chaosbench/instrument/inject.py); `cb.digest(model)` hashes the parameters.

Stdlib only (torch is imported inside the save/load helpers), and a no-op unless
$CHAOSBENCH_EVENTS_DIR is set: the same script runs unchanged outside chaosbench. No call here ever
raises because of events: an unwritable directory costs one warning on stderr.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

from . import inject as _inject
from .checkpoints import ChecksumError, dcp_load, dcp_save, load, save
from .digest import digest
from .inject import fault_point, watch
from .tiers import tier_of
from .writer import EventWriter, node_name, read_events

__all__ = ["enabled", "emit", "phase", "step", "saved", "save_failed", "restored", "fresh_start", "fatal",
           "done", "run", "save", "load", "dcp_save", "dcp_load", "tier_of", "ChecksumError",
           "EventWriter", "node_name", "read_events", "fault_point", "watch", "digest"]

_writer: EventWriter | None = None
_KEEP_NULL = ("tier", "checksum_ok")   # null says "unknown" / "not computed": checks read it
_lock = threading.Lock()


def _get() -> EventWriter:
    """The process's writer, made on first use (and again in a forked child: the pid is a common field)."""
    global _writer
    with _lock:
        if _writer is None or _writer.common["pid"] != os.getpid():
            _writer = EventWriter()
        return _writer


def enabled() -> bool:
    """True when running under chaosbench (events are written)."""
    return bool(os.environ.get("CHAOSBENCH_EVENTS_DIR")) and _get().enabled


def emit(event: str, **fields) -> dict | None:
    """Write one event line (docs/events.md); None when not under chaosbench. Never raises.
    Fields that are None are left out, except tier and checksum_ok."""
    if not os.environ.get("CHAOSBENCH_EVENTS_DIR"):
        return None
    try:
        return _get().emit(event, {k: v for k, v in fields.items() if v is not None or k in _KEEP_NULL})
    except Exception as e:   # a bad field value must not stop training either
        print(f"chaosbench: event {event!r} dropped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return None


def phase(name: str, **fields) -> dict | None:
    """Entering a phase: config, rendezvous, process_group, checkpoint_restore, training, shutdown."""
    return emit("phase", phase=name, **fields)


def step(step: int, loss: float | None = None, **fields) -> dict | None:
    """After optimizer step `step` (1-based count of steps done); `loss` enables loss_continuity.
    Adds `param_digest` when cb.watch(..., digest_every=K) asked for it, then runs cb.fault_point(step)
    (after the event: a step event precedes any fault_fired of that step)."""
    if "param_digest" not in fields and os.environ.get("CHAOSBENCH_EVENTS_DIR"):
        fields["param_digest"] = _inject.digest_due(int(step))
    out = emit("step", step=int(step), loss=None if loss is None else float(loss), **fields)
    fault_point(step)
    return out


def saved(tier: str | None = None, step: int | None = None, path: str | None = None, **fields) -> dict | None:
    """A checkpoint save completed (fields: bytes, stall_s, total_s, checksum). Tier from `path` if not given."""
    tier, note = tier_of(path, tier)
    return emit("checkpoint_saved", tier=tier, tier_note=note, step=step, path=_str(path), **fields)


def save_failed(error, tier: str | None = None, step: int | None = None, path: str | None = None) -> dict | None:
    """A save failed and training goes on."""
    tier, note = tier_of(path, tier)
    return emit("checkpoint_failed", tier=tier, tier_note=note, step=step, path=_str(path), error=_err(error))


def restored(tier: str | None = None, step: int | None = None, path: str | None = None, source: str = "local",
             **fields) -> dict | None:
    """State was restored from a checkpoint of `step` (fields: duration_s, checksum_ok, checksum, bytes).
    source: "local" or "peer" (received from another rank)."""
    tier, note = tier_of(path, tier)
    return emit("checkpoint_loaded", tier=tier, tier_note=note, step=step, source=source, path=_str(path),
                **fields)


def fresh_start(reason: str = "no checkpoint") -> dict | None:
    """No valid checkpoint anywhere: training starts from step 0."""
    return emit("checkpoint_fresh_start", reason=reason)


def fatal(error: BaseException | str) -> dict | None:
    """The worker is about to exit with an error."""
    return emit("fatal", error=_err(error),
                error_type=type(error).__name__ if isinstance(error, BaseException) else "Error")


def done(step: int) -> dict | None:
    """Training reached its last step; the worker exits 0."""
    return emit("run_complete", step=int(step))


@contextlib.contextmanager
def run():
    """`with cb.run():` around the training: phase training on entry, phase shutdown on a clean exit,
    fatal (then the exception goes on) on an error; SystemExit(0) and KeyboardInterrupt are not errors."""
    phase("training")
    try:
        yield
    except SystemExit as e:
        if e.code not in (None, 0):
            fatal(e)
        raise
    except KeyboardInterrupt:
        phase("shutdown", reason="KeyboardInterrupt")
        raise
    except BaseException as e:
        fatal(e)
        raise
    phase("shutdown")


def _str(path) -> str | None:
    return None if path is None else str(path)


def _err(error) -> str:
    return f"{type(error).__name__}: {error}" if isinstance(error, BaseException) and not str(error) else str(error)
