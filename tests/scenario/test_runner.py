"""The runner against a fake cluster: schedule driven by observed steps, files written, exit codes,
teardown always. (Real clusters are exercised by the chaos tests in tests/scenario/test_e2e.py.)"""
import json
import time

import pytest

from chaosbench.checks.invariants import NAMES as INVARIANTS
from chaosbench.runner import RunOptions, Runner
from chaosbench.scenario import parse_scenario

from .fake_cluster import FakeCluster

BASE = {"name": "fake_loss", "trainer": {"config": None, "command": ["train"]},
        "cluster": {"nodes": 3, "elastic": {"min_nodes": 2, "max_nodes": 3}},
        "faults": [{"at": {"step": 20}, "kill_node": {"node": "node-2"}}],
        "expect": {"recovered_from": "memory", "max_lost_steps": 5, "world_size_after": 2,
                   "max_recovery_seconds": 10, "reaches_step": 60},
        "run": {"timeout_s": 30, "stuck_after_s": 3}}


def run(tmp_path, data=None, cls=FakeCluster, **fake):
    s = parse_scenario(data or BASE, "fake.yaml")
    made = []

    def factory(backend, spec):
        made.append(cls(spec, **fake))
        return made[0]

    out = Runner(s, None, RunOptions(backend="fake", report_dir=tmp_path, cluster_factory=factory,
                                     poll_s=0.02)).run()
    return out, made[0]


def test_passing_run_writes_the_record(tmp_path):
    out, cluster = run(tmp_path)
    r = out.result
    assert out.exit_code == 0, [c for c in r.checks if c.blocking]
    always = {"record_integrity"} | {f"invariant:{n}" for n in INVARIANTS}   # every run is held to these
    assert r.verdict == "passed" and {c.name for c in r.checks} == always | {
        "recovered_from", "max_lost_steps", "world_size_after", "max_recovery_seconds", "reaches_step", "fault:f1", "ending"}
    assert cluster.calls[:2] == ["up", "start_training"] and cluster.calls[-2:] == ["collect", "down"]
    assert "kill_node node-2" in cluster.calls
    (f,) = r.faults
    assert f.type == "kill_node" and f.target == "node-2" and f.trigger == "at step 20" and f.injected_at
    assert f.verdict == "passed" and "caused a worker restart" in f.reason
    (rec,) = r.recoveries
    assert rec.tier == "memory" and rec.world_size_before == 3 and rec.world_size_after == 2
    d = out.run_dir
    for name in ("result.json", "scenario.yaml", "faults.jsonl", "junit.xml", "harness.json", "exits.json"):
        assert (d / name).is_file(), name
    assert json.loads((d / "result.json").read_text())["verdict"] == "passed"
    assert "kill_node:" in (d / "scenario.yaml").read_text()
    assert json.loads((d / "faults.jsonl").read_text().splitlines()[0])["action"] == "inject"
    at_fault = json.loads((d / "inventories" / "f1.json").read_text())   # taken right after the kill
    assert at_fault["fault_id"] == "f1" and {u["tier"] for u in at_fault["unseen"]} == {"nvme", "memory", "s3"}


def test_wrong_tier_fails_with_exit_1_and_reason(tmp_path):
    data = {**BASE, "expect": {**BASE["expect"], "recovered_from": "s3"}}
    out, _ = run(tmp_path, data)
    assert out.exit_code == 1 and out.result.verdict == "failed"
    bad = [c for c in out.result.checks if c.blocking]
    assert [c.name for c in bad] == ["recovered_from"]
    assert "expected s3" in bad[0].reason and "from memory" in bad[0].reason
    junit = (out.run_dir / "junit.xml").read_text()
    assert 'failures="1"' in junit or "expected s3" in junit


def test_run_goes_on_until_the_last_heal(tmp_path):
    """reaches_step comes first; the pause still in place must heal (and settle) before the run stops."""
    data = {**BASE, "faults": [{"at": {"step": 20}, "pause_node": {"node": "node-1"}, "duration_s": 1.5}],
            "expect": {"reaches_step": 25}, "run": {"timeout_s": 30, "stuck_after_s": 10, "settle_s": 0.3}}
    out, cluster = run(tmp_path, data)
    (f,) = out.result.faults
    harness = json.loads((out.run_dir / "harness.json").read_text())
    assert f.healed_at - f.injected_at >= 1.5 and harness["stopped_at"] >= f.healed_at + 0.3
    assert out.exit_code == 0 and f.verdict == "passed"


