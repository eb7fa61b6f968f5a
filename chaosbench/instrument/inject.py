"""Cooperative faults, the job's side: `cb.fault_point(step)` (cb.step calls it) acts on the commands
the harness drops into `$CHAOSBENCH_EVENTS_DIR/inject/` (docs/events.md, "Cooperative faults").

One JSON file per fault, renamed into place: {"v": 1, "id", "fault", "run_id", "rank", "at_step",
"params"}. A command fires on the process whose $RANK is `rank`, at the first step >= `at_step`, once
per run: `<id>.fired` is created with O_CREAT|O_EXCL first, so a restarted incarnation (or a racing
one) never fires it again. Per call this costs one os.stat of the directory while nothing changed.
A malformed command file costs a warning on stderr, never an exception: the only exceptions out of
fault_point are the worker_error ones it was told to raise.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
import weakref

from .digest import digest, flip_bits
from .writer import _env_int

FAULTS = ("worker_error", "gil_hang", "corrupt_replica")
CUDA_ERROR = ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
              "reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging "
              "consider passing CUDA_LAUNCH_BLOCKING=1")
NCCL_ERROR = ("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
              "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
EXCEPTION_ERROR = "chaosbench worker_error: injected exception"
WATCH_FIX = "call cb.watch(model, optimizer) once after building them"
# A directory's mtime has a coarse clock (a jiffy on ext4, 1 s elsewhere): a file renamed in within the
# same tick as our listing leaves the mtime unchanged, so a listing taken less than this after the
# mtime is not trusted and the next call lists again.
_SETTLE_NS = 2_000_000_000


# ---- what the job lets us touch: cb.watch ----

_watched: dict = {"model": None, "optimizer": None, "digest_every": None}


def _ref(obj):
    try:
        return weakref.ref(obj)
    except TypeError:   # an object without weakref support is kept alive; a model always has it
        return lambda: obj


def watch(model, optimizer=None, digest_every: int | None = None) -> None:
    """Let corrupt_replica reach `model` (and, for target grad, `optimizer`); with digest_every=K,
    cb.step(step) adds `param_digest` (cb.digest(model)) to its event when step % K == 0.
    Weak references: watching keeps nothing alive. Outside chaosbench nothing comes of it."""
    if digest_every is not None and (isinstance(digest_every, bool) or not isinstance(digest_every, int)
                                     or digest_every < 1):
        raise ValueError(f"cb.watch: digest_every={digest_every!r}; give a step count >= 1 or None")
    _watched.update(model=None if model is None else _ref(model),
                    optimizer=None if optimizer is None else _ref(optimizer), digest_every=digest_every)


def watched() -> tuple:
    """(model, optimizer) as watched and still alive, else None in their place."""
    return tuple(None if _watched[k] is None else _watched[k]() for k in ("model", "optimizer"))


_digest_warned = False


def digest_due(step: int) -> str | None:
    """The watched model's digest when cb.watch asked for one at this step; None otherwise (never raises)."""
    global _digest_warned
    every, model = _watched["digest_every"], watched()[0]
    if not every or model is None or step % every:
        return None
    try:
        return digest(model)
    except Exception as e:
        if not _digest_warned:
            _digest_warned = True
            _say(f"param_digest left out: {type(e).__name__}: {e}")
        return None


def _say(msg: str) -> None:
    print(f"chaosbench: {msg}", file=sys.stderr, flush=True)


# ---- the reader of the inject directory ----

