"""A user's DDP job that knows nothing of chaosbench, with the checkpoint habits the verdict tests need:
--save none (never checkpoints), rank0 (only global rank 0 keeps a snapshot, on its own node),
per-node (local rank 0 of every node keeps one: DDP replicas are identical). --pg-timeout: seconds
before a collective with a lost peer fails (gloo's default is 30 minutes: the job hangs)."""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--save", choices=["none", "rank0", "per-node"], default="per-node")
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--pg-timeout", type=float, default=10)
a = ap.parse_args()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ckpt = os.path.join(os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"), "snapshot.pt")
start = 0
if os.path.exists(ckpt):
    snap = torch.load(ckpt)
    model.module.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
    start = snap["step"]
x, y = torch.randn(64, 8, generator=torch.Generator().manual_seed(0)), torch.ones(64, 1)
saver = {"none": False, "rank0": dist.get_rank() == 0, "per-node": int(os.environ["LOCAL_RANK"]) == 0}[a.save]
for step in range(start + 1, a.steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if saver and step % a.every == 0:
        os.makedirs(os.path.dirname(ckpt), exist_ok=True)
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.1)
dist.destroy_process_group()
