"""The scenario library: every file loads with the engine's loader and asserts what the design's
tier table asks of its failure story (restore tier, lost-work and time bounds, restarts)."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaosbench.scenario import load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios"

# story -> the fault types it must inject and the restore tier it must assert (None: no restore,
# the story asserts `no_restart` instead)
STORIES = {
    "node_loss": ({"kill_node"}, "memory"),
    "node_loss_c10d": ({"kill_node"}, "memory"),
    "worker_crash": ({"kill_worker"}, "memory"),
    "total_failure_restart": ({"kill_all"}, "nvme"),
    "total_failure_new_machines": ({"kill_all"}, "s3"),
    "disk_full": ({"fill_nvme", "kill_node"}, "memory"),
    "checkpoint_corruption": ({"corrupt_checkpoint", "kill_all"}, "nvme"),
    "s3_outage": ({"s3_outage"}, None),
    "etcd_outage": ({"link_down"}, None),
    "network_partition": ({"partition"}, "memory"),
    "node_join": ({"add_node"}, "memory"),
    "flapping_node": ({"kill_node"}, "memory"),
    "slow_storage": ({"link_toxic"}, None),
    "stale_rendezvous": ({"kill_all"}, "nvme"),
    "hung_rank": ({"freeze_worker"}, "memory"),
    "straggler": ({"throttle_node"}, None),
    "preemption": ({"preempt_node", "add_node"}, "memory"),
    "oom_worker": ({"memory_pressure"}, "memory"),
    "worker_error": ({"worker_error"}, "memory"),
    "gil_hang": ({"gil_hang"}, "memory"),
    "lossy_network": ({"packet_fault"}, None),
    "jittery_network": ({"packet_fault"}, None),
    "corrupt_burst": ({"packet_fault"}, None),
    "silent_corruption": ({"corrupt_replica"}, "memory"),
    "rendezvous_name_failure": ({"dns_fault", "kill_worker"}, "memory"),
    "clock_jump": ({"clock_skew"}, None),
    "skewed_checkpoint_stamps": ({"clock_skew", "kill_all"}, "nvme"),
    "nvme_eio": ({"disk_fault"}, None),
    "bitflip_on_read": ({"disk_fault", "kill_all"}, "nvme"),
    "lost_unsynced_writes": ({"disk_fault", "kill_all"}, "nvme"),
    "ray_node_loss": ({"kill_node"}, "memory"),   # a Ray Train job (backend ray, docs/ray.md)
    "ray_hung_worker": ({"freeze_worker"}, "memory"),
    "ray_worker_crash": ({"kill_worker"}, "memory"),
}


def _files() -> list[Path]:
    return sorted(LIBRARY.glob("*.yaml"))


def _override(s, key: str, default):
    return s.trainer.overrides.get(key, default)


@pytest.fixture(scope="module")
def library():
    return {p.stem: load_scenario(p) for p in _files()}


def test_every_story_has_exactly_one_file():
    assert sorted(p.stem for p in _files()) == sorted(STORIES)


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.stem)
def test_file_loads_and_names_itself_after_the_file(path):
    s = load_scenario(path)   # full validation: fault parameters, trainer config and overrides
    assert s.name == path.stem
    assert s.description, "one line for `chaosbench list`"
    assert s.faults, "a library scenario injects at least one fault"
    # every story proves training went on: to a step within a budget, or N steps after it settled
    assert (s.expect.reaches_step and s.expect.within_seconds) or s.expect.trains_after_settle
    assert (s.expect.reaches_step or 0) <= _override(s, "training.max_steps", 200)
    assert not s.expect.optional, "library checks must all be evaluated"


@pytest.mark.parametrize("name", sorted(STORIES))
def test_story_injects_its_fault_and_asserts_its_tier(library, name):
    s = library[name]
    kinds, tier = STORIES[name]
    assert {f.kind for f in s.faults} == kinds
    assert s.expect.recovered_from == tier
    if tier is None:
        assert s.expect.no_restart is True, "an outage that needs no restart must assert none happened"
    else:
        assert s.expect.max_recovery_seconds is not None, "a restart story bounds its recovery time"


@pytest.mark.parametrize("name", [n for n, (_, t) in STORIES.items() if t == "memory"])
def test_memory_recoveries_lose_at_most_one_snapshot_interval(library, name):
    s = library[name]
    assert s.expect.max_lost_steps is not None
    assert s.expect.max_lost_steps <= _override(s, "checkpoint.memory_snapshot_interval", 5)


def test_disk_loss_tiers_bound_lost_work_by_their_interval(library):
    nvme = library["total_failure_restart"]
    assert nvme.expect.max_lost_steps <= _override(nvme, "checkpoint.checkpoint_interval", 20)
    s3 = library["total_failure_new_machines"]
    assert s3.expect.max_lost_steps <= _override(s3, "checkpoint.s3.interval", 50)
    assert {f.params.get("wipe") for f in s3.faults} == {"all"}, "new machines: no NVMe, no shared memory"
    assert {f.params.get("wipe") for f in nvme.faults} == {"shm"}, "disks kept, memory gone"


def test_node_loss_stories_shrink_and_join_stories_grow(library):
    for name in ("node_loss", "disk_full", "network_partition"):
        s = library[name]
        assert s.expect.world_size_after == s.cluster.nodes - 1
    join = library["node_join"]
    assert join.expect.world_sizes == [join.cluster.nodes, join.cluster.nodes + 1]
    assert join.cluster.elastic.max_nodes > join.cluster.nodes


def test_disk_full_restarts_only_for_the_node_loss(library):
    s = library["disk_full"]
    assert s.expect.world_sizes == [3, 2], "the full disk itself must not change the world"
    fill, loss = s.faults
    assert fill.at.step < loss.at.step
    (reported,) = s.expect.log_regex
    assert reported.expect == "present" and reported.node == fill.params["node"] and "NVME" in reported.pattern


def test_checkpoint_corruption_hits_every_node_then_restarts_without_memory(library):
    s = library["checkpoint_corruption"]
    corrupted = {f.params["node"] for f in s.faults if f.kind == "corrupt_checkpoint"}
    assert corrupted == set(s.node_names())
    restart = next(f for f in s.faults if f.kind == "kill_all")
    assert restart.params.get("wipe") == "shm"
    newest = {f.at.where["step"] for f in s.faults if f.kind == "corrupt_checkpoint"}
    assert len(newest) == 1 and restart.at.step > newest.pop()
    interval = _override(s, "checkpoint.checkpoint_interval", 20)
    assert s.expect.resumed_at_step == newest_valid(s, interval)


def newest_valid(s, interval: int) -> int:
    corrupt_step = next(f.at.where["step"] for f in s.faults if f.kind == "corrupt_checkpoint")
    return corrupt_step - interval


def test_partition_is_silent_and_detected_within_a_bound(library):
    s = library["network_partition"]
    assert s.faults[0].kind == "partition"       # DROP, not the loud disconnect
    assert s.expect.max_recovery_seconds <= 60   # gloo's default would wait 30 minutes
    assert _override(s, "elastic.health_check_timeout_s", 5.0) <= 10


def test_flapping_node_stays_within_max_restarts(library):
    s = library["flapping_node"]
    (f,) = s.faults
    assert f.duration_s, "the node comes back after each loss"
    assert f.repeat and f.repeat.times >= 2
    # each flap costs two restarts (the loss and the rejoin)
    assert 2 * f.repeat.times < s.cluster.elastic.max_restarts
    n = s.cluster.nodes
    assert s.expect.world_sizes == [n, n - 1] * f.repeat.times + [n], "every rejoin admitted, ends at full size"


@pytest.mark.parametrize("name", ["etcd_outage", "stale_rendezvous"])
def test_etcd_stories_use_the_etcd_backend(library, name):
    assert library[name].cluster.rendezvous == "etcd-v3"


def test_outages_heal(library):
    for name in ("s3_outage", "etcd_outage", "slow_storage"):
        assert all(f.duration_s for f in library[name].faults), name
