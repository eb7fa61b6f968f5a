"""A run directory is often someone else's (a downloaded CI artifact): links planted in it must not
make recheck or report write outside it or read a file from outside it into the report, and the runs
index must not turn a folder name into a link of another scheme (docs/result.md, "Run-directory safety")."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.recheck import main as recheck_main, recheck
from chaosbench.report import render_index, render_run

from .htmltext import Page

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).resolve().parents[1] / "diagnosis" / "data"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def real_run(tmp_path):
    """A real recorded run (docker, scenarios/worker_error.yaml), in a folder beside files it must not touch."""
    return Path(shutil.copytree(DATA / "worker_error", tmp_path / "reports" / "worker_error-1"))


def _outside(tmp_path: Path, name: str, text: str = "precious") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


@pytest.mark.parametrize("name", ["report.html", "junit.xml", "diagnosis.json", "result.previous.json"])
def test_recheck_never_writes_through_a_link_planted_in_the_run_dir(real_run, tmp_path, name):
    target = _outside(tmp_path, f"victim-{name}")
    (real_run / name).unlink(missing_ok=True)
    (real_run / name).symlink_to(target)
    r = recheck(real_run)
    assert target.read_text() == "precious"
    assert not (real_run / name).is_symlink() and (real_run / name).stat().st_size > 0
    assert r.new_verdict == "passed"   # a link at a name recheck writes is replaced, not judged


def test_the_temp_file_name_is_no_way_out_either(real_run, tmp_path):
    target = _outside(tmp_path, "victim-tmp")
    (real_run / ".report.html.tmp").symlink_to(target)
    (real_run / ".result.json.tmp").symlink_to(target)
    recheck(real_run)
    assert target.read_text() == "precious"


def test_a_linked_result_json_is_bad_input_and_nothing_is_written(real_run, tmp_path, capsys):
    target = _outside(tmp_path, "victim.json", (real_run / "result.json").read_text())
    before = target.read_text()
    (real_run / "result.json").unlink()
    (real_run / "result.json").symlink_to(target)
    assert recheck_main([str(real_run)]) == 2
    assert "result.json: a symlink" in capsys.readouterr().out
    assert target.read_text() == before and not (real_run / "result.previous.json").exists()


def test_a_linked_part_of_the_record_fails_the_run_naming_it(real_run, tmp_path):
    """The events the checks judge must be the run's own: a link in their place is reported, and fails."""
    ev = real_run / "events" / "events-node-1-local0.jsonl"
    shutil.move(ev, tmp_path / ev.name)
    ev.symlink_to(tmp_path / ev.name)
    r = recheck(real_run)
    assert r.new_verdict == "failed"
    result = json.loads((real_run / "result.json").read_text())
    assert result["links"] == ["events/events-node-1-local0.jsonl"]
    (check,) = [c for c in result["checks"] if c["name"] == "record_integrity"]
    assert check["status"] == "failed" and "events/events-node-1-local0.jsonl: a symlink" in check["reason"]
    assert "Links in the run directory" in Page((real_run / "report.html").read_text()).all_text()


def test_the_report_never_reads_a_linked_logs_folder_or_log(passing_run, tmp_path):
    secret_dir = tmp_path / "elsewhere"
    secret_dir.mkdir()
    (secret_dir / "node-9.log").write_text("SECRET-FROM-A-LINKED-FOLDER\n")
    _outside(tmp_path, "shadow", "SECRET-FROM-A-LINKED-FILE\n")
    (passing_run / "logs" / "node-0.log").unlink()
    (passing_run / "logs" / "node-0.log").symlink_to(tmp_path / "shadow")
    text = Page(render_run(passing_run).read_text()).all_text()
    assert "SECRET-FROM-A-LINKED-FILE" not in text and "node-1.log" in text
    shutil.rmtree(passing_run / "logs")
    (passing_run / "logs").symlink_to(secret_dir)
    (passing_run / "diagnosis.json").symlink_to(tmp_path / "shadow")
    text = Page(render_run(passing_run).read_text()).all_text()
    assert "SECRET-FROM-A-LINKED-FOLDER" not in text and "SECRET-FROM-A-LINKED-FILE" not in text


def test_report_never_writes_through_a_linked_report_html(passing_run, tmp_path):
    target = _outside(tmp_path, "victim.html")
    (passing_run / "report.html").symlink_to(target)
    render_run(passing_run)
    assert target.read_text() == "precious" and not (passing_run / "report.html").is_symlink()


def test_index_links_are_quoted_relative_paths_never_another_scheme(passing_run, tmp_path):
    evil = tmp_path / "javascript:alert(1)"
    shutil.copytree(passing_run, evil)
    render_run(evil)
    page = Page(render_index(tmp_path).read_text())
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert "./javascript%3Aalert%281%29/report.html" in hrefs
    assert all(h.startswith("./") for h in hrefs), hrefs


def test_index_does_not_list_a_linked_run_folder(passing_run, tmp_path):
    render_run(passing_run)
    other = tmp_path / "other"
    other.mkdir()
    (other / "linked-run").symlink_to(passing_run, target_is_directory=True)
    page = Page(render_index(other).read_text())
    assert not [a for t, a in page.tags if t == "a"]


def test_chaosbench_report_writes_no_index_beside_a_run(passing_run):
    beside = passing_run.parent / "index.html"
    beside.write_text("someone else's page")
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "report", str(passing_run)], capture_output=True,
                       text=True, cwd=ROOT, timeout=90)
    assert r.returncode == 0, r.stderr
    assert beside.read_text() == "someone else's page" and (passing_run / "report.html").is_file()
