import json
import xml.etree.ElementTree as ET

import pytest

from chaosbench.report import ReportInputError, render_index, render_run, write_junit

from .htmltext import Page
from .rundir import HOSTILE, build

pytestmark = pytest.mark.timeout(60)


def _page(run_dir):
    return Page(render_run(run_dir).read_text(encoding="utf-8"))


def test_passing_run_header_and_recovery(passing_run):
    page = _page(passing_run)
    text = page.all_text()
    assert "passed" in text.split("node_loss")[0]  # the verdict badge comes first
    assert ("kill_node node-2 (at step 40): recovered from memory at step 40 in 3.6 s, 2 steps lost, "
            "world size 3 → 2.") in text
    assert "3 nodes × 1 proc, elastic 2–3, rendezvous etcd-v3" in text
    assert "chaosbench run scenarios/node_loss.yaml --backend local --seed 1234" in text
    assert "Checks: 5 passed, 0 failed, 0 not evaluated (of 5)." in text
    # recovery breakdown: phases, tier, source, bytes, lost steps, goodput
    for cell in ("800 ms", "2.10 s", "400 ms", "300 ms", "memory", "40 (was 42)", "peer", "52.0 MB", "88%"):
        assert cell in text, cell
    svg = [a for t, a in page.tags if t == "svg" and a.get("id") == "timeline"]
    assert svg, "timeline chart missing"
    assert page.count("polyline") == 5  # node-0/1: before + after the restart; node-2: before its death
    assert "⚡ f1 kill_node node-2" in text


def test_fault_window_is_drawn_from_injection_to_first_step(passing_run):
    html = render_run(passing_run).read_text()
    result = json.loads((passing_run / "result.json").read_text())
    rect = [a for t, a in Page(html).tags if t == "rect" and a.get("fill-opacity") == "0.13"]
    assert len(rect) == 1
    t0, t1 = result["started_at"], result["finished_at"]
    rec = result["recoveries"][0]
    left, right = 92, 1100 - 24

    def x(ts):
        return left + (ts - t0) / (t1 - t0) * (right - left)

    assert float(rect[0]["x"]) == pytest.approx(x(rec["injected_at"]), abs=0.05)
    assert float(rect[0]["width"]) == pytest.approx(x(rec["first_step_at"]) - x(rec["injected_at"]), abs=0.1)


def test_failing_run_says_why(failing_run):
    page = _page(failing_run)
    text = page.all_text()
    assert text.lstrip().startswith("failed")
    assert "recovered_from failed: expected s3, observed memory — restored step 40 from memory (peer)" in text
    assert "loss_continuity not evaluated: expected continuous, observed not measured" in text
    assert "Checks: 4 passed, 1 failed, 2 not evaluated (of 7)." in text
    assert "[NVME] step 20: [Errno 28] No space left on device: '/nvme/ckpt-20.tmp' ×3" in text
    # failed NVMe saves are marked in the chart with their step
    assert "nvme step 20 FAILED" in text


def _junit(run_dir):
    """junit.xml as the analyse step writes it, from result.json (the report does not write it)."""
    return write_junit(json.loads((run_dir / "result.json").read_text()), run_dir / "junit.xml")