def test_fault_that_never_fired_fails_the_run(tmp_path):
    data = {**BASE, "faults": [{"at": {"event": "checkpoint_saved", "where": {"tier": "s3"}}, "kill_node": {"node": "node-2"}}],
            "expect": {"reaches_step": 25, "no_restart": True}, "run": {"timeout_s": 2, "stuck_after_s": 10}}
    out, _ = run(tmp_path, data)
    by = {c.name: c for c in out.result.checks}
    assert by["reaches_step"].status == "passed" and by["no_restart"].status == "passed"
    assert by["fault:f1"].status == "failed" and "never injected" in by["fault:f1"].reason
    assert out.exit_code == 1 and out.result.faults[0].verdict == "failed"


def test_stuck_trainer_fails_reaches_step_not_harness(tmp_path):
    out, cluster = run(tmp_path, hang_after_kill=True)
    assert out.exit_code == 1
    reach = next(c for c in out.result.checks if c.name == "reaches_step")
    assert reach.status == "failed" and "stuck: no new step for 3 s" in reach.reason
    assert cluster.calls[-1] == "down"


def test_cluster_that_breaks_is_exit_3_and_torn_down(tmp_path):
    out, cluster = run(tmp_path, fail_up=True)
    assert out.exit_code == 3 and out.result.verdict == "error"
    assert "etcd did not become healthy" in out.result.error
    assert cluster.calls[-1] == "down" and (out.run_dir / "result.json").is_file()


def test_unsupported_fault_is_refused_before_anything_starts(tmp_path):
    data = {**BASE, "faults": [{"at": {"step": 5}, "partition": {"node": "node-1"}}]}
    out, cluster = run(tmp_path, data)
    assert out.exit_code == 3 and "cannot inject: f1 (partition) needs heal_network, partition" in out.result.error
    assert "backends that have them: docker, slurm" in out.result.error   # where the scenario can run instead
    assert "up" not in cluster.calls


def test_a_refusal_says_why_the_backend_lacks_the_primitive():
    from types import SimpleNamespace

    from chaosbench.faults.capabilities import missing_primitives
    f = SimpleNamespace(id="f1", kind="memory_pressure", params={"node": "node-1", "fraction": 0.9})
    (line,) = missing_primitives([f], frozenset(), {"squeeze_memory": "no cgroup"},
                                 {"docker": frozenset({"squeeze_memory", "release_memory"}), "local": frozenset()})
    assert line == ("f1 (memory_pressure) needs release_memory, squeeze_memory (no cgroup); "
                    "backends that have them: docker")


def test_timed_fault_is_healed_and_logged(tmp_path):
    data = {**BASE, "faults": [{"at": {"step": 10}, "pause_node": {"node": "node-1"}, "duration_s": 0.2}],
            "expect": {"reaches_step": 40, "world_sizes": [3]}}
    out, cluster = run(tmp_path, data)
    assert out.exit_code == 0
    assert cluster.calls.index("pause_node node-1") < cluster.calls.index("unpause_node node-1")
    actions = [json.loads(line)["action"] for line in (out.run_dir / "faults.jsonl").read_text().splitlines()]
    assert actions == ["inject", "heal"]
    f = out.result.faults[0]
    # never early; late by the runner's poll and a loaded machine's scheduling (0.645 s seen under -n 2)
    assert 0.19 <= f.healed_at - f.injected_at < 5.0


def test_recorded_scenario_reloads_identically(tmp_path):
    from chaosbench.scenario import load_scenario
    data = {**BASE, "faults": BASE["faults"] + [
        {"at": {"event": "checkpoint_saved", "where": {"tier": "nvme"}}, "pause_node": {"node": "random"},
         "duration_s": 2, "repeat": {"times": 2, "every_s": 5}}]}
    s = parse_scenario(data, "x.yaml")
    p = tmp_path / "scenario.yaml"
    p.write_text(s.as_run_yaml("local", 42))
    again = load_scenario(p)
    assert again.seed == 42 and again.cluster.backend == "local"
    assert again.model_dump(exclude={"seed", "cluster"}) == s.model_dump(exclude={"seed", "cluster"})
    assert again.cluster.model_dump(exclude={"backend"}) == s.cluster.model_dump(exclude={"backend"})


