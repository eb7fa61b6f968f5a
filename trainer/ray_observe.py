"""A user's Ray Train loop, observed: what the node watcher records of a torchrun job, read inside the
Ray worker that runs the loop (a Ray worker is an actor process, not a launcher's child to scan).

`observed(loop, progress)` wraps a `train_loop_per_worker`. Each worker appends to
`$CHAOSBENCH_EVENTS_DIR/events-<node>-local<N>-observed.jsonl`, every line `"observed": true`:

- `worker_start` (rank, world size, restart count = the worker group's start, pid) when the loop starts;
- `ray_checkpoint_offered` with the checkpoint Ray Train holds for this group start (`path`, null: none):
  what `ray.train.get_checkpoint()` would return;
- `ray_get_checkpoint` when the loop calls `ray.train.get_checkpoint()` itself (at most once per start);
- `step` (and `loss`) for every line the loop prints or logs that matches the scenario's progress regex;
- `worker_exit` with `exit_code` 0 when the loop returns, 1 with the error when it raises.

A loop that is offered a checkpoint and never asks for it restarts from step 0 after every failure:
the diagnosis names it (chaosbench/diagnosis/rules/ray_checkpoint.py).
"""
from __future__ import annotations

import builtins
import functools
import json
import logging
import math
import os
import re
import threading
import time


class Events:
    def __init__(self, common: dict):
        self.common = common
        d = os.environ.get("CHAOSBENCH_EVENTS_DIR")
        self.path = d and os.path.join(d, f"events-{common['node']}-local{common['local_rank']}-observed.jsonl")

    def emit(self, event: str, **fields) -> None:
        if not self.path:
            return
        line = json.dumps({"ts": time.time(), "event": event, **self.common, "observed": True, **fields}, default=str)
        try:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass   # a full or vanished events dir must not stop the job


def progress_fields(pattern: re.Pattern | None, text: str) -> dict | None:
    m = pattern.search(text) if pattern else None
    if not m:
        return None
    try:
        fields = {"step": int(m.group("step"))}
    except (IndexError, TypeError, ValueError):
        return None
    if "loss" in pattern.groupindex and m.group("loss") is not None:
        try:
            loss = float(m.group("loss"))
            if math.isfinite(loss):
                fields["loss"] = loss
        except ValueError:
            pass
    return fields


class _Progress(logging.Handler):
    def __init__(self, on_text):
        super().__init__()
        self.on_text = on_text

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.on_text(record.getMessage())
        except Exception:   # noqa: BLE001 — observing must never break the job's logging
            pass


def observed(loop, progress: str | None):
    pattern = re.compile(progress) if progress else None

    @functools.wraps(loop)
    def wrapper(config: dict):
        import ray.train
        from trainer.ray_loop import group_start
        ctx = ray.train.get_context()
        events = Events({"node": os.environ.get("CHAOSBENCH_NODE", os.uname().nodename),
                         "rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
                         "world_size": ctx.get_world_size(), "restart_count": group_start(config.pop("counter")),
                         "pid": os.getpid(), "run_id": os.environ.get("CHAOSBENCH_RUN_ID", "")})
        events.emit("worker_start", started_at=round(time.time(), 3))
        original = ray.train.get_checkpoint
        offered = original()
        events.emit("ray_checkpoint_offered", path=getattr(offered, "path", None))
        asked = []

        def get_checkpoint():
            if not asked:
                asked.append(1)
                events.emit("ray_get_checkpoint", path=getattr(offered, "path", None))
            return original()

        def on_text(text: str) -> None:
            fields = progress_fields(pattern, text)
            if fields is not None:
                events.emit("step", **fields)

        printed = builtins.print
        printing = threading.local()   # Ray Train's print goes through logging: one line, one step event

        def print_(*objects, sep=" ", end="\n", file=None, flush=False):
            on_text(sep.join(str(o) for o in objects))
            printing.now = True
            try:
                printed(*objects, sep=sep, end=end, file=file, flush=flush)
            finally:
                printing.now = False

        handler = _Progress(lambda text: None if getattr(printing, "now", False) else on_text(text))
        logging.getLogger().addHandler(handler)
        ray.train.get_checkpoint, builtins.print = get_checkpoint, print_
        names = getattr(loop, "__globals__", {})   # `from ray.train import get_checkpoint` in the loop's module
        bound = names.get("get_checkpoint") is original
        if bound:
            names["get_checkpoint"] = get_checkpoint
        try:
            out = loop(config)
        except BaseException as exc:
            events.emit("worker_exit", exit_code=1, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            ray.train.get_checkpoint, builtins.print = original, printed
            if bound:
                names["get_checkpoint"] = original
            logging.getLogger().removeHandler(handler)
        events.emit("worker_exit", exit_code=0)
        return out
    return wrapper
