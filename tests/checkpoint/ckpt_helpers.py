"""Shared helpers for the checkpoint tests."""
import torch


def toy_state(step, seed=0, n=1000):
    g = torch.Generator().manual_seed(seed + step)
    return {"step": step, "model": {"w": torch.randn(n, generator=g), "b": torch.zeros(3)},
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}}