def _validate(cmd, name: str) -> str | None:
    """Why `cmd` (the content of file `name`) is not a command, or None."""
    if not isinstance(cmd, dict):
        return "not a JSON object"
    if cmd.get("v") != 1:
        return f"field v is {cmd.get('v')!r}, this reader knows 1"
    fid = cmd.get("id")
    if not isinstance(fid, str) or not fid or "/" in fid or name != f"{fid}.json":
        return f"field id {fid!r} does not match the file name"
    if cmd.get("fault") not in FAULTS:
        return f"field fault {cmd.get('fault')!r} is not one of {', '.join(FAULTS)}"
    for key, ok in (("run_id", isinstance(cmd.get("run_id"), str)),
                    ("rank", type(cmd.get("rank")) is int),
                    ("at_step", cmd.get("at_step") is None or type(cmd.get("at_step")) is int),
                    ("params", isinstance(cmd.get("params", {}), dict))):
        if not ok:
            return f"field {key} is {cmd.get(key)!r}"
    return None


class Injector:
    """Reads `<events_dir>/inject/` for one worker process (rank `rank` of run `run_id`) and fires what is
    due. `emit(event, **fields)` writes the fault_fired / fault_refused events."""

    def __init__(self, events_dir: str, run_id: str, rank: int, emit):
        self.dir = os.path.join(events_dir, "inject")
        self.run_id, self.rank, self.emit = run_id, rank, emit
        self._mtime: int | None = None     # the directory's mtime at the last listing
        self._listed_ns = 0                # wall clock when that listing started
        self._known: set[str] = set()      # files read (a command, or one for another rank/run)
        self._pending: dict[str, dict] = {}
        self._bad: dict[str, tuple] = {}   # unreadable file -> its (mtime, size, inode), re-read when it changes
        self._warned: set[str] = set()

    def poll(self, step: int) -> list[dict]:
        """The commands for this rank due at `step`, in (at_step, id) order."""
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            return []
        if mtime != self._mtime or self._listed_ns < mtime + _SETTLE_NS:
            self._list(mtime)
        if self._bad:   # a file written in place (no rename) changes without touching the directory
            self._reread_bad()
        if not self._pending:
            return []
        due = [c for c in self._pending.values() if c.get("at_step") is None or step >= c["at_step"]]
        return sorted(due, key=lambda c: (c.get("at_step") or 0, c["id"]))

    def _list(self, mtime: int) -> None:
        self._mtime, self._listed_ns = mtime, time.time_ns()
        try:
            names = set(os.listdir(self.dir))
        except OSError:
            return
        for name in list(self._pending):   # withdrawn, or fired by another incarnation
            if name not in names or f"{self._pending[name]['id']}.fired" in names:
                del self._pending[name]
        self._bad = {n: sig for n, sig in self._bad.items() if n in names}
        for name in sorted(names):          # `<id>.json.tmp` is a command still being written: skipped
            if name.endswith(".json") and name not in self._known and name not in self._bad:
                self._read(name, names)

    def _reread_bad(self) -> None:
        for name, sig in list(self._bad.items()):
            now = self._sig(name)
            if now is None:
                del self._bad[name]
            elif now != sig:
                del self._bad[name]
                self._read(name, None)

    def _sig(self, name: str):
        try:
            st = os.stat(os.path.join(self.dir, name))
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _read(self, name: str, names: set[str] | None) -> None:
        """Read command file `name`; `names`: the directory's listing (None: look for the marker)."""
        sig = self._sig(name)
        if sig is None:
            return
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8") as f:
                cmd = json.load(f)
            why = _validate(cmd, name)
        except (OSError, ValueError) as e:
            why = f"unreadable: {type(e).__name__}: {e}"
        if why:
            self._bad[name] = sig
            if name not in self._warned:
                self._warned.add(name)
                _say(f"ignoring fault command {os.path.join(self.dir, name)}: {why}")
            return
        self._known.add(name)
        marker = f"{cmd['id']}.fired"
        done = marker in names if names is not None else os.path.exists(os.path.join(self.dir, marker))
        if cmd["run_id"] == self.run_id and cmd["rank"] == self.rank and not done:
            self._pending[name] = cmd

    def claim(self, cmd: dict, step: int) -> bool:
        """Create `<id>.fired` (O_EXCL): True for the one process that may act on `cmd`, ever."""
        self._pending.pop(f"{cmd['id']}.json", None)
        path = os.path.join(self.dir, f"{cmd['id']}.fired")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as e:   # without the marker a restart could fire it twice: better not at all
            _say(f"fault {cmd['id']} not fired: cannot create {path}: {e}")
            return False
        try:
            os.write(fd, json.dumps({"rank": self.rank, "step": step, "pid": os.getpid(),
                                     "ts": time.time()}).encode())
        except OSError:
            pass
        finally:
            os.close(fd)
        return True

    def fire(self, cmd: dict, step: int) -> None:
        if not self.claim(cmd, step):
            return
        act = {"worker_error": self._worker_error, "gil_hang": self._gil_hang,
               "corrupt_replica": self._corrupt_replica}[cmd["fault"]]
        try:
            err = act(cmd, cmd.get("params") or {}, step)
        except Exception as e:   # a fault that cannot act is refused, never a crash of the job
            return self.refused(cmd, step, f"{type(e).__name__}: {e}")
        if err is not None:      # worker_error: the one exception fault_point raises, on purpose
            raise err

    def fired(self, cmd: dict, step: int, detail: str) -> None:
        _say(f"fault {cmd['id']} ({cmd['fault']}) fired at step {step}: {detail}")
        self.emit("fault_fired", fault_id=cmd["id"], fault=cmd["fault"], step=step, detail=detail)

    def refused(self, cmd: dict, step: int, reason: str) -> None:
        _say(f"fault {cmd['id']} ({cmd['fault']}) refused at step {step}: {reason}")
        self.emit("fault_refused", fault_id=cmd["id"], fault=cmd["fault"], step=step, reason=reason)

    # ---- the actions ----

    def _worker_error(self, cmd: dict, p: dict, step: int) -> Exception | None:
        kind = p.get("kind", "exception")
        if kind not in ("cuda", "nccl", "exception"):
            return self.refused(cmd, step, f"params.kind {kind!r} is not one of cuda, nccl, exception")
        err = worker_error(kind)
        self.fired(cmd, step, f"{type(err).__name__}: {str(err).splitlines()[0]}")
        return err

    def _gil_hang(self, cmd: dict, p: dict, step: int) -> None:
        hold = p.get("hold_s")
        if hold is not None and (isinstance(hold, bool) or not isinstance(hold, (int, float)) or not hold >= 0):
            return self.refused(cmd, step, f"params.hold_s {hold!r} is not a number >= 0 or null")
        detail = "holding the GIL until killed" if hold is None else f"holding the GIL for {hold:g} s"
        hold_gil(hold, announce=lambda: self.fired(cmd, step, detail))

    def _corrupt_replica(self, cmd: dict, p: dict, step: int) -> None:
        target, bits, seed = p.get("target", "param"), p.get("bits", 1), p.get("seed", 0)
        if target not in ("param", "grad"):
            return self.refused(cmd, step, f"params.target {target!r} is not param or grad")
        if type(bits) is not int or bits < 1 or type(seed) is not int:
            return self.refused(cmd, step, f"params.bits {bits!r} (int >= 1) / params.seed {seed!r} (int)")
        model, opt = watched()
        if model is None:
            return self.refused(cmd, step, f"no model to corrupt: {WATCH_FIX}")
        seed += self.rank   # each rank its own draw, the same on a re-run
        if target == "param":
            try:
                detail = flip_bits(list(model.named_parameters()), bits, seed)
            except ValueError as e:
                return self.refused(cmd, step, str(e))
            return self.fired(cmd, step, detail)
        if opt is None:
            return self.refused(cmd, step, f"target grad needs the optimizer: {WATCH_FIX}")
        if not hasattr(opt, "register_step_pre_hook"):
            return self.refused(cmd, step, "target grad needs optimizer.register_step_pre_hook (torch >= 2.0)")
        model_ref = _ref(model)

        def hook(optimizer, args, kwargs):   # runs inside the next optimizer.step(), after DDP's all-reduce
            handle.remove()
            m = model_ref()
            try:
                named = [] if m is None else [(n, q.grad) for n, q in m.named_parameters() if q.grad is not None]
                detail = flip_bits(named, bits, seed, what="grad of ")
            except Exception as e:
                return self.refused(cmd, step, f"at optimizer.step(): {type(e).__name__}: {e}")
            self.fired(cmd, step, f"{detail}, in the update after step {step}")

        handle = opt.register_step_pre_hook(hook)


