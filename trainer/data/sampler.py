"""A stateful, world-size-independent sampler.

The order of samples is a seeded permutation per epoch; a single global cursor counts samples
consumed. Every optimizer step takes the next `global_batch` samples in that order and splits them
among ranks. Because the order does not depend on the world size, restoring the cursor resumes at
the exact next sample after a restart with the same or a different world size: no sample is
skipped and none is repeated within an epoch.
"""
from __future__ import annotations

import torch


class StatefulSampler:
    def __init__(self, num_samples: int, seed: int):
        if num_samples <= 0:
            raise ValueError("the dataset has no samples (index too small for training.seq_len)")
        self.num_samples = num_samples
        self.seed = seed
        self.samples_seen = 0          # global cursor across epochs
        self._perm_epoch = -1
        self._perm: list[int] = []

    @property
    def epoch(self) -> int:
        return self.samples_seen // self.num_samples

    def _permutation(self, epoch: int) -> list[int]:
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = torch.randperm(self.num_samples, generator=g).tolist()
            self._perm_epoch = epoch
        return self._perm

    def peek(self, count: int, start: int | None = None) -> list[int]:
        """The `count` sample ids from global position `start` (default: the cursor), crossing epochs."""
        pos = self.samples_seen if start is None else start
        out = []
        while len(out) < count:
            epoch, offset = divmod(pos, self.num_samples)
            take = min(count - len(out), self.num_samples - offset)
            out += self._permutation(epoch)[offset:offset + take]
            pos += take
        return out

    def next_global_batch(self, global_batch: int) -> list[int]:
        ids = self.peek(global_batch)
        self.samples_seen += global_batch
        return ids

    def state_dict(self) -> dict:
        return {"samples_seen": self.samples_seen, "seed": self.seed, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict) -> None:
        if state["num_samples"] != self.num_samples or state["seed"] != self.seed:
            raise ValueError(f"sampler state is for {state['num_samples']} samples / seed {state['seed']}, "
                             f"this run has {self.num_samples} / {self.seed}: data or seed changed")
        self.samples_seen = int(state["samples_seen"])


def rank_slice(ids: list[int], rank: int, world_size: int) -> list[int]:
    """Contiguous, near-equal split of a global batch (sizes differ by at most one)."""
    base, extra = divmod(len(ids), world_size)
    start = rank * base + min(rank, extra)
    return ids[start:start + base + (1 if rank < extra else 0)]
