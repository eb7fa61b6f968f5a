"""CI rerun policy (conftest.py): only named flaky tests get a rerun, and the JUnit file shows it."""
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[2]
FLIP = """
import os, pathlib
def _once(name):
    p = pathlib.Path(os.environ["MARKS"]) / name
    if p.exists():
        return True
    p.write_text("x")
    return False
def test_listed():
    assert _once("listed"), "fails on the first attempt only"
def test_unlisted():
    assert _once("unlisted"), "fails on the first attempt only"
"""


def test_only_named_tests_rerun_and_junit_records_it(tmp_path):
    conftest = (ROOT / "conftest.py").read_text()
    head, _, tail = conftest.partition("KNOWN_FLAKY = {")
    tail = tail.split("\n}\n", 1)[1]
    (tmp_path / "conftest.py").write_text(head + 'KNOWN_FLAKY = {"test_flip.py::test_listed": "why"}\n' + tail)
    (tmp_path / "test_flip.py").write_text(FLIP)
    (tmp_path / "marks").mkdir()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-raR",
                        "--junitxml=j.xml", "test_flip.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={"MARKS": str(tmp_path / "marks"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 1, r.stdout
    assert "1 failed, 1 passed, 1 rerun" in r.stdout, r.stdout
    cases = {c.get("name"): c for c in ElementTree.parse(tmp_path / "j.xml").iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_listed"].iter("property")}
    assert props == {"known_flaky": "why", "reruns": "1"}
    assert cases["test_unlisted"].find("failure") is not None


def test_ci_script_has_no_blanket_rerun_and_keeps_skip_reasons():
    script = (ROOT / "scripts" / "test.sh").read_text()
    runs = [line for line in script.splitlines() if "-m pytest" in line]
    assert len(runs) == 2
    for line in runs:
        assert "--reruns" not in line and "-raR" in line, line
