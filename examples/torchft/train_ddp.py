"""A DDP job written the way torchft's documentation teaches (its train_ddp.py): the Manager keeps this
replica group in the quorum, torchft's DistributedDataParallel averages gradients across the groups in the
quorum, its Optimizer wrapper steps only when the quorum agrees to commit. Nothing of chaosbench in it.

One replica group per node; each group is its own torchrun. The Lighthouse address and the group's id come
from the environment (TORCHFT_LIGHTHOUSE, REPLICA_GROUP_ID, NUM_REPLICA_GROUPS), as in torchft's README:

    torchft_lighthouse --min_replicas 1 --join_timeout_ms 10000 &
    REPLICA_GROUP_ID=0 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://localhost:29510 \\
        torchrun --standalone --nproc-per-node=1 train_ddp.py --steps 100

A group that (re)joins a running quorum heals from a live peer: the Manager fetches the peer's state_dict
over HTTP and calls load_state_dict. There are no checkpoints.
"""
import argparse
import logging
import os
import time
from datetime import timedelta

import torch
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--step-time", type=float, default=0.1, help="seconds per step (room to inject a fault)")
ap.add_argument("--timeout", type=float, default=10, help="seconds before a collective with a lost peer fails")
a = ap.parse_args()

logging.basicConfig(level=logging.INFO)   # torchft logs its quorums and heals at INFO
REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))

torch.manual_seed(0)   # every group starts from the same weights
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(m.parameters(), lr=0.05)


def state_dict():
    return {"model": m.state_dict(), "optim": opt.state_dict()}


def load_state_dict(sd):
    m.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optim"])


manager = Manager(
    pg=ProcessGroupGloo(timeout=timedelta(seconds=a.timeout)),
    min_replica_size=1,
    load_state_dict=load_state_dict,
    state_dict=state_dict,
    replica_id=f"train_ddp_{REPLICA_GROUP_ID}",
    timeout=timedelta(seconds=a.timeout),
)
model = DistributedDataParallel(manager, m)
optimizer = Optimizer(manager, opt)
gen = torch.Generator().manual_seed(1 + REPLICA_GROUP_ID)   # each group its own data

while manager.current_step() < a.steps:
    x = torch.randn(64, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True).sin()
    optimizer.zero_grad()   # starts this step's quorum (async, during the forward pass)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()        # steps only if every group in the quorum committed
    print(f"step {manager.current_step()} loss {loss.item():.4f} replicas {manager.num_participants()}",
          flush=True)
    time.sleep(a.step_time)