def test_every_node_exiting_stops_the_run_at_once(tmp_path):
    class Crashing(FakeCluster):
        def start_training(self):
            self.calls.append("start_training")
            for n in self.alive:
                self.alive[n] = False

    s = parse_scenario({**BASE, "run": {"timeout_s": 60, "stuck_after_s": 50}}, "fake.yaml")
    made = []
    out = Runner(s, None, RunOptions(report_dir=tmp_path, poll_s=0.02,
                                     cluster_factory=lambda b, spec: made.append(Crashing(spec)) or made[0])).run()
    assert out.exit_code == 1 and out.result.duration_s < 10
    reach = next(c for c in out.result.checks if c.name == "recovered_from")
    assert reach.status == "not_evaluated" and "no events" in reach.reason
    stop = json.loads((out.run_dir / "harness.json").read_text())["stop_reason"]
    assert stop.startswith("every node exited before step 60") and "node-0 exited:-9" in stop


def test_slurm_allocation_settings_come_from_the_scenario_and_the_cli_overrides(tmp_path):
    data = {**BASE, "cluster": {**BASE["cluster"], "slurm": {"partition": "debug", "time": "0:20:00",
                                                             "sbatch_options": ["--qos=low"]}}}
    s = parse_scenario(data, "fake.yaml")
    got = {}

    def factory(backend, spec, **options):
        got.update(options, backend=backend)
        return FakeCluster(spec)

    Runner(s, None, RunOptions(backend="slurm", report_dir=tmp_path, cluster_factory=factory, poll_s=0.02,
                               slurm={"partition": "gpu", "gpus_per_node": 8})).run()
    assert got == {"backend": "slurm", "partition": "gpu", "time_limit": "0:20:00", "sbatch_options": ["--qos=low"],
                   "gpus_per_node": 8}


class StallsWhenPaused(FakeCluster):
    """pause_node stops every rank's progress for good (a job stuck in a collective after an outage
    the harness healed); nothing restarts, nothing logs a fatal error."""

    def pause_node(self, node):
        super().pause_node(node)
        self.stall = True

    def _emit(self, node, rank, world, restart, pid, event, **kw):
        if event == "step" and getattr(self, "stall", False):
            return
        super()._emit(node, rank, world, restart, pid, event, **kw)


def run_stalling(tmp_path, expect):
    data = {**BASE, "faults": [{"at": {"step": 20}, "pause_node": {"node": "node-1"}, "duration_s": 0.3}],
            "expect": expect, "run": {"timeout_s": 30, "stuck_after_s": 1.5}}
    s = parse_scenario(data, "fake.yaml")
    return Runner(s, None, RunOptions(backend="fake", report_dir=tmp_path, poll_s=0.02,
                                      cluster_factory=lambda b, spec: StallsWhenPaused(spec))).run()


def test_a_run_that_hung_fails_although_every_check_passed(tmp_path):
    out = run_stalling(tmp_path, {"no_restart": True, "no_fatal": True})
    r = out.result
    by = {c.name: c for c in r.checks}
    assert by["no_restart"].status == "passed" and by["no_fatal"].status == "passed"
    assert r.ending == "stuck" and r.stop_reason.startswith("stuck")
    assert by["ending"].status == "failed" and "ends: stuck" in by["ending"].reason
    assert r.verdict == "failed" and out.exit_code == 1
    assert json.loads((out.run_dir / "result.json").read_text())["ending"] == "stuck"


def test_a_story_about_a_hang_expects_it(tmp_path):
    out = run_stalling(tmp_path, {"no_restart": True, "ends": "stuck"})
    by = {c.name: c for c in out.result.checks}
    assert by["ending"].status == "passed" and out.result.ending == "stuck"
    assert by["fault:f1"].status == "passed" and "did not resume" in by["fault:f1"].reason
    assert out.exit_code == 0, [(c.name, c.status, c.reason) for c in out.result.checks]


def test_a_normal_run_records_its_ending(tmp_path):
    out, _ = run(tmp_path)
    assert out.result.ending == "reached_step" and out.exit_code == 0
    assert {c.name: c.status for c in out.result.checks}["ending"] == "passed"


