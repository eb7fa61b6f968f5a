"""One JUnit writer: `chaosbench run` and `chaosbench recheck` write junit.xml in the report's shape
(report/junit.py), with each fault's own check as a case."""
import xml.etree.ElementTree as ET

from chaosbench.recheck import recheck
from chaosbench.report.junit import junit_tree
from chaosbench.result import RunResult
from tests.scenario.test_runner import BASE, run


def _cases(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return {c.get("name"): c for c in root.find("testsuite")}


def test_run_and_recheck_write_the_same_junit_shape(tmp_path):
    data = {**BASE, "expect": {**BASE["expect"], "recovered_from": "s3"}}
    out, _ = run(tmp_path, data)
    junit = out.run_dir / "junit.xml"
    expected = ET.tostring(junit_tree(RunResult.read(out.run_dir).model_dump(mode="json")).getroot())
    assert ET.tostring(ET.parse(junit).getroot()) == expected
    cases = _cases(junit)
    assert cases["recovered_from"].find("failure").get("type") == "CheckFailed"
    assert cases["fault:f1"].find("failure") is None
    first = junit.read_text()
    recheck(out.run_dir)
    assert junit.read_text() == first
