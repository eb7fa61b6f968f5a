import pytest

from trainer.data.sampler import StatefulSampler, rank_slice
from trainer.scaling import micro_batches, plan_batches


def consume(sampler, steps, world_size, per_worker=3):
    """What each rank reads for `steps` optimizer steps under variable_batch."""
    seen = []
    for _ in range(steps):
        ids = sampler.next_global_batch(per_worker * world_size)
        parts = [rank_slice(ids, r, world_size) for r in range(world_size)]
        assert sum(parts, []) == ids
        seen += sum(parts, [])
    return seen


def test_one_epoch_is_a_permutation_without_repeats():
    s = StatefulSampler(60, seed=7)
    seen = consume(s, 10, world_size=2)  # 60 samples = exactly one epoch
    assert sorted(seen) == list(range(60))
    assert s.epoch == 1


def test_resume_with_world_size_changes_matches_uninterrupted_run():
    straight = consume(StatefulSampler(100, seed=3), 1, 1, per_worker=90)

    s = StatefulSampler(100, seed=3)
    got = consume(s, 4, world_size=3)                     # 36 samples at world size 3
    state = s.state_dict()
    s2 = StatefulSampler(100, seed=3)                     # "restart" at world size 1
    s2.load_state_dict(state)
    got += consume(s2, 6, world_size=1)                   # 18 more
    s3 = StatefulSampler(100, seed=3)                     # and again at world size 2
    s3.load_state_dict(s2.state_dict())
    got += consume(s3, 6, world_size=2)                   # 36 more -> 90
    assert got == straight
    assert len(set(got)) == len(got) == 90                # nothing repeated, nothing skipped


def test_batches_cross_epoch_boundary_without_loss():
    s = StatefulSampler(10, seed=1)
    first = s.next_global_batch(8)
    second = s.next_global_batch(8)                       # 2 from epoch 0, 6 from epoch 1
    assert sorted(first + second[:2]) == list(range(10))
    assert second[2:] == StatefulSampler(10, seed=1).peek(6, start=10)
    assert s.samples_seen == 16 and s.epoch == 1


def test_epochs_are_reshuffled_and_seeded():
    a, b = StatefulSampler(50, 1), StatefulSampler(50, 2)
    assert a.peek(50) != a.peek(50, start=50)
    assert a.peek(50) != b.peek(50)
    assert a.peek(50) == StatefulSampler(50, 1).peek(50)


def test_state_from_other_data_is_refused():
    s = StatefulSampler(10, seed=1)
    with pytest.raises(ValueError, match="data or seed changed"):
        s.load_state_dict({"samples_seen": 3, "seed": 1, "num_samples": 11})


@pytest.mark.parametrize("n, world", [(10, 3), (2, 4), (8, 2)])
def test_rank_slices_partition_the_batch(n, world):
    ids = list(range(n))
    parts = [rank_slice(ids, r, world) for r in range(world)]
    assert sum(parts, []) == ids
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_variable_batch_follows_world_size():
    assert plan_batches("variable_batch", 8, 1).global_batch == 8
    p = plan_batches("variable_batch", 8, 3)
    assert (p.global_batch, p.accum_steps) == (24, 1)


@pytest.mark.parametrize("world, accum", [(1, 4), (2, 2), (3, 2), (4, 1), (5, 1)])
def test_constant_batch_recomputes_accumulation(world, accum):
    p = plan_batches("constant_batch", 8, world, target_global_batch_size=32)
    assert (p.global_batch, p.accum_steps) == (32, accum)
    for r in range(world):
        mine = rank_slice(list(range(32)), r, world)
        micros = micro_batches(mine, p.accum_steps)
        assert sum(micros, []) == mine and len(micros) == accum
        assert all(len(m) <= 8 for m in micros) and micros[-1]  # the syncing micro-batch is never empty


def test_constant_batch_smaller_than_world_is_an_error():
    with pytest.raises(ValueError, match="smaller than the world size"):
        plan_batches("constant_batch", 8, 4, target_global_batch_size=3)
