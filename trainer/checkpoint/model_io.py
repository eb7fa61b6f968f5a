"""Applying a restored state to a model and optimizer."""
from __future__ import annotations

import torch

from .errors import CheckpointLoadError


def load_checkpoint_to_model(state: dict, model: torch.nn.Module, optimizer=None, scheduler=None,
                             strict: bool = True) -> dict:
    """Load `state["model"]` (and `optimizer`/`scheduler` when given) into the objects.

    Works for a bare module and a DDP/FSDP-style wrapper (`module.` prefixes are matched either
    way). Returns {"step", "missing_keys", "unexpected_keys"}.
    """
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointLoadError("checkpoint state has no 'model' entry; expected a dict with "
                                  "'model' (and optionally 'optimizer', 'scheduler', 'step')")
    target = model.module if hasattr(model, "module") and isinstance(model.module, torch.nn.Module) else model
    weights = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state["model"].items()}
    try:
        result = target.load_state_dict(weights, strict=strict)
    except RuntimeError as e:
        raise CheckpointLoadError(f"model does not match the checkpoint (strict={strict}): {e}") from None
    if optimizer is not None:
        if "optimizer" not in state:
            raise CheckpointLoadError("an optimizer was given but the checkpoint has no 'optimizer' entry")
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        if "scheduler" not in state:
            raise CheckpointLoadError("a scheduler was given but the checkpoint has no 'scheduler' entry")
        scheduler.load_state_dict(state["scheduler"])
    return {"step": state.get("step"), "missing_keys": list(result.missing_keys),
            "unexpected_keys": list(result.unexpected_keys)}
