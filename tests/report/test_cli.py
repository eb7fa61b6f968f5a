import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(90)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "chaosbench.report", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_module_renders_a_run_and_writes_nothing_beside_it(passing_run):
    """A single run directory gets its report; the folder above it is not the command's to write
    (`python -m chaosbench.report DIR` overwrote DIR/../index.html)."""
    beside = passing_run.parent / "index.html"
    beside.write_text("someone else's page")
    proc = _run(passing_run)
    assert proc.returncode == 0, proc.stderr
    assert (passing_run / "report.html").is_file()
    assert beside.read_text() == "someone else's page" and "index.html" not in proc.stdout


def test_module_renders_a_reports_folder_and_reports_bad_runs(passing_run, failing_run, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "result.json").write_text("[]")
    proc = _run(tmp_path)
    assert proc.returncode == 2
    assert "broken/result.json: top level must be a JSON object, got list" in proc.stderr
    assert (passing_run / "report.html").is_file() and (failing_run / "report.html").is_file()
    assert "unreadable" in (tmp_path / "index.html").read_text()


def test_module_bad_input_exits_2_naming_the_file(tmp_path):
    proc = _run(tmp_path / "missing")
    assert proc.returncode == 2
    assert f"{tmp_path}/missing: not a directory" in proc.stderr
