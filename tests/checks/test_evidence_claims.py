"""Restore claims held against the harness's own evidence: with or without `tier`, the harness's
inventory that looked and found nothing outranks the job's checkpoint_saved word, and a rank's
restore must come before its first step."""
from chaosbench.checks import evaluate
from chaosbench.evidence.inventory import take_inventory
from chaosbench.scenario.model import Expect

from .synth import T0, node_loss


def check(h, name, **expect):
    _, results = evaluate(h, Expect(**expect))
    return next(r for r in results if r.name == name)


def looked_and_found_nothing(tmp_path):
    """The at-fault inventory walked both survivors' memory tier and found it empty (wiped)."""
    roots = {}
    for n in ("node-0", "node-1"):
        (tmp_path / n).mkdir()
        roots[f"{n}/memory"] = ("memory", tmp_path / n)
    inv = take_inventory(roots)
    inv["started_at"] = inv["taken_at"] = T0 + 4.1
    return inv


def test_a_claim_without_tier_is_held_against_the_evidence_too():
    """`cb.restored(step=40)`: no tier, no save of step 40 anywhere, the inventory saw none (was:
    max_lost_steps passed, because a tier-less claim skipped the cross-check)."""
    h = node_loss(emit_tier=False)
    h.events = [e for e in h.events if not (e["event"] == "checkpoint_saved" and e["step"] == 40)]
    h.inventories["f1"] = {"checkpoints": [], "unseen": []}
    r = check(h, "max_lost_steps", max_lost_steps=5)
    assert r.status == "failed" and "not backed by the harness's evidence" in r.reason, r.reason
    assert "claims step 40" in r.reason


def test_a_tierless_claim_backed_by_a_save_passes():
    h = node_loss(emit_tier=False)
    assert check(h, "max_lost_steps", max_lost_steps=5).status == "passed"


def test_a_tierless_claim_without_any_evidence_is_not_evaluated():
    h = node_loss(emit_tier=False)
    h.events = [e for e in h.events if e["event"] != "checkpoint_saved"]
    r = check(h, "max_lost_steps", max_lost_steps=5)
    assert r.status == "not_evaluated" and "could not be checked" in r.reason


def test_an_inventory_that_looked_and_found_nothing_outranks_the_jobs_saves(tmp_path):
    """The memory tier was wiped at the fault; the job claims memory@40, saved before the fault
    (was: recovered_from memory passed on the job's word)."""
    h = node_loss()
    h.inventories["f1"] = looked_and_found_nothing(tmp_path)
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "looked at node-0's memory right after f1" in r.reason, r.reason


def test_a_save_logged_after_the_inventory_still_counts(tmp_path):
    """The inventory cannot have seen a snapshot saved after it was taken."""
    h = node_loss(restored=45)
    h.inventories["f1"] = looked_and_found_nothing(tmp_path)
    for n, r in (("node-0", 0), ("node-1", 1)):
        h.events.append({**[e for e in h.events if e["node"] == n and e["event"] == "checkpoint_saved"][-1],
                         "ts": T0 + 4.5, "step": 45})
        h.events.append({**[e for e in h.events if e["node"] == n and e["event"] == "step"][41], "ts": T0 + 4.45,
                         "step": 45})
    h.events.sort(key=lambda e: e["ts"])
    r = check(h, "recovered_from", recovered_from="memory")
    assert "looked at" not in r.reason, r.reason


def test_a_rank_that_logs_its_restore_after_it_trained_fails():
    """One process, one clock: a restore logged after the rank's first step is no restore of it."""
    h = node_loss()
    (late,) = [e for e in h.events if e["event"] == "checkpoint_loaded" and e["node"] == "node-1"]
    late["ts"] = T0 + 7.55
    h.events.sort(key=lambda e: e["ts"])
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "node-1/local0" in r.reason and "after its first step" in r.reason, r.reason
