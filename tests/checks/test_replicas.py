"""replicas_agree: per-step parameter digests across ranks. Every history that would pass it wrongly
(no rollback, a rollback to a step after the divergence or to one never compared, a run that ends
diverged, one rank's digests, a fault that never fired) fails or is not evaluated."""
from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.scenario.model import Expect

from .synth import T0, ev

NODES = ["node-0", "node-1", "node-2"]


class Run:
    """Rounds of ranks that step 0.1 s apart, a digest every `every` steps."""

    def __init__(self):
        self.events: list[dict] = []
        self.faults: list[FaultWindow] = []
        self.plan: list[dict] = []
        self.pid = 5000

    def round_(self, start, steps, nodes=NODES, restart=0, every=5, loads=None, digest=None, restarts=None):
        """`digest(step, rank) -> str | None` (default: all agree); `loads`: (step, tier) restored first."""
        digest = digest or (lambda s, r: f"d{s}")
        world = len(nodes)
        for r, n in enumerate(nodes):
            self.pid += 1
            rc = (restarts or {}).get(n, restart)
            self.events.append(ev(start, "phase", n, r, world, rc, self.pid, phase="config"))
            if loads:
                self.events.append(ev(start + 0.2, "checkpoint_loaded", n, r, world, rc, self.pid, step=loads[0],
                                      tier=loads[1], source="local", duration_s=0.01, checksum_ok=True))
            for i, s in enumerate(steps):
                d = digest(s, r) if s % every == 0 else None
                self.events.append(ev(start + 0.5 + 0.1 * i, "step", n, r, world, rc, self.pid, step=s, loss=2.0,
                                      **({"param_digest": d} if d else {})))
        return start + 0.5 + 0.1 * len(steps)

    def corrupt(self, fid, rank, at_t, step, fired=True):
        self.faults.append(FaultWindow(fid, "corrupt_replica", f"rank {rank}", {"rank": rank, "step": step,
                                                                              "target": "param", "bits": 1}, T0 + at_t))
        self.plan.append({"id": fid, "type": "corrupt_replica", "trigger": "at 1 s", "healable": False,
                          "heal_after_s": None})
        if fired:
            node = NODES[rank]
            pid = next(e["pid"] for e in reversed(self.events) if e["node"] == node and e["ts"] <= T0 + at_t + 0.5)
            self.events.append(ev(at_t + 0.5, "fault_fired", node, rank, 3, 0, pid, fault_id=fid,
                                  fault="corrupt_replica", step=step, detail="layer.weight[3]: bit 30 flipped"))

    def history(self) -> History:
        self.events.sort(key=lambda e: e["ts"])
        h = History(events=self.events, faults=self.faults,
                    harness={"training_started_at": T0, "faults_planned": self.plan})
        h.resolve_cooperative()
        return h


def check(h: History):
    (r,) = [r for r in evaluate(h, Expect(replicas_agree=True))[1] if r.name == "replicas_agree"]
    return r


def rank2_from(step_bad):
    return lambda s, r: f"x{s}" if r == 2 and s >= step_bad else f"d{s}"


def test_agreeing_digests_pass():
    run = Run()
    run.round_(0.0, range(1, 61))
    r = check(run.history())
    assert r.status == "passed"
    assert r.reason == "the digests of ranks 0, 1, 2 agree at all 12 compared steps (5..60)"


def test_no_digests_is_not_evaluated_with_the_fix():
    run = Run()
    run.round_(0.0, range(1, 61), digest=lambda s, r: None)
    r = check(run.history())
    assert r.status == "not_evaluated" and "cb.watch(model, digest_every=10)" in r.reason
    assert "checkpoint.replica_digests: true" in r.reason


def test_digests_from_one_rank_only_compare_nothing():
    run = Run()
    run.round_(0.0, range(1, 61), digest=lambda s, r: f"d{s}" if r == 0 else None)
    r = check(run.history())
    assert (r.status, r.reason) == ("not_evaluated", "digests from rank 0 only: nothing to compare")


def test_a_divergence_rolled_back_to_the_last_agreeing_step_passes():
    """Rank 2 diverges at step 30; the job restores step 25 and replays 26-60: the replay's step 30 is
    compared with itself, not with the diverged attempt."""
    run = Run()
    end = run.round_(0.0, range(1, 33), digest=rank2_from(30))
    run.round_(end + 1.0, range(26, 61), restart=1, loads=(25, "memory"))
    r = check(run.history())
    assert r.status == "passed", r.reason
    assert r.reason == ("diverged at step 30 (rank 2); rolled back to step 25 (memory) whose digests agreed; agree "
                        "from then to step 60")


def test_a_divergence_with_no_rollback_fails():
    run = Run()
    run.round_(0.0, range(1, 61), digest=rank2_from(30))
    r = check(run.history())
    assert r.status == "failed"
    assert r.reason == "diverged at step 30 (rank 2); no restore followed: the run ended diverged"


