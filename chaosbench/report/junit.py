"""JUnit XML for CI: one testcase per check.

failed → <failure>; not evaluated → <failure> "not evaluated: reason" (it fails the run) unless
the check is optional, then <skipped>; a run that broke (verdict "error") adds an <error> case,
so CI never shows a broken harness as green.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from chaosbench import rundir


# Characters XML 1.0 cannot hold at all (ANSI colour codes from logs, NULs): CI parsers reject the file.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _text(v: Any) -> str:
    if v is None:
        return "not measured"
    return v if isinstance(v, str) else json.dumps(v)


def junit_tree(result: dict[str, Any]) -> ET.ElementTree:
    scenario = (result.get("scenario") or {}).get("name") or result.get("run_id") or "run"
    checks = result.get("checks") or []
    suite = ET.Element("testsuite", name=f"chaosbench.{scenario}")
    classname = f"chaosbench.{scenario}"
    failures = errors = skipped = 0
    for check in checks:
        case = ET.SubElement(suite, "testcase", classname=classname, name=str(check.get("name")))
        status, reason = check.get("status"), check.get("reason") or ""
        detail = (f"expected {_text(check.get('expected'))}, observed {_text(check.get('observed'))}"
                  + (f": {reason}" if reason else ""))
        if status == "passed":
            if reason:
                ET.SubElement(case, "system-out").text = detail
        elif status == "failed":
            failures += 1
            ET.SubElement(case, "failure", message=detail, type="CheckFailed").text = detail
        elif status == "not_evaluated" and check.get("optional"):
            skipped += 1
            ET.SubElement(case, "skipped", message=f"not evaluated (optional): {reason}")
        else:  # not_evaluated, or a status this version does not know: never green
            failures += 1
            msg = f"not evaluated: {reason}" if status == "not_evaluated" else f"unknown status {status!r}: {detail}"
            ET.SubElement(case, "failure", message=msg, type="NotEvaluated").text = msg
    if result.get("verdict") == "error" or (result.get("verdict") not in ("passed", "failed") and not checks):
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="run")
        msg = str(result.get("error") or f"run verdict is {result.get('verdict')!r}")
        ET.SubElement(case, "error", message=msg, type="HarnessError").text = msg
    duration = result.get("duration_s")
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{duration:.3f}" if isinstance(duration, (int, float)) else "0")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(result: dict[str, Any], path: Path) -> Path:
    tree = junit_tree(result)
    for el in tree.iter():
        if el.text:
            el.text = _clean(el.text)
        for k, v in el.attrib.items():
            el.set(k, _clean(v))
    text = ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True)
    # never through a link planted in the run directory (chaosbench/rundir.py)
    return rundir.write_text(Path(path).parent, Path(path).name, text + "\n")
