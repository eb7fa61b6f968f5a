"""Checkpoint size from the trainer's model section (the reference decoder-only transformer: learned
positions, untied output head unless `tie_embeddings: true`)."""
from __future__ import annotations

BYTES_PER_PARAM = 4 * 3   # fp32 weights + Adam's two moments


def param_count(model: dict) -> int:
    d, layers = int(model["d_model"]), int(model["n_layers"])
    vocab, seq = int(model["vocab_size"]), int(model["max_seq_len"])
    ff = int(model.get("d_ff") or 4 * d)
    per_layer = 4 * d * d + 4 * d          # attention q,k,v,o with biases
    per_layer += 2 * d * ff + ff + d        # MLP up/down with biases
    per_layer += 4 * d                      # two layer norms
    head = 0 if model.get("tie_embeddings") else vocab * d
    return vocab * d + seq * d + layers * per_layer + 2 * d + head


def checkpoint_bytes(model: dict) -> int:
    """Weights + Adam state, the bulk of every snapshot; raises KeyError naming a missing field."""
    return param_count(model) * BYTES_PER_PARAM