def test_a_rollback_to_a_step_after_the_divergence_fails():
    run = Run()
    end = run.round_(0.0, range(1, 38), digest=rank2_from(30))
    run.round_(end + 1.0, range(36, 61), restart=1, loads=(35, "nvme"))
    r = check(run.history())
    assert r.status == "failed"
    assert "it rolled back to step 35 (nvme), not before the divergence (the last step whose digests agreed: 25)" \
        in r.reason


def test_a_rollback_to_a_step_never_compared_fails():
    run = Run()
    end = run.round_(0.0, range(1, 33), every=10, digest=rank2_from(30))
    run.round_(end + 1.0, range(26, 61), restart=1, every=10, loads=(25, "memory"))
    r = check(run.history())
    assert r.status == "failed"
    assert "rolled back to step 25 (memory), whose digests were never compared (none recorded there)" in r.reason


def test_a_rollback_then_a_new_divergence_that_lasts_to_the_end_fails():
    run = Run()
    end = run.round_(0.0, range(1, 33), digest=rank2_from(30))
    run.round_(end + 1.0, range(26, 61), restart=1, loads=(25, "memory"), digest=rank2_from(50))
    r = check(run.history())
    assert r.status == "failed"
    assert r.reason == ("diverged at step 30 (rank 2); rolled back to step 25 (memory) whose digests agreed; agree "
                        "from then to step 45; diverged at step 50 (rank 2); no restore followed: the run ended diverged")


def test_a_replacement_node_counting_restarts_from_zero_is_compared_with_its_peers():
    """After a node loss the replacement's agent starts at restart_count 0 while the survivors are at 1:
    grouping by restart_count would leave its digests alone and pass."""
    run = Run()
    end = run.round_(0.0, range(1, 31))
    run.round_(end + 1.0, range(31, 61), restart=1, loads=(30, "memory"), restarts={"node-2": 0},
               digest=rank2_from(50))
    r = check(run.history())
    assert r.status == "failed" and r.reason.startswith("diverged at step 50 (rank 2); no restore followed")


def test_with_two_ranks_both_are_named_and_the_fault_target_too():
    run = Run()
    run.round_(0.0, range(1, 61), nodes=NODES[:2], digest=lambda s, r: f"x{s}" if r == 1 and s >= 30 else f"d{s}")
    run.corrupt("f1", 1, 2.5, 27)
    r = check(run.history())
    assert r.status == "failed"
    assert r.reason.startswith("diverged at step 30 (ranks 0, 1 differ; f1 (corrupt_replica) targeted rank 1)")


def test_a_claim_of_divergence_where_the_digests_agree_is_reported_not_trusted():
    run = Run()
    run.round_(0.0, range(1, 61))
    run.events.append(ev(3.55, "replica_divergence", "node-0", 0, 3, 0, 5001, step=30,
                         digests={"0": "d30", "1": "d30", "2": "zz"}))
    r = check(run.history())
    assert r.status == "passed"
    assert r.reason.endswith("; a replica_divergence event at step 30 (rank 0) claims the replicas differ, but the "
                             "step events' digests agree there")


def test_a_claim_about_the_diverged_attempt_is_no_contradiction_of_its_replay():
    """The trainer's claim at step 30 of the attempt that diverged; the replay's step 30 agrees."""
    run = Run()
    end = run.round_(0.0, range(1, 33), digest=rank2_from(30))
    run.events.append(ev(3.55, "replica_divergence", "node-0", 0, 3, 0, 5001, step=30,
                         digests={"0": "d30", "1": "d30", "2": "x30"}))
    run.round_(end + 1.0, range(26, 61), restart=1, loads=(25, "memory"))
    r = check(run.history())
    assert r.status == "passed" and "claims" not in r.reason, r.reason


def test_a_claim_fills_a_step_the_step_events_hold_no_digest_for():
    """The trainer found the mismatch and exited before its step event: its claim is the evidence."""
    run = Run()
    run.round_(0.0, range(1, 61), digest=lambda s, r: f"d{s}" if s < 30 else None)
    run.events.append(ev(3.55, "replica_divergence", "node-0", 0, 3, 0, 5001, step=30,
                         digests={"0": "d30", "1": "d30", "2": "zz"}))
    r = check(run.history())
    assert r.status == "failed" and r.reason.startswith("diverged at step 30 (rank 2); no restore followed")


def test_a_corrupt_replica_that_never_fired_fails():
    run = Run()
    run.round_(0.0, range(1, 61))
    run.corrupt("f1", 1, 2.5, 500, fired=False)
    r = check(run.history())
    assert r.status == "failed"
    assert r.reason == ("f1 (corrupt_replica) was delivered to the job but never fired: the job never reached the "
                        "fault point (no cb.step/cb.fault_point at step >= 500 on rank 1): agreeing digests show "
                        "nothing about a corrupted replica")


def test_a_corruption_the_digests_never_show_fails():
    run = Run()
    run.round_(0.0, range(1, 61))   # agree all along, though rank 1 was corrupted at step 27
    run.corrupt("f1", 1, 2.5, 27)
    r = check(run.history())
    assert r.status == "failed"
    assert "rank 1's digests at steps 30..60 agree with the others': the digests do not cover what was corrupted" \
        in r.reason
