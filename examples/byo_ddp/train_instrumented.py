"""train_plain.py plus chaosbench.instrument: the same job, now saying where it restored from, its
progress and loss, each snapshot saved (with a checksum verified on load) and a fatal error.
Outside chaosbench the added lines do nothing.

Local rank 0 of every node keeps a snapshot of the newest step in --ckpt-dir (DDP replicas are
identical, so each node holds its own copy); on start every rank finds its node's newest snapshot,
the ranks agree on it (all the same step, else all start fresh) and load it.

    torchrun --standalone --nproc-per-node=2 train_plain.py --steps 40
"""
import argparse
import datetime
import glob
import os
import re
import time

import torch
import torch.distributed as dist

from chaosbench import instrument as cb

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--every", type=int, default=5, help="snapshot every N steps")
ap.add_argument("--ckpt-dir", default=os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"))
ap.add_argument("--step-time", type=float, default=0.2, help="seconds per step (room to inject a fault)")
ap.add_argument("--pg-timeout", type=float, default=5, help="seconds before a collective with a lost peer fails")
a = ap.parse_args()


save = cb.save          # torch.save + manifest (crc32) + checkpoint_saved, tier from where the path lives


def newest(ckpt_dir):
    steps = [int(m.group(1)) for p in glob.glob(os.path.join(ckpt_dir, "snapshot-*.pt"))
             if (m := re.search(r"snapshot-(\d+)\.pt$", p))]
    return max(steps, default=0)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
found = torch.tensor([newest(a.ckpt_dir), -newest(a.ckpt_dir)])
dist.all_reduce(found, op=dist.ReduceOp.MIN)          # [lowest, -highest] step held by any rank
start = int(found[0]) if int(found[0]) == -int(found[1]) else 0
if start:
    snap = cb.load(os.path.join(a.ckpt_dir, f"snapshot-{start}.pt"), step=start, weights_only=True)
    model.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
else:
    cb.fresh_start("no snapshot held by every rank")
ddp = torch.nn.parallel.DistributedDataParallel(model)
gen = torch.Generator().manual_seed(1 + dist.get_rank())
x = torch.randn(256, 16, generator=gen)
y = x.sum(dim=1, keepdim=True).sin()
saver = int(os.environ.get("LOCAL_RANK", 0)) == 0


def train(start):
    for step in range(start + 1, a.steps + 1):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        cb.step(step, loss=loss.item())
        if saver and step % a.every == 0:
            os.makedirs(a.ckpt_dir, exist_ok=True)
            save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                 os.path.join(a.ckpt_dir, f"snapshot-{step}.pt"), step=step)
            for old in glob.glob(os.path.join(a.ckpt_dir, "snapshot-*.pt")):
                if not old.endswith(f"snapshot-{step}.pt"):
                    os.remove(old)
        time.sleep(a.step_time)


with cb.run():          # phase training; fatal if it raises
    train(start)
    cb.done(a.steps)
dist.destroy_process_group()