def worker_error(kind: str) -> Exception:
    """The exception a real failure of `kind` (cuda, nccl, exception) raises out of a training step."""
    if kind == "cuda":
        return RuntimeError(CUDA_ERROR)
    if kind == "nccl":
        try:
            import torch.distributed as dist
            return dist.DistBackendError(NCCL_ERROR)
        except (ImportError, AttributeError):
            return RuntimeError(NCCL_ERROR)
    return RuntimeError(EXCEPTION_ERROR)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def hold_gil(hold_s: float | None, announce=None) -> None:
    """Stop the whole process the way a C call stuck with the GIL held does: no Python thread runs and
    no Python signal handler either (a signal's C handler only sets a flag). SIGKILL ends it. SIGTERM is
    held back until the hold ends, also in a job that never set a SIGTERM handler (whose default
    action would otherwise end the process at once): a stuck worker does not die of SIGTERM, which is
    what torchrun's SIGTERM-then-SIGKILL escalation must cope with. After `hold_s` seconds (None:
    never) it returns, then a held-back SIGTERM takes effect. `announce()` runs once signals are held
    back, just before the hold: a SIGTERM sent on seeing its message cannot slip in before."""
    libc = ctypes.PyDLL(None)   # PyDLL, unlike CDLL, does not release the GIL around the call
    deferred: list[int] = []
    old = None
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        old = signal.signal(signal.SIGTERM, lambda signum, frame: deferred.append(signum))
    # blocked here, a signal goes to another thread (whose C handler sets a flag) or waits: the sleep
    # below is never interrupted, so control never comes back to Python until the hold is over
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
    try:
        if announce is not None:
            announce()
        if hold_s is None:
            while True:
                libc.pause()
        req, rem = _Timespec(int(hold_s), int(hold_s % 1 * 1e9)), _Timespec()
        while libc.nanosleep(ctypes.byref(req), ctypes.byref(rem)) != 0 and (rem.tv_sec or rem.tv_nsec):
            req = _Timespec(rem.tv_sec, rem.tv_nsec)
    finally:
        waiting = signal.SIGTERM in signal.sigpending()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if old is not None:
            signal.signal(signal.SIGTERM, old)   # runs the pending Python handlers first: `deferred` is complete
            if deferred or waiting:
                signal.raise_signal(signal.SIGTERM)


# ---- the per-process entry point ----

_injector: Injector | None = None
_key: tuple | None = None


def fault_point(step: int) -> None:
    """Fire the cooperative faults due at `step` for this rank. A no-op without $CHAOSBENCH_EVENTS_DIR."""
    global _injector, _key
    events_dir = os.environ.get("CHAOSBENCH_EVENTS_DIR")
    if not events_dir:
        return
    key = (os.getpid(), events_dir, os.environ.get("CHAOSBENCH_RUN_ID", ""), os.environ.get("RANK"))
    if key != _key:   # first call, a forked child, or (tests) another environment
        from . import emit
        _injector, _key = Injector(events_dir, key[2], _env_int("RANK", 0), emit), key
    try:
        due = _injector.poll(int(step))
    except Exception as e:   # a reader bug must not stop training
        _say(f"fault commands not read: {type(e).__name__}: {e}")
        return
    for cmd in due:
        _injector.fire(cmd, int(step))
