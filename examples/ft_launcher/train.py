"""A DDP job written the way NVIDIA resiliency-ext's fault-tolerance guide teaches (CPU, gloo, tiny model,
synthetic data): launched by `ft_launcher`, each rank connects a `RankMonitorClient` to its rank monitor
and sends one heartbeat per iteration; a rank that stops (hung, frozen) is timed out by its monitor and the
launcher restarts the worker group. The client's state (timeouts it learnt) is saved with the checkpoint.

    ft_launcher --nnodes=1 --nproc-per-node=2 --ft-rank-heartbeat-timeout=5 train.py --steps 40

It knows nothing of chaosbench: progress is read from its "step N loss X" lines.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
ap.add_argument("--ckpt-dir", default=os.environ.get("CHAOSBENCH_CHECKPOINT_DIR", "ckpt"))
ap.add_argument("--step-time", type=float, default=0.1, help="seconds per step (room to inject a fault)")
ap.add_argument("--pg-timeout", type=float, default=5, help="seconds before a collective with a lost peer fails")
a = ap.parse_args()

ft_client = RankMonitorClient()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
path = os.path.join(a.ckpt_dir, "checkpoint.pt")
have = torch.tensor([torch.load(path, weights_only=True)["step"] if os.path.exists(path) else 0])
lo, hi = have.clone(), have.clone()
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
start = int(lo) if int(lo) == int(hi) else 0             # every rank resumes from the same step, or none does
if start:
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    ft_client.load_state_dict(ckpt["ft_state"])          # before init: the timeouts it had learnt
ft_client.init_workload_monitoring()
ddp = torch.nn.parallel.DistributedDataParallel(model)
gen = torch.Generator().manual_seed(1 + dist.get_rank())
x = torch.randn(256, 16, generator=gen)
y = x.sum(dim=1, keepdim=True).sin()

for step in range(start + 1, a.steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    ft_client.send_heartbeat()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if int(os.environ.get("LOCAL_RANK", 0)) == 0 and step % a.every == 0:   # every node keeps its own copy
        os.makedirs(a.ckpt_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "ft_state": ft_client.state_dict()}, path + ".tmp")
        os.replace(path + ".tmp", path)
    time.sleep(a.step_time)

ft_client.shutdown_workload_monitoring()
dist.destroy_process_group()