def test_junit_passing(passing_run):
    _junit(passing_run)
    suite = ET.parse(passing_run / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "5" and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert [c.get("name") for c in suite.iter("testcase")][0] == "recovered_from"
    assert not list(suite.iter("failure"))


def test_junit_failing_and_not_evaluated(failing_run):
    _junit(failing_run)
    suite = ET.parse(failing_run / "junit.xml").getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert suite.get("failures") == "2" and suite.get("skipped") == "1"
    assert cases["recovered_from"].find("failure").get("message").startswith("expected s3, observed memory")
    assert (cases["loss_continuity"].find("failure").get("message")
            == "not evaluated: no step events before the restore on rank 1")
    assert "no logs collected" in cases["log_regex:no_nccl_warning"].find("skipped").get("message")
    assert cases["max_lost_steps"].find("failure") is None


def test_junit_error_verdict_is_an_error_case(passing_run):
    result = json.loads((passing_run / "result.json").read_text())
    result.update(verdict="error", error="cluster did not come up: etcd not healthy after 30 s", checks=[])
    (passing_run / "result.json").write_text(json.dumps(result))
    _junit(passing_run)
    suite = ET.parse(passing_run / "junit.xml").getroot().find("testsuite")
    assert suite.get("errors") == "1"
    assert "etcd not healthy" in suite.find("testcase/error").get("message")
    assert "Harness error: cluster did not come up" in _page(passing_run).all_text()


def test_hostile_log_lines_render_as_text(passing_run):
    html = render_run(passing_run).read_text()
    page = Page(html)
    assert HOSTILE not in html
    assert page.count("script") == 1  # the report's own filter script, nothing injected
    assert page.count("img") == 0
    assert sum(HOSTILE in line for line in page.log_lines) == 3  # one per node log, shown verbatim
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in html


def test_hostile_result_fields_are_escaped(passing_run):
    result = json.loads((passing_run / "result.json").read_text())
    result["scenario"]["name"] = "<b onmouseover=x>node_loss</b>"
    result["checks"][0]["reason"] = HOSTILE
    result["faults"][0]["target"] = '"><svg onload=alert(1)>'
    result["checkpoints"]["nvme"]["errors"] = [HOSTILE]
    (passing_run / "result.json").write_text(json.dumps(result))
    html = render_run(passing_run).read_text()
    page = Page(html)
    assert page.count("script") == 1
    assert "<b onmouseover=x>node_loss</b>" in page.all_text()
    assert page.count("svg") == 1  # only the chart
    assert not any("onload" in a or "onmouseover" in a for _, a in page.tags)
    assert HOSTILE in page.all_text() or HOSTILE.split()[0] in page.all_text()


def test_missing_fields_read_not_measured_never_zero(passing_run):
    result = json.loads((passing_run / "result.json").read_text())
    rec = result["recoveries"][0]
    for key in ("detection_s", "rendezvous_s", "tier", "bytes", "lost_steps"):
        rec[key] = None
    del rec["restore_duration_s"]
    del result["goodput"]
    (passing_run / "result.json").write_text(json.dumps(result))
    page = _page(passing_run)
    row = page.row_after("detection")
    for col in ("detection", "rendezvous", "tier", "bytes", "load time", "lost steps"):
        assert row[col] == "not measured", (col, row)
    assert row["restore"] == "400 ms" and row["first step"] == "300 ms"
    text = page.all_text()
    assert "restore tier not measured" in text
    assert "not measured goodput vs fault-free" in text


def test_the_report_never_parses_events_a_record_without_timeline_shows_no_chart(passing_run):
    """The timeline is the analyse step's (result.json); the report does not derive it again from events/."""
    result = json.loads((passing_run / "result.json").read_text())
    result["timeline"] = None
    (passing_run / "result.json").write_text(json.dumps(result))
    page = _page(passing_run)
    assert page.count("polyline") == 0
    assert "no training steps recorded" in page.all_text()
    assert "checkpoint_loaded" in page.all_text()   # the events are still there to read, as text


def test_report_is_self_contained(failing_run):
    page = _page(failing_run)
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            assert not (attrs.get(name) or "").startswith(("http:", "https:", "//")), (tag, attrs)
    assert not any(t == "link" for t, _ in page.tags)


def test_index_lists_runs_newest_first_and_survives_a_broken_one(passing_run, failing_run, tmp_path):
    render_run(passing_run)
    render_run(failing_run)
    res = json.loads((failing_run / "result.json").read_text())
    res["started_at"] += 3600
    (failing_run / "result.json").write_text(json.dumps(res))
    broken = tmp_path / "broken-run"
    broken.mkdir()
    (broken / "result.json").write_text("{not json")
    page = Page(render_index(tmp_path).read_text())
    links = [a["href"] for t, a in page.tags if t == "a"]
    assert links == [f"./{failing_run.name}/report.html", f"./{passing_run.name}/report.html"]
    text = page.all_text()
    assert "2 runs" not in text and "3 runs: 1 passed, 1 failed, 0 could not run." in text
    assert "invalid JSON at line 1, column 2" in text


def test_bad_input_errors_name_file_and_field(tmp_path):
    with pytest.raises(ReportInputError, match=r"result.json: not found"):
        render_run(tmp_path)
    (tmp_path / "result.json").write_text('{"checks": {"a": 1}}')
    with pytest.raises(ReportInputError, match=r"result.json: field 'checks' must be a list, got dict"):
        render_run(tmp_path)
    (tmp_path / "result.json").write_text('{"schema_version": 7}')
    with pytest.raises(ReportInputError, match=r"'schema_version' is 7"):
        render_run(tmp_path)
    with pytest.raises(ReportInputError, match="not a directory"):
        render_index(tmp_path / "nope")


def test_minimal_result_renders(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"verdict": "error", "error": "docker not found"}))
    page = _page(tmp_path)
    assert "no training steps recorded" in page.all_text()
    assert "Harness error: docker not found" in page.all_text()


def test_long_logs_keep_the_tail(tmp_path):
    build(tmp_path, passing=True, hostile=False)
    lines = [f"line {i}" for i in range(5000)]
    (tmp_path / "logs" / "node-0.log").write_text("\n".join(lines) + "\nTraceback: the end\n")
    text = _page(tmp_path).all_text()
    assert "4000 lines, first 1001 omitted" in text and "Traceback: the end" in text


def test_fixture_matches_the_runners_result_model(passing_run, failing_run):
    """The report reads plain JSON; this keeps its test data in step with what the runner writes."""
    from chaosbench.result import RunResult

    for run_dir in (passing_run, failing_run):
        model = RunResult.model_validate_json((run_dir / "result.json").read_text())
        (run_dir / "result.json").write_text(model.model_dump_json(indent=2))  # as the runner writes it
        page = _page(run_dir)
        assert page.count("polyline") == 5
        assert "recovered from memory at step 40 in 3.6 s" in page.all_text()


