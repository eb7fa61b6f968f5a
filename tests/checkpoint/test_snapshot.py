"""Snapshots copy the state at call time; pooled buffers are reused only after encoding."""
import io
from collections import OrderedDict

import torch

from trainer.checkpoint.snapshot import BufferPool, Snapshot


def test_snapshot_is_isolated_from_later_updates_and_reuses_buffers():
    w = torch.arange(6.0)
    state = lambda: {"step": 1, "model": OrderedDict(w=w), "meta": {"lr": [0.1]}}  # noqa: E731
    pool = BufferPool(1 << 20)
    first = Snapshot.take(1, state, pool)
    w += 100  # the training loop moves on
    data, _ = first.encoded()
    restored = torch.load(io.BytesIO(data), weights_only=True)
    assert torch.equal(restored["model"]["w"], torch.arange(6.0))
    assert isinstance(restored["model"], OrderedDict) and restored["meta"] == {"lr": [0.1]}

    second = Snapshot.take(2, state, pool)
    assert pool._bytes == 0  # the buffer handed back by the first snapshot was taken again
    assert torch.equal(second.state["model"]["w"], torch.arange(6.0) + 100)
    # the first snapshot's bytes did not change when its buffer was reused
    assert torch.equal(torch.load(io.BytesIO(first.encoded()[0]), weights_only=True)["model"]["w"],
                       torch.arange(6.0))


def test_pool_respects_its_budget():
    pool = BufferPool(100)
    pool.put([torch.empty(20), torch.empty(20)])  # 80 bytes each: only the first fits
    assert pool._bytes == 80
