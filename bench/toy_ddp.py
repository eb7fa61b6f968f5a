"""The stock baseline of bench/recovery.py: a minimal DDP script as a user would write it.

    torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT \\
        bench/toy_ddp.py --ckpt-dir DIR [--ckpt-every 5] [--step-sleep 0.02]

Nothing tuned: gloo with its default timeout, no health check, rank 0 saves a checkpoint to disk
every N steps (temp file + rename), every rank loads it on start. Its only extra is a few event
lines in the docs/events.md format (phase, step, checkpoint_loaded/fresh_start, fatal) so the
bench measures it with the same code as the reference trainer.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

_FD = None


def emit(event: str, **fields) -> None:
    global _FD
    d = os.environ.get("CHAOSBENCH_EVENTS_DIR")
    if not d:
        return
    if _FD is None:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"events-{os.environ.get('CHAOSBENCH_NODE', 'node')}-local{os.environ.get('LOCAL_RANK', 0)}.jsonl")
        _FD = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rec = {"ts": time.time(), "event": event, "node": os.environ.get("CHAOSBENCH_NODE", "node"),
           "rank": int(os.environ.get("RANK", 0)), "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
           "world_size": int(os.environ.get("WORLD_SIZE", 1)),
           "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)), "pid": os.getpid(),
           "run_id": os.environ.get("CHAOSBENCH_RUN_ID", ""), **fields}
    os.write(_FD, (json.dumps(rec) + "\n").encode())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--max-steps", type=int, default=100000)
    a = ap.parse_args()
    emit("phase", phase="rendezvous")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    path = os.path.join(a.ckpt_dir, "ckpt.pt")
    step = 0
    emit("phase", phase="checkpoint_restore")
    if os.path.exists(path):
        t0 = time.monotonic()
        state = torch.load(path, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        emit("checkpoint_loaded", tier="disk", step=step, source="local", duration_s=time.monotonic() - t0,
             checksum_ok=None, bytes=os.path.getsize(path))
    else:
        emit("checkpoint_fresh_start", reason="no checkpoint file")
    emit("phase", phase="training")
    while step < a.max_steps:
        t0 = time.perf_counter()
        x = torch.randn(32, 64)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        emit("step", step=step, loss=loss.item(), step_time_s=time.perf_counter() - t0)
        if step % a.ckpt_every == 0 and dist.get_rank() == 0:
            os.makedirs(a.ckpt_dir, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        time.sleep(a.step_sleep)


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # report, then exit non-zero so torchrun restarts the group
        emit("fatal", error=str(exc)[:500], error_type=type(exc).__name__)
        sys.exit(1)
