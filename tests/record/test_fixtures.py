"""Every stored real run (old records: schema 0, no receipts) loads whole, and `chaosbench recheck`
of a copy judges it without an error and to the same verdict."""
import shutil

import pytest

from chaosbench.checks.history import History
from chaosbench.recheck import recheck

from .stored import FIXTURES


@pytest.mark.parametrize("run", FIXTURES, ids=lambda p: p.name)
def test_a_stored_run_has_no_integrity_problem(run):
    h = History.load(run)
    assert h.schema_version == 0 and h.integrity == [], [str(p) for p in h.integrity]


@pytest.mark.parametrize("run", [r for r in FIXTURES if (r / "result.json").is_file()], ids=lambda p: p.name)
def test_recheck_of_a_stored_run_keeps_its_verdict(tmp_path, run):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    got = recheck(copy, write=False)
    assert got.new_verdict == got.old_verdict
    assert ("record_integrity", None, "passed") in got.changed
