"""A plain torchrun DDP job (CPU, gloo, tiny model) with the habits real jobs have, one flag each,
so each diagnosis rule can be shown a run that has the habit and one that has not.

    --save-to ckpt-dir | cwd | ckpt-subdir    where snapshots go ($CHAOSBENCH_CHECKPOINT_DIR, the
                                              working directory, or a subdirectory never created)
    --saver local0 | rank0                    every node's local rank 0, or global rank 0 only
    --restore agree | own                     ranks agree on one step, or each loads what its node holds
    --epoch-restart                           resume the step but start the epoch's data from its start
    --pg-timeout S                            the collective timeout (default: torch's own, 30 min on gloo)
    --save-on-sigterm                         save a snapshot when SIGTERM arrives (a preemption notice)
    --print-rank0                             only rank 0 prints progress
    --events                                  say each save with chaosbench.instrument (checkpoint_saved)
"""
import argparse
import datetime
import glob
import os
import re
import signal
import sys
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--epoch-len", type=int, default=8, help="steps per epoch")
ap.add_argument("--step-time", type=float, default=0.1)
ap.add_argument("--save-to", choices=["ckpt-dir", "cwd", "ckpt-subdir"], default="ckpt-dir")
ap.add_argument("--saver", choices=["local0", "rank0"], default="local0")
ap.add_argument("--restore", choices=["agree", "own"], default="agree")
ap.add_argument("--epoch-restart", action="store_true")
ap.add_argument("--pg-timeout", type=float, default=None)
ap.add_argument("--save-on-sigterm", action="store_true")
ap.add_argument("--print-rank0", action="store_true")
ap.add_argument("--events", action="store_true")
a = ap.parse_args()

ckpt_dir = {"ckpt-dir": os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"), "cwd": ".",
            "ckpt-subdir": os.path.join(os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"), "run")}[a.save_to]


def newest() -> int:
    steps = [int(m.group(1)) for p in glob.glob(os.path.join(ckpt_dir, "snapshot-*.pt"))
             if (m := re.search(r"snapshot-(\d+)\.pt$", p))]
    return max(steps, default=0)


kw = {"timeout": datetime.timedelta(seconds=a.pg_timeout)} if a.pg_timeout else {}
dist.init_process_group("gloo", **kw)
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
mine = newest()
if a.restore == "agree":
    found = torch.tensor([mine, -mine])
    dist.all_reduce(found, op=dist.ReduceOp.MIN)
    start = int(found[0]) if int(found[0]) == -int(found[1]) else 0
else:
    start = mine
if start:
    snap = torch.load(os.path.join(ckpt_dir, f"snapshot-{start}.pt"), weights_only=True)
    model.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
ddp = torch.nn.parallel.DistributedDataParallel(model)
x = torch.randn(256, 16, generator=torch.Generator().manual_seed(1 + rank))
y = x.sum(dim=1, keepdim=True).sin()
saver = rank == 0 if a.saver == "rank0" else int(os.environ.get("LOCAL_RANK", 0)) == 0
step = start


def save(s: int) -> None:
    path = os.path.join(ckpt_dir, f"snapshot-{s}.pt")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": s}, path)
    for old in glob.glob(os.path.join(ckpt_dir, "snapshot-*.pt")):
        if old != path:
            os.remove(old)
    if a.events:
        import chaosbench.instrument as cb
        cb.saved(tier="nvme", step=s, path=path)


def on_term(*_):
    if a.save_on_sigterm and saver and step:
        save(step)
        print(f"saved snapshot-{step} on SIGTERM", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
epoch0 = 0 if a.epoch_restart else start // a.epoch_len
for step in range(start + 1, a.steps + 1):
    epoch = epoch0 + (step - start - 1) // a.epoch_len if a.epoch_restart else (step - 1) // a.epoch_len
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    if rank == 0 or not a.print_rank0:
        print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    if saver and step % a.every == 0:
        save(step)
    time.sleep(a.step_time)
dist.destroy_process_group()
