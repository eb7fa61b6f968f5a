"""A Ray Train job as users write it: TorchTrainer's `train_loop_per_worker` on CPU (gloo), a tiny
model on synthetic data, a checkpoint reported to Ray every `every` steps and resumed from
`ray.train.get_checkpoint()` after a failure. It knows nothing of chaosbench; it prints `step N loss X`.

    python train_loop.py                      # on a local Ray (ray.init()), 2 workers, 40 steps

`train_loop_no_resume` is the same loop without the `get_checkpoint()` call: Ray restores nothing
unless the loop asks, so after a failure it trains again from step 1 (no_resume.yaml).
"""
import os
import tempfile
import time

import torch
import torch.nn.functional as F

import ray.train
from ray.train.torch import prepare_model


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def _train(config: dict, resume: bool) -> None:
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    checkpoint = ray.train.get_checkpoint() if resume else None
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"resumed at step {start}", flush=True)
    rank = ray.train.get_context().get_world_rank()
    for step in range(start + 1, config.get("steps", 40) + 1):
        x, y = _batch(step, rank)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(config.get("step_time", 0.1))
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % config.get("every", 5) == 0:
            with tempfile.TemporaryDirectory() as d:
                checkpoint = None
                if rank == 0:   # one copy: rank 0 writes, Ray persists it to the run's storage_path
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                               os.path.join(d, "state.pt"))
                    checkpoint = ray.train.Checkpoint.from_directory(d)
                ray.train.report({"step": step, "loss": loss.item()}, checkpoint=checkpoint)


def train_loop_per_worker(config: dict) -> None:
    _train(config, resume=True)


def train_loop_no_resume(config: dict) -> None:
    _train(config, resume=False)


if __name__ == "__main__":
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    TorchTrainer(train_loop_per_worker, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(storage_path=os.path.abspath("ray-results"))).fit()