def test_a_job_that_ends_on_its_own_after_the_target_ended_normally(tmp_path):
    """Target reached, every fault done, then every node exits (the job's last step) while the run
    settles: a normal ending, not 'nodes_exited'."""
    class Finishes(FakeCluster):
        def _emit(self, node, rank, world, restart, pid, event, **kw):
            super()._emit(node, rank, world, restart, pid, event, **kw)
            if event == "step" and kw["step"] >= 40:
                self.alive = {n: False for n in self.alive}

        def node_status(self, node):
            return "running" if self.alive[node] else "exited:0"

    data = {**BASE, "faults": [], "expect": {"reaches_step": 25}, "run": {"timeout_s": 30, "stuck_after_s": 20,
                                                                            "settle_s": 15}}
    s = parse_scenario(data, "fake.yaml")
    out = Runner(s, None, RunOptions(backend="fake", report_dir=tmp_path, poll_s=0.02,
                                     cluster_factory=lambda b, spec: Finishes(spec))).run()
    assert out.result.stop_reason.startswith("every node exited") and out.result.ending == "reached_step"
    assert out.exit_code == 0, [(c.name, c.status, c.reason) for c in out.result.checks]


def test_a_healable_fault_without_duration_stays_in_place_until_teardown(tmp_path):
    """No duration_s: never healed by the run, not even when it stops; collection sees the cluster as
    the fault left it, and teardown removes it with the cluster (docs/scenarios.md)."""
    data = {**BASE, "faults": [{"at": {"step": 10}, "pause_node": {"node": "node-1"}}],
            "expect": {"reaches_step": 40}}
    out, cluster = run(tmp_path, data)
    assert out.exit_code == 0, [c for c in out.result.checks if c.blocking]
    assert "unpause_node node-1" not in cluster.calls
    assert cluster.calls.index("pause_node node-1") < cluster.calls.index("collect") < cluster.calls.index("down")
    actions = [json.loads(line)["action"] for line in (out.run_dir / "faults.jsonl").read_text().splitlines()]
    assert actions == ["inject"]
    (f,) = out.result.faults
    assert f.healed_at is None and f.verdict == "passed"


def test_a_fault_the_stop_cut_short_is_healed_before_collecting(tmp_path):
    data = {**BASE, "faults": [{"at": {"step": 10}, "pause_node": {"node": "node-1"}, "duration_s": 600}],
            "expect": {"reaches_step": 40}, "run": {"timeout_s": 3, "stuck_after_s": 30}}
    out, cluster = run(tmp_path, data)
    assert cluster.calls.index("unpause_node node-1") < cluster.calls.index("collect")
    assert out.result.ending == "timeout" and out.result.faults[0].healed_at is not None
    fault = next(c for c in out.result.checks if c.name == "fault:f1")
    assert fault.fault_id == "f1" and fault.status == "failed" and "cut short" in fault.reason


def test_a_cooperative_fault_the_job_never_fired_is_recorded_as_never_injected(tmp_path):
    # delivered (the command file exists) but no fault_fired: result.json must not show an injection time
    data = {**BASE, "faults": [{"at": {"step": 5}, "worker_error": {"kind": "cuda", "rank": 1}}],
            "expect": {"reaches_step": 25}, "run": {"timeout_s": 5, "stuck_after_s": 10}}
    out, cluster = run(tmp_path, data)
    assert (cluster.events_dir / "inject" / "f1.json").is_file()
    (f,) = out.result.faults
    assert f.injected_at is None and "delivered to the job but never fired" in (f.error or "")
    by = {c.name: c for c in out.result.checks}
    assert by["fault:f1"].status == "failed" and out.exit_code == 1


def test_a_fatal_written_while_the_teardown_kills_the_nodes_is_set_aside_not_judged(tmp_path):
    """Nodes that write into the run directory keep writing while they are removed one by one: a peer's
    `Connection reset` then is the teardown's doing (a fresh-clone CI's s3_outage failed no_fatal on it)."""
    data = {**BASE, "expect": {"reaches_step": 30, "no_fatal": True}, "faults": []}
    out, cluster = run(tmp_path, data, fatal_at_down=True)
    assert cluster.calls[-1] == "down"
    by = {c.name: c for c in out.result.checks}
    assert by["no_fatal"].status == "passed", by["no_fatal"]
    late = (out.run_dir / "after-collection" / "events" / "events-node-0-local0.jsonl").read_text()
    assert '"fatal"' in late and "Connection reset" in late
    assert '"fatal"' not in (out.run_dir / "events" / "events-node-0-local0.jsonl").read_text()
    harness = json.loads((out.run_dir / "harness.json").read_text())
    # the fake steps on until down(), as real nodes do between collection and teardown: set aside too
    assert harness["lines_after_collection"] >= 1 and "events/events-node-0-local0.jsonl" in harness["collected_sizes"]


