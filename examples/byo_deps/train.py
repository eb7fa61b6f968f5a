"""A plain torchrun DDP job that reads its settings with OmegaConf (a config library the node image
does not have): `config.yaml` merged with `key=value` overrides from the command line, as many public
training scripts do. CPU, gloo, a tiny model on synthetic data; local rank 0 of every node keeps a
snapshot of the newest step in $CHAOSBENCH_CHECKPOINT_DIR (else ./ckpt) and every rank resumes from
the newest step all ranks hold.

    pip install -r requirements.txt && torchrun --standalone --nproc-per-node=2 train.py steps=20
"""
import datetime
import glob
import os
import re
import sys
import time

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

here = os.path.dirname(os.path.abspath(__file__))
cfg = OmegaConf.merge(OmegaConf.load(os.path.join(here, "config.yaml")), OmegaConf.from_cli(sys.argv[1:]))
ckpt_dir = cfg.ckpt_dir or os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt")


def newest():
    steps = [int(m.group(1)) for p in glob.glob(os.path.join(ckpt_dir, "snapshot-*.pt"))
             if (m := re.search(r"snapshot-(\d+)\.pt$", p))]
    return max(steps, default=0)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=cfg.pg_timeout))
torch.manual_seed(cfg.seed)
model = torch.nn.Sequential(torch.nn.Linear(16, cfg.model.hidden), torch.nn.Tanh(), torch.nn.Linear(cfg.model.hidden, 1))
opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr)
found = torch.tensor([newest(), -newest()])
dist.all_reduce(found, op=dist.ReduceOp.MIN)          # [lowest, -highest] step held by any rank
start = int(found[0]) if int(found[0]) == -int(found[1]) else 0
if start:
    snap = torch.load(os.path.join(ckpt_dir, f"snapshot-{start}.pt"), weights_only=True)
    model.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
ddp = torch.nn.parallel.DistributedDataParallel(model)
gen = torch.Generator().manual_seed(cfg.seed + 1 + dist.get_rank())
x = torch.randn(256, 16, generator=gen)
y = x.sum(dim=1, keepdim=True).sin()
saver = int(os.environ.get("LOCAL_RANK", 0)) == 0
for step in range(start + 1, cfg.steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if saver and step % cfg.every == 0:
        os.makedirs(ckpt_dir, exist_ok=True)
        path = os.path.join(ckpt_dir, f"snapshot-{step}.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
        os.replace(path + ".tmp", path)
        for old in glob.glob(os.path.join(ckpt_dir, "snapshot-*.pt")):
            if old != path:
                os.remove(old)
    time.sleep(cfg.step_time)
dist.destroy_process_group()
