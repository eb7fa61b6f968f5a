"""Training-step time and throughput of the reference trainer, tiny vs 50 MB config, in one run.

    .venv/bin/python bench/train_step.py [--steps 30] [--medium-steps 8]

Runs the trainer's own `train_step` (DDP over a one-rank gloo group, or NCCL with CUDA) in a
single process, so the figures are the per-worker compute cost without network or checkpoints.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from trainer.config import load_config, resolve_path  # noqa: E402
from trainer.data.dataset import TokenIndex  # noqa: E402
from trainer.data.sampler import StatefulSampler  # noqa: E402
from trainer.model import build_model, param_bytes  # noqa: E402
from trainer.scaling import plan_batches  # noqa: E402
from trainer.train import WARMUP_STEPS, train_step  # noqa: E402


def measure(config: str, steps: int, warmup: int, device: torch.device) -> dict:
    cfg, _ = load_config(config)
    t, d = cfg["training"], cfg["data"]
    torch.manual_seed(t["seed"])
    index = TokenIndex(resolve_path(d["index_path"]))
    plan = plan_batches(cfg["scaling"]["strategy"], t["per_worker_batch_size"], 1,
                        cfg["scaling"]["target_global_batch_size"])
    sampler = StatefulSampler(index.num_samples(t["seq_len"]), t["seed"])
    model = build_model(t["model"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        train_step(ddp, index, sampler, plan, t["seq_len"], 0, 1, opt, sched, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"config": config, "param_mb": param_bytes(model) / 1e6, "batch": plan.global_batch,
            "seq_len": t["seq_len"], "median_s": med, "mean_s": statistics.fmean(times),
            "samples_s": plan.global_batch / med, "tokens_s": plan.global_batch * t["seq_len"] / med}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps for the tiny config")
    ap.add_argument("--medium-steps", type=int, default=8, help="timed steps for the 50 MB config")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    device = torch.device("cuda:0") if cuda else torch.device("cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu'} ({torch.get_num_threads()} threads), "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    try:
        tiny = measure("trainer/configs/tiny.yaml", args.steps, args.warmup, device)
        medium = measure("trainer/configs/medium_50mb.yaml", args.medium_steps, args.warmup, device)
    finally:
        dist.destroy_process_group()
    for r in (tiny, medium):
        print(f"{r['config']:<36} params {r['param_mb']:6.1f} MB  batch {r['batch']:>2}x{r['seq_len']:<4} "
              f"step median {r['median_s'] * 1e3:8.1f} ms (mean {r['mean_s'] * 1e3:8.1f})  "
              f"{r['samples_s']:8.1f} samples/s  {r['tokens_s']:9.0f} tokens/s")
    print(f"ratio 50MB/tiny: step time x{medium['median_s'] / tiny['median_s']:.1f}, "
          f"samples/s x{medium['samples_s'] / tiny['samples_s']:.3f}, parameters x{medium['param_mb'] / tiny['param_mb']:.0f}")
    verdict = "PASS" if tiny["median_s"] < 0.25 else "FAIL"
    print(f"target: tiny step well under 1 s (< 250 ms) -> {tiny['median_s'] * 1e3:.1f} ms [{verdict}]")


if __name__ == "__main__":
    main()
