"""Recovery inferred from observation alone (a job without events, docs/byo-trainer.md) is
conservative: it never yields negative lost work, infers a restore only from a known progress
cadence, sees a round that starts over as a fresh start, and takes world sizes from the agents'
rendezvous lines where only rank 0 prints."""
from chaosbench.checks import evaluate
from chaosbench.scenario.model import Expect

from .synth import observed_node_loss


def check(h, name, **expect):
    recs, results = evaluate(h, Expect(**expect))
    return next(r for r in results if r.name == name), recs


def test_every_step_printed_infers_the_restore():
    r, (rec,) = check(observed_node_loss(), "max_lost_steps", max_lost_steps=5)
    assert rec.restored_step == 40 and rec.lost_steps == 2 and r.status == "passed", r.reason


def test_a_sparse_progress_cadence_infers_no_restore_and_says_why():
    """Prints 100, 200, killed, resumes at 201 unseen and prints 300: the restore lies anywhere in
    200..299 (was: restore 299, lost -99, max_lost_steps 10 passed)."""
    h = observed_node_loss(before=[100, 200], after=[300, 400])
    r, (rec,) = check(h, "max_lost_steps", max_lost_steps=10)
    assert r.status == "not_evaluated" and "every 100 steps" in r.reason, r.reason
    assert rec.restored_step is None and rec.lost_steps is None


def test_a_line_that_only_looks_like_progress_never_gives_negative_loss():
    """'step 1000' printed by something else right after the restart (was: lost -958, passed)."""
    h = observed_node_loss(noise=[(0, 1000)])
    r, (rec,) = check(h, "max_lost_steps", max_lost_steps=10)
    assert r.status != "passed" and (rec.lost_steps is None or rec.lost_steps >= 0), (r.status, r.reason)


def test_a_round_that_starts_over_at_its_first_printed_step_is_a_fresh_start():
    """Same cadence of 100, restarts at 100: everything was lost (was: restore 99, lost 101, passed 150)."""
    h = observed_node_loss(before=[100, 200], after=[100, 200, 300])
    r, (rec,) = check(h, "max_lost_steps", max_lost_steps=150)
    assert rec.tier == "none" and rec.restored_step == 0 and rec.lost_steps == 200
    assert r.status == "failed"


def test_rank0_only_progress_takes_world_sizes_from_the_rendezvous():
    """`if rank == 0: print(...)`: the agents' rendezvous lines say the world size (was: '1 rank(s)
    trained', failed)."""
    h = observed_node_loss(rank0_only=True)
    r, (rec,) = check(h, "world_size_after", world_size_after=2)
    assert r.status == "passed", r.reason
    assert rec.ranks_after == 2 and not rec.failed_restarts
    r, _ = check(h, "world_sizes", world_sizes=[3, 2])
    assert r.status == "passed", r.reason


def test_rank0_only_progress_still_fails_a_world_size_the_rendezvous_does_not_back():
    h = observed_node_loss(rank0_only=True)
    h.agent_events = [a for a in h.agent_events if a["restart_count"] == 0]
    h.events = [e for e in h.events if e["pid"] != 2001]   # no second worker in the round at all
    r, _ = check(h, "world_size_after", world_size_after=2)
    assert r.status == "failed", r.reason


def test_reaches_step_is_not_earned_by_a_line_that_only_looks_like_progress():
    """'step 1000' printed by something else: the job got to step 100 only (was: reaches_step 200 passed)."""
    h = observed_node_loss(noise=[(3, 1000)])
    r, _ = check(h, "reaches_step", reaches_step=200)
    assert r.status == "failed" and r.observed == 100, r.reason
    assert check(observed_node_loss(noise=[(3, 1000)]), "reaches_step", reaches_step=90)[0].status == "passed"
    sparse = observed_node_loss(before=[100, 200], after=[300, 400])
    assert check(sparse, "reaches_step", reaches_step=400)[0].status == "passed"