def test_fault_error_is_shown(passing_run):
    result = json.loads((passing_run / "result.json").read_text())
    result["faults"][0]["error"] = "docker kill node-2: container not found"
    (passing_run / "result.json").write_text(json.dumps(result))
    assert "fault error: docker kill node-2: container not found" in _page(passing_run).all_text()


def test_broken_run_shows_faults_from_the_fault_log(passing_run):
    """A record that lists no faults still shows them, from faults.jsonl (the events stay unread:
    without the analyse step's timeline there is no chart)."""
    (passing_run / "result.json").write_text(json.dumps({"verdict": "error", "error": "harness interrupted"}))
    page = _page(passing_run)
    text = page.all_text()
    assert "kill_node node-2: no recovery recorded." in text
    assert "Faults rebuilt from faults.jsonl" in text
    assert "⚡ f1 kill_node node-2" in text
    assert page.count("polyline") == 0
    assert "result.json has no checkpoint statistics" in text


def test_fault_ridden_through_says_so(passing_run):
    """An S3 outage that needs no restart reads as such, with the steps trained during it."""
    result = json.loads((passing_run / "result.json").read_text())
    t = result["timeline"]["steps"]
    start, end = t[150]["ts"], t[200]["ts"]  # after the node loss: no restart in this window
    result["faults"].append({"id": "f2", "type": "s3_outage", "target": "s3", "trigger": "at 20 s",
                             "params": {}, "injected_at": start, "healed_at": end})
    (passing_run / "result.json").write_text(json.dumps(result))
    text = _page(passing_run).all_text()
    steps = [r["step"] for r in t if start <= r["ts"] <= end]
    assert f"s3_outage s3: no restart; training went on while it lasted (steps {min(steps)} → {max(steps)})." in text


def test_unrecovered_fault_is_shown_as_such(failing_run):
    """What the runner writes when workers restarted but never trained again (seen in a real run)."""
    result = json.loads((failing_run / "result.json").read_text())
    rec = result["recoveries"][0]
    for key in list(rec):
        if key not in ("fault_id", "injected_at", "detected_at", "step_before_fault", "world_size_before"):
            rec[key] = None
    result["checks"] = [dict(result["checks"][0], name=f"check_{i}", status="failed") for i in range(8)]
    (failing_run / "result.json").write_text(json.dumps(result))
    page = _page(failing_run)
    text = page.all_text()
    assert "kill_node node-2 (at step 40): NOT RECOVERED, no training step after it." in text
    assert "not recovered : no training step after injection" in text  # <b>not recovered</b>: ...
    assert "✗ not recovered" in text
    assert "and 3 more failing checks" in text
    band = [a for t, a in page.tags if t == "rect" and a.get("fill-opacity") == "0.13"][0]
    assert float(band["x"]) + float(band["width"]) == pytest.approx(1100 - 24, abs=0.1)  # to the end


def test_junit_survives_control_characters(failing_run):
    result = json.loads((failing_run / "result.json").read_text())
    result["checks"][0]["reason"] = "\x1b[31mFAILED\x1b[0m <&> \x00"
    (failing_run / "result.json").write_text(json.dumps(result))
    _junit(failing_run)
    case = ET.parse(failing_run / "junit.xml").getroot().find("testsuite/testcase")
    assert case.find("failure").get("message").endswith("\ufffd[31mFAILED\ufffd[0m <&> \ufffd")


def test_log_colour_codes_are_stripped_and_torn_utf8_tolerated(passing_run):
    (passing_run / "logs" / "node-0.log").write_bytes(b"\x1b[1;31mERROR\x1b[0m gloo timeout \xe2\x82\n")
    page = _page(passing_run)
    assert "ERROR gloo timeout \ufffd" in page.log_lines


def test_checkpoint_files_each_node_held_at_the_fault_and_after_the_run(passing_run):
    f = lambda node, path, partial=False: {"node": node, "tier": "nvme", "path": path, "bytes": 1000,
                                           "partial": partial}
    (passing_run / "inventories").mkdir(exist_ok=True)
    (passing_run / "inventories" / "f1.json").write_text(json.dumps({
        "fault_id": "f1", "taken_at": 1.0,
        "files": [f("node-0/nvme", "ck/snapshot-9.pt"), f("node-0/nvme", "ck/snapshot-10.pt", True)],
        "unseen": [{"node": "node-2", "tier": "memory", "reason": "node-2 is not running"}]}))
    (passing_run / "checkpoints.json").write_text("{torn")          # unreadable: left out, no traceback
    text = _page(passing_run).all_text()
    assert "Checkpoint files held per node" in text
    assert "at f1" in text and "ck/snapshot-10.pt" in text          # newest by number, not by string
    assert "node-2/memory not seen node-2 is not running" in " ".join(text.split())
