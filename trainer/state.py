"""The checkpointed training state: only tensors and plain Python values, so that
`torch.load(weights_only=True)` can read it (no pickled classes, no numpy)."""
from __future__ import annotations

import random

import torch


def capture_rng() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(_py_state_to_plain(random.getstate()))}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _py_state_to_plain(st):
    version, internal, gauss = st
    return version, list(internal), gauss


def build_state(step: int, model, optimizer, scheduler, sampler, world_size: int) -> dict:
    return {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "rng": capture_rng(),
        "world_size": world_size,
        "samples_seen": sampler.samples_seen,
    }


def load_state(state: dict, model, optimizer, scheduler, sampler) -> int:
    """Apply a restored state in place; returns the step to continue from."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    restore_rng(state["rng"])
    return int(state["step"])
