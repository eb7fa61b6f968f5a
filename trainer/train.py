"""The reference elastic trainer. Launch with torchrun:

    torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29400 \\
        -m trainer.train --config trainer/configs/tiny.yaml [--set section.field=value ...]

Reads top to bottom: config -> process group -> data/model -> restore -> train loop -> shutdown.
Any error emits a `fatal` event and exits non-zero so torchrun restarts the group; events go to
$CHAOSBENCH_EVENTS_DIR (docs/events.md), human-readable logs to stderr.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from contextlib import nullcontext
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from chaosbench import instrument as cb

from trainer import replicas
from trainer.config import load_config, resolve_path
from trainer.data.dataset import TokenIndex
from trainer.data.sampler import StatefulSampler, rank_slice
from trainer.distributed import HealthChecker, check_topology, init_process_group, read_env
from trainer.errors import ConfigurationError, DataLoadingError, HealthCheckError
from trainer.events import EventWriter
from trainer.launcher_hooks import FtHeartbeat
from trainer.model import build_model, param_bytes
from trainer.scaling import micro_batches, plan_batches
from trainer.state import build_state, load_state

log = logging.getLogger("trainer")
WARMUP_STEPS = 10


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m trainer.train", description="chaosbench reference elastic trainer")
    ap.add_argument("--config", required=True, help="YAML config (e.g. trainer/configs/tiny.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override a config value (parsed as YAML); repeatable")
    return ap.parse_args(argv)


class Worker:
    """One training process: owns the event writer and the single exit path."""

    def __init__(self):
        self.events = EventWriter()
        self._exit_lock = threading.Lock()
        self.stop_signal: int | None = None   # SIGTERM/SIGINT seen; the loop saves at its next step boundary
        self.stop_save_timeout_s = 0.0        # > 0 while training with save_on_stop tiers (else: leave at once)

    def die(self, exc: BaseException, code: int = 1) -> None:
        """Emit `fatal` once and leave at once (peers may be gone, so no collective clean-up)."""
        if not self._exit_lock.acquire(blocking=False):
            return
        let_publish_finish()   # a save published this instant is logged before the fatal, not lost
        self.events.emit("fatal", {"error": str(exc), "error_type": type(exc).__name__})
        log.error("fatal: %s: %s", type(exc).__name__, exc)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)

    def on_health_failure(self, exc: BaseException) -> None:
        self.events.emit("health_check_failed", {"error": str(exc), "timeout_s": self.health_timeout_s})
        self.die(exc)

    def on_signal(self, signum: int) -> None:
        """SIGTERM is both torchrun stopping the workers on a membership change and a preemption
        notice (the node goes after a grace period). While training, the loop gets
        `stop_save_timeout_s` to finish its step and save it (see `stop_after_step`); a loop blocked
        in a collective with a dead peer never gets there, and the process leaves without the save."""
        self.stop_signal = signum
        if self.stop_save_timeout_s > 0:
            time.sleep(self.stop_save_timeout_s)
            log.warning("%s: the step did not finish within %.1fs; leaving without a save",
                        signal.Signals(signum).name, self.stop_save_timeout_s)
        self.leave(signal.Signals(signum).name, 128 + signum)

    def stop_after_step(self, step: int, save: Callable[[], list[str]]) -> None:
        """Some rank asked to stop (the flag rides on the step's loss all-reduce, so every rank
        learns it at the same step): save this step, then every rank leaves. The signalled ranks
        exit like a signal; the others exit 1, so their agents restart them into the next round."""
        t0 = time.perf_counter()
        tiers = save()
        fields = {"saved_step": step, "saved_tiers": tiers, "save_s": round(time.perf_counter() - t0, 4)}
        if self.stop_signal is not None:
            self.leave(signal.Signals(self.stop_signal).name, 128 + self.stop_signal, fields)
        self.leave("peer_stopping", 1, fields)

    def leave(self, reason: str, code: int, fields: dict | None = None) -> None:
        if self._exit_lock.acquire(blocking=False):
            let_publish_finish()
            self.events.emit("phase", {"phase": "shutdown", "reason": reason, **(fields or {})})
            log.warning("stopping (%s)%s, exiting", reason, f": saved step {fields['saved_step']} to "
                        f"{fields['saved_tiers'] or 'no tier'}" if fields else "")
            sys.stderr.flush()
            os._exit(code)


def let_publish_finish(timeout_s: float = 1.0) -> None:
    """Before os._exit: a checkpoint being renamed into place gets its checkpoint_saved logged first,
    and none starts after (trainer/checkpoint/local_store.PUBLISHING). Never released: we exit."""
    store = sys.modules.get("trainer.checkpoint.local_store")   # not imported: nothing was ever saved
    if store is not None:
        store.PUBLISHING.acquire(timeout=timeout_s)


def train_step(ddp, index, sampler, plan, seq_len, rank, world_size, optimizer, scheduler, device,
               stop_requested: bool = False) -> tuple[float, bool]:
    """One optimizer step over the next global batch; returns the global mean loss, and whether
    any rank asked to stop (carried by the same all-reduce, so every rank gets the same answer)."""
    ids = sampler.next_global_batch(plan.global_batch)
    micros = micro_batches(rank_slice(ids, rank, world_size), plan.accum_steps)
    optimizer.zero_grad(set_to_none=True)
    local_sum = torch.zeros((), device=device)
    stop = torch.tensor(1.0 if stop_requested else 0.0, device=device)
    for i, mb in enumerate(micros):
        last = i == len(micros) - 1
        if not mb:  # only leading micro-batches can be empty (see micro_batches)
            continue
        batch = index.batch(mb, seq_len).to(device)
        with nullcontext() if last else ddp.no_sync():
            logits = ddp(batch[:, :-1])
            # sum over samples of each sample's mean token loss; scaled so that DDP's gradient mean
            # over ranks equals the mean over the whole global batch, however unevenly it is split
            per_sample_sum = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                             reduction="sum") / seq_len
            (per_sample_sum * world_size / plan.global_batch).backward()
        local_sum += per_sample_sum.detach()
    torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    sums = torch.stack([local_sum, stop])
    dist.all_reduce(sums)
    return sums[0].item() / plan.global_batch, bool(sums[1].item())


def run(worker: Worker, args: argparse.Namespace) -> None:
    events = worker.events
    events.emit("phase", {"phase": "config"})
    cfg, warnings = load_config(args.config, args.set)
    for w in warnings:
        log.warning("config: %s", w)
    t, m, el = cfg["training"], cfg["training"]["model"], cfg["elastic"]

    events.emit("phase", {"phase": "rendezvous"})
    env = read_env()
    check_topology(env, el["min_nodes"], el["max_nodes"])

    events.emit("phase", {"phase": "process_group"})
    backend, device = init_process_group(env, el["pg_timeout_s"])
    worker.health_timeout_s = el["health_check_timeout_s"]
    health = HealthChecker(el["health_check_timeout_s"], el["health_check_interval_s"], worker.on_health_failure)
    log.info("joined: rank %d/%d (node %s, restart %d, backend %s)", env.rank, env.world_size,
             events.node, env.restart_count, backend)

    torch.manual_seed(t["seed"])
    random.seed(t["seed"])
    d = cfg["data"]
    index = TokenIndex(resolve_path(d["index_path"]), [resolve_path(f) for f in d["files"]], d["text_key"])
    sc = cfg["scaling"]
    plan = plan_batches(sc["strategy"], t["per_worker_batch_size"], env.world_size, sc["target_global_batch_size"])
    n_samples = index.num_samples(t["seq_len"])
    if n_samples < plan.global_batch:
        raise DataLoadingError(f"{d['index_path']} has {n_samples} samples of {t['seq_len']} tokens, fewer than one "
                               f"global batch ({plan.global_batch}); add data or lower training.seq_len")
    sampler = StatefulSampler(n_samples, t["seed"])
    model = build_model(m).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=t["lr"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    log.info("model: %.1f MB of parameters; plan: global batch %d, %d accumulation step(s)",
             param_bytes(model) / 1e6, plan.global_batch, plan.accum_steps)

    events.emit("phase", {"phase": "checkpoint_restore"})
    from trainer.checkpoint import CheckpointManager  # the one seam to the checkpoint tiers
    mgr = CheckpointManager(cfg["checkpoint"], node=events.node, rank=env.rank, local_rank=env.local_rank,
                            world_size=env.world_size, local_world_size=env.local_world_size,
                            run_id=os.environ.get("CHAOSBENCH_RUN_ID", ""), emit=events.emit)
    step = 0
    state = mgr.restore()
    if state is not None:
        step = load_state(state, model, optimizer, scheduler, sampler)
        # every rank now holds the same replica, or all stop together with the reason (fatal)
        mgr.check_replicas({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        log.info("resumed at step %d (%d samples seen)", step, sampler.samples_seen)
        if int(state["world_size"]) != env.world_size:
            events.emit("topology_change", {"old_world_size": int(state["world_size"]),
                                            "new_world_size": env.world_size})
            log.warning("world size changed %s -> %d", state["world_size"], env.world_size)
    del state
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    cb.watch(model, optimizer)   # what a corrupt_replica fault flips bits in (a no-op outside chaosbench)

    events.emit("phase", {"phase": "training"})
    if cfg["checkpoint"]["save_on_stop"]:
        worker.stop_save_timeout_s = cfg["checkpoint"]["stop_save_timeout_s"]
        check_stop_budget(worker.stop_save_timeout_s)
    first = step + 1
    heartbeat = FtHeartbeat()   # ft_launcher's rank monitor hears from this rank once a step (else a no-op)
    while step < t["max_steps"]:
        t0 = time.perf_counter()
        loss, stopping = train_step(ddp, index, sampler, plan, t["seq_len"], env.rank, env.world_size, optimizer,
                                    scheduler, device, stop_requested=worker.stop_signal is not None)
        step += 1
        step_time = time.perf_counter() - t0
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at step {step}; lower training.lr")
        cb.fault_point(step)     # where the harness's cooperative faults fire (docs/gray-failures.md)
        heartbeat.beat()
        digest = cb.digest(model) if replicas.digest_due(mgr.cfg, step) else None
        if digest or step % t["log_every"] == 0 or step == first:
            events.emit("step", {"step": step, "loss": loss, "samples_seen": sampler.samples_seen,
                                 "step_time_s": step_time, "global_batch": plan.global_batch,
                                 "accum_steps": plan.accum_steps, **({"param_digest": digest} if digest else {})})
            log.info("step %d loss %.4f (%.3fs, %d samples seen)", step, loss, step_time, sampler.samples_seen)
        if digest:
            replicas.verify(step, digest, events.emit)   # before the save: no checkpoint holds a diverged replica
        state_fn = lambda: build_state(step, model, optimizer, scheduler, sampler, env.world_size)  # noqa: E731
        mgr.maybe_save(step, state_fn)
        if stopping:
            worker.stop_after_step(step, lambda: mgr.save_on_stop(step, state_fn))
        if step % el["health_check_interval_steps"] == 0:
            try:
                health.check()
            except HealthCheckError as exc:
                worker.on_health_failure(exc)
        if t["step_sleep_s"]:
            time.sleep(t["step_sleep_s"])

    worker.stop_save_timeout_s = 0.0        # no more steps: a stop from here on leaves at once
    heartbeat.close()
    events.emit("run_complete", {"step": step})
    events.emit("phase", {"phase": "shutdown"})
    if not health.close():
        log.warning("heartbeat did not stop with the other ranks in time")
    mgr.close()
    dist.destroy_process_group()
    log.info("run complete at step %d", step)


def check_stop_budget(stop_save_timeout_s: float) -> None:
    """Under warm start the worker's client SIGKILLs it TRAINER_STOP_FORCE_AFTER_S after a SIGTERM
    (trainer/warm_start.py): a save-on-stop budget at least that long would be cut short silently."""
    from trainer.warm_start import SOCKET_ENV, stop_force_after_s
    if os.environ.get(SOCKET_ENV) and stop_save_timeout_s >= stop_force_after_s():
        raise ConfigurationError(
            f"checkpoint.stop_save_timeout_s={stop_save_timeout_s:g} is not below TRAINER_STOP_FORCE_AFTER_S="
            f"{stop_force_after_s():g} (the warm-start client SIGKILLs a worker that long after SIGTERM): lower "
            f"the timeout or raise TRAINER_STOP_FORCE_AFTER_S", "checkpoint", "stop_save_timeout_s")


def watch_signals(worker: Worker) -> None:
    """Report SIGTERM/SIGINT at once, even while the training thread is blocked in a collective.

    A Python handler only runs when the main thread gets back to bytecode, which a stuck gloo
    all-reduce may never do; the C-level handler, however, writes the signal number to the
    wake-up fd immediately, and a watcher thread acts on it."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)

    def watch() -> None:
        data = os.read(r, 1)
        if data:
            worker.on_signal(data[0])
    threading.Thread(target=watch, name="signals", daemon=True).start()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [{os.environ.get('CHAOSBENCH_NODE', '')} rank={os.environ.get('RANK', '?')}] "
                               "%(levelname)s %(message)s")
    args = parse_args(argv)
    worker = Worker()
    watch_signals(worker)
    try:
        run(worker, args)
    except BaseException as exc:  # noqa: BLE001 — every error is reported, then the process exits
        worker.die(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