def test_a_fatal_before_collection_still_fails_no_fatal(tmp_path):
    """The cut is at collection, not at the stop: a fatal the job wrote before it is judged (the fake's
    kill makes the survivors write one)."""
    data = {**BASE, "expect": {**BASE["expect"], "no_fatal": True}}
    out, _ = run(tmp_path, data)
    by = {c.name: c for c in out.result.checks}
    assert by["no_fatal"].status == "failed" and "peer closed" in by["no_fatal"].reason


class Squeezable(FakeCluster):
    """memory_pressure on the fake: the kernel 'kills' kill_after_s after the squeeze (None: never)."""
    supported_faults = FakeCluster.supported_faults | {"squeeze_memory", "release_memory"}
    kill_after_s: float | None = 0.3

    def squeeze_memory(self, node, limit_mb=None, fraction=None):
        self.calls.append(f"squeeze_memory {node}")
        self.squeezed_at = time.time()
        return {"limit_mb": 100}

    def release_memory(self, node):
        self.calls.append(f"release_memory {node}")
        return {"oom_kills": 0 if self.kill_after_s == "garbled" else self.memory_kills(node)}

    def memory_kills(self, node):
        self.calls.append("memory_kills")
        if self.kill_after_s == "garbled":   # the in-node read cut off mid-line
            raise ValueError("Expecting ',' delimiter: line 1 column 12")
        late = self.kill_after_s is None or time.time() - self.squeezed_at < self.kill_after_s
        return 0 if late else 1


def squeeze_run(tmp_path, kill_after_s, duration_s):
    data = {**BASE, "faults": [{"at": {"step": 10}, "memory_pressure": {"node": "node-1", "fraction": 0.9},
                                "duration_s": duration_s}],
            "expect": {"reaches_step": 40}, "run": {"timeout_s": 60, "stuck_after_s": 30}}
    out, cluster = run(tmp_path, data, cls=type("K", (Squeezable,), {"kill_after_s": kill_after_s}))
    return out, json.loads((out.run_dir / "harness.json").read_text()), cluster


def test_a_fault_whose_effect_ended_is_healed_then_not_at_its_duration(tmp_path):
    """memory_pressure ends at the first OOM kill: healed within a poll or two of it, and the fault
    check says why it was healed before its 30 s instead of failing it as cut short."""
    out, harness, _ = squeeze_run(tmp_path, kill_after_s=0.3, duration_s=30)
    (f,) = out.result.faults
    assert 0.3 <= f.healed_at - f.injected_at < 5, f.healed_at - f.injected_at
    assert "OOM-killed 1 process(es) on node-1" in harness["faults_ended"]["f1"]
    assert f.verdict == "passed" and "ended by itself" in f.reason, f.reason
    assert out.exit_code == 0 and out.result.duration_s < 20


def test_a_fault_that_never_ends_by_itself_lasts_its_duration(tmp_path):
    out, harness, cluster = squeeze_run(tmp_path, kill_after_s=None, duration_s=1.0)
    (f,) = out.result.faults
    assert f.healed_at - f.injected_at >= 1.0 and "faults_ended" not in harness
    assert f.verdict == "passed" and "ended by itself" not in f.reason
    assert cluster.calls.count("memory_kills") >= 2   # asked while in place (every 0.5 s), and at the heal


def test_a_read_that_fails_leaves_the_fault_to_its_duration_not_the_run_to_an_error(tmp_path):
    out, harness, cluster = squeeze_run(tmp_path, kill_after_s="garbled", duration_s=1.0)
    (f,) = out.result.faults
    assert "memory_kills" in cluster.calls   # asked, and it failed
    assert out.result.verdict != "error" and f.healed_at - f.injected_at >= 1.0 and "faults_ended" not in harness

