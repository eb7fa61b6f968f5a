import os
import shutil
import uuid

import pytest
import torch


class Events:
    """A stand-in for the trainer's event writer: records (event, fields)."""

    def __init__(self):
        self.lines = []

    def __call__(self, event, fields):
        self.lines.append((event, dict(fields)))

    def of(self, name):
        return [f for e, f in self.lines if e == name]


@pytest.fixture
def events():
    return Events()


@pytest.fixture
def shm_dir():
    """A real directory in node-local shared memory, removed afterwards."""
    path = f"/dev/shm/chaosbench-test-{uuid.uuid4().hex[:8]}"
    os.makedirs(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def toy_state(step, seed=0, n=1000):
    g = torch.Generator().manual_seed(seed + step)
    return {"step": step, "model": {"w": torch.randn(n, generator=g), "b": torch.zeros(3)},
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}}
