"""A DDP job written the way DLRover's flash-checkpoint guide teaches (CPU, gloo, tiny model, synthetic data):
launched by `dlrover-run`, it saves its state to shared memory every step (`StorageType.MEMORY`, the agent
keeps it across a worker restart) and to disk every --every steps (`StorageType.DISK`, the agent's saver
writes it asynchronously), and resumes from the newest of the two.

    dlrover-run --nnodes=1 --nproc-per-node=2 train.py --steps 40   # with DLROVER_MASTER_ADDR, or --standalone

It knows nothing of chaosbench: progress is read from its "step N loss X" lines.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--every", type=int, default=5, help="disk checkpoint every N steps")
ap.add_argument("--ckpt-dir", default=os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"))
ap.add_argument("--step-time", type=float, default=0.1, help="seconds per step (room to inject a fault)")
ap.add_argument("--pg-timeout", type=float, default=5, help="seconds before a collective with a lost peer fails")
a = ap.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
checkpointer = DdpCheckpointer(a.ckpt_dir)
state = checkpointer.load_checkpoint()                  # shared memory first, else the newest on disk
start = int(state.get("step", 0)) if state else 0
if start:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
ddp = torch.nn.parallel.DistributedDataParallel(model)
gen = torch.Generator().manual_seed(1 + dist.get_rank())
x = torch.randn(256, 16, generator=gen)
y = x.sum(dim=1, keepdim=True).sin()

for step in range(start + 1, a.steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
    kind = StorageType.DISK if step % a.every == 0 else StorageType.MEMORY
    checkpointer.save_checkpoint(step, state, os.path.join(a.ckpt_dir, f"checkpoint-{step}.pt"), storage_type=kind)
    time.sleep(a.step_time)

dist.destroy_process_group()
