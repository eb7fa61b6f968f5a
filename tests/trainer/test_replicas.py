"""trainer/replicas.py: when digests are compared, and what a mismatch does (fake collective)."""
from __future__ import annotations

import pytest

from trainer import replicas
from trainer.checkpoint.config import CheckpointConfig
from trainer.errors import ReplicaDivergenceError


def test_digests_are_due_at_every_save_step_of_any_tier_and_never_when_off():
    cfg = CheckpointConfig.from_dict({"memory_snapshot_interval": 5, "checkpoint_interval": 20})
    assert [s for s in range(1, 41) if replicas.digest_due(cfg, s)] == [5, 10, 15, 20, 25, 30, 35, 40]
    cfg = CheckpointConfig.from_dict({"memory_snapshot_interval": 0, "checkpoint_interval": 7})
    assert [s for s in range(1, 22) if replicas.digest_due(cfg, s)] == [7, 14, 21]
    off = CheckpointConfig.from_dict({"memory_snapshot_interval": 5, "replica_digests": False})
    assert not any(replicas.digest_due(off, s) for s in range(1, 100))


def _world(monkeypatch, digests):
    monkeypatch.setattr(replicas.agreement, "gather", lambda mine: list(digests))


def test_agreeing_digests_pass_silently(monkeypatch):
    _world(monkeypatch, ["aa", "aa", "aa"])
    seen = []
    replicas.verify(10, "aa", lambda e, f: seen.append(e))
    assert seen == []


def test_a_minority_replica_is_named_and_the_job_stops_before_saving(monkeypatch):
    _world(monkeypatch, ["aa", "bb", "aa"])
    seen = []
    with pytest.raises(ReplicaDivergenceError, match=r"diverged at step 45: rank\(s\) 1 "):
        replicas.verify(45, "aa", lambda e, f: seen.append((e, f)))
    (event, fields), = seen
    assert event == "replica_divergence" and fields["ranks"] == [1] and fields["digests"]["1"] == "bb"


def test_two_ranks_that_differ_are_both_named(monkeypatch):
    _world(monkeypatch, ["aa", "bb"])
    with pytest.raises(ReplicaDivergenceError, match=r"rank\(s\) 0, 1 "):
        replicas.verify(5, "aa", lambda e, f: None)
