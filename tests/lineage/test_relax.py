"""A scenario relaxes a run-level invariant only by name, with a reason, and the result shows it."""
import pytest
from pydantic import ValidationError

from chaosbench.checks import evaluate
from chaosbench.scenario.model import Expect

from tests.checks.synth import node_loss

from .cases import fresh_restart_without_fault


def test_unknown_invariant_is_refused_with_the_valid_names():
    with pytest.raises(ValidationError) as err:
        Expect(relax={"progres": "typo"})
    assert "unknown invariant 'progres'" in str(err.value) and "progress, liveness, completeness" in str(err.value)
    with pytest.raises(ValidationError, match="needs a reason"):
        Expect(relax={"progress": " "})


def test_a_relaxed_invariant_says_why_shows_what_it_found_and_does_not_block():
    h, expect, _ = fresh_restart_without_fault()
    res = {r.name: r for r in evaluate(h, Expect(**expect, relax={"progress": "the job restarts itself"}))[1]}
    r = res["invariant:progress"]
    assert r.reason.startswith("relaxed: the job restarts itself") and "unexplained restart" in r.reason
    assert r.optional and not r.blocking


def test_max_stall_seconds_overrides_the_derived_bound():
    h = node_loss()
    for e in h.events:
        if e["event"] == "step" and e.get("restart_count") == 1 and e["step"] > 70:
            e["ts"] += 8.0   # 8 s without a step, far from the fault: under the derived 20 s floor
    res = {r.name: r for r in evaluate(h, Expect())[1]}
    assert res["invariant:liveness"].status == "passed"
    res = {r.name: r for r in evaluate(h, Expect(max_stall_seconds=5))[1]}
    assert res["invariant:liveness"].status == "failed" and "after step 70" in res["invariant:liveness"].reason
