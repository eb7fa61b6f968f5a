"""The mutation suite: every operator (operators.py) turns every stored real run (data/) into a
history of a job that did not survive; the checks must not pass it. The unmutated run must pass.
Each pair records its outcome as the `mutation` property; conftest.py sums them up at the end."""
from __future__ import annotations

import json
import random
import shutil
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.mutation.judge import judge, runs
from tests.mutation.operators import OPERATORS
from tests.mutation.shape import NotApplicable

RUNS = runs()
PAIRS = [(o, r) for o in OPERATORS for r in RUNS]


def _outcome(record_property, op: str, run: str, outcome: str, detail: str = "") -> None:
    record_property("mutation", json.dumps({"operator": op, "run": run, "outcome": outcome, "detail": detail}))


@pytest.mark.parametrize("run", list(RUNS))
def test_the_real_run_passes(run):
    j = judge(RUNS[run], RUNS[run])
    assert j.verdict == "passed", f"{run} no longer passes unmutated: {j.blocking}"


def _mutate(src: Path, dst: Path, ops: list[tuple[str, int]]) -> list[str]:
    shutil.copytree(src, dst)
    return [f"{name}: {OPERATORS[name](dst, random.Random(seed))}" for name, seed in ops]


@pytest.mark.parametrize("op,run", PAIRS)
def test_the_mutant_does_not_pass(op, run, tmp_path, record_property):
    try:
        what = _mutate(RUNS[run], tmp_path / run, [(op, hash_seed(op, run))])
    except NotApplicable as e:
        _outcome(record_property, op, run, "n/a", str(e))
        pytest.skip(f"{op} does not apply to {run}: {e}")
    try:
        j = judge(tmp_path / run, RUNS[run])
    except Exception as e:
        _outcome(record_property, op, run, "crashed", repr(e))
        raise AssertionError(f"{op} on {run} ({what}) crashed the checks: {e!r}") from e
    if j.verdict == "passed":
        _outcome(record_property, op, run, "survivor", "; ".join(what))
        pytest.fail(f"survivor: {op} on {run} ({'; '.join(what)}) passed; every check passed: "
                    f"{', '.join(j.passed)}", pytrace=False)
    _outcome(record_property, op, run, "killed", "; ".join(j.blocking))


def hash_seed(*parts: str) -> int:
    """A seed that depends on the names only (not on PYTHONHASHSEED)."""
    return zlib.crc32("/".join(parts).encode())


COMPOSED = 25


@pytest.mark.skipif(not RUNS, reason="no stored runs")
def test_composed_mutants_do_not_pass(record_property):
    """Two operators with drawn parameters, one after the other, on one run: no pass either. Every
    example is judged (no shrinking) and the survivors are named together at the end."""
    survivors, judged, crashed = [], [], []

    @settings(derandomize=True, max_examples=COMPOSED, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(run=st.sampled_from(sorted(RUNS)), ops=st.lists(st.sampled_from(sorted(OPERATORS)), min_size=2,
                                                          max_size=2, unique=True),
           seeds=st.tuples(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1)))
    def one(run, ops, seeds):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                what = _mutate(RUNS[run], Path(tmp) / run, list(zip(ops, seeds)))
            except NotApplicable:
                return
            try:
                j = judge(Path(tmp) / run, RUNS[run])
            except Exception as e:
                crashed.append(f"{' + '.join(ops)} on {run}: {e!r}")
                return
            judged.append(1)
            if j.verdict == "passed":
                survivors.append(f"{' + '.join(ops)} on {run} ({'; '.join(what)}): passed {', '.join(j.passed)}")

    one()
    record_property("mutation_composed", json.dumps({"judged": len(judged), "survivors": len(survivors),
                                                     "crashed": len(crashed)}))
    assert not crashed, "composed mutants crashed the checks:\n" + "\n".join(crashed)
    assert not survivors, f"{len(survivors)} of {len(judged)} composed mutants passed:\n" + "\n".join(survivors)


@pytest.mark.parametrize("run", list(RUNS))
def test_rewriting_a_record_unchanged_keeps_it_passing(run, tmp_path):
    """The operators' own reading and writing (record.py) adds nothing a check could catch: a mutant is
    killed by its one change, never by how it was written."""
    from tests.mutation.record import Record
    shutil.copytree(RUNS[run], tmp_path / run)
    Record.load(tmp_path / run).save()
    j = judge(tmp_path / run, RUNS[run])
    assert j.verdict == "passed", f"{run} rewritten unchanged no longer passes: {j.blocking}"
    for f in (RUNS[run] / "events").glob("*.jsonl"):
        assert [json.loads(x) for x in f.read_text().splitlines()] == \
               [json.loads(x) for x in (tmp_path / run / "events" / f.name).read_text().splitlines()], f.name
