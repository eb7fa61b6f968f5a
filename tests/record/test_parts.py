"""A required part missing or unparsable is an integrity failure that names it; the checks that read
the part fail instead of vanishing (built from a copy of a stored real run, node_loss_plain)."""
import json

import pytest

from .stored import copy_run, harness, judged, parts


def test_the_unaltered_run_is_whole_and_passes(tmp_path):
    h, res = judged(copy_run(tmp_path))
    assert h.integrity == [] and res["record_integrity"].status == "passed"
    assert res["ending"].status == "passed" and res["fault:f1"].status == "passed"


@pytest.mark.parametrize("content, problem", [(None, "missing"), ("", "empty"), ("{", "not JSON"),
                                              ("[1, 2]", "not a JSON object"), ("{}", "an empty object")])
def test_a_broken_harness_record_fails_the_ending_and_every_planned_fault(tmp_path, content, problem):
    run = copy_run(tmp_path)
    if content is None:
        (run / "harness.json").unlink()
    else:
        (run / "harness.json").write_text(content)
    h, res = judged(run)
    assert [(p.part, p.problem.split(" (")[0].split(":")[0]) for p in h.integrity] == [("harness.json", problem)]
    assert res["record_integrity"].status == "failed" and "harness.json" in res["record_integrity"].reason
    assert res["ending"].status == "failed" and "harness.json" in res["ending"].reason
    # the plan comes from scenario.yaml: the fault's check is there, and the fault log still backs it
    assert res["fault:f1"].fault_id == "f1" and res["fault:f1"].status in ("passed", "failed")


def test_a_harness_record_without_its_stop_reason(tmp_path):
    run = copy_run(tmp_path)
    harness(run, stop_reason=None)
    h, res = judged(run)
    assert [str(p) for p in h.integrity] and parts(h) == ["harness.json"] and "stop_reason" in h.integrity[0].problem
    assert res["record_integrity"].status == "failed"


def test_a_versioned_harness_record_must_name_its_ending_and_run(tmp_path):
    run = copy_run(tmp_path)
    harness(run, schema_version=1, ending=None)
    h, _ = judged(run)
    assert h.schema_version == 1
    assert sorted(p.problem for p in h.integrity if p.part == "harness.json") == ["no `ending`", "no `run_id`"]


def test_no_fault_log_fails_each_planned_fault_as_without_evidence(tmp_path):
    run = copy_run(tmp_path)
    (run / "faults.jsonl").unlink()
    h, res = judged(run)
    assert parts(h) == ["faults.jsonl"] and "f1" in h.integrity[0].problem
    assert res["fault:f1"].status == "failed" and "no evidence it was injected" in res["fault:f1"].reason


def test_no_fault_log_and_no_harness_record_still_fail_the_faults_scenario_yaml_plans(tmp_path):
    run = copy_run(tmp_path)
    (run / "faults.jsonl").unlink()
    (run / "harness.json").write_text("")
    h, res = judged(run)
    assert parts(h) == ["harness.json", "faults.jsonl"]
    assert res["fault:f1"].status == "failed" and "no evidence it was injected" in res["fault:f1"].reason
    assert res["ending"].status == "failed"


def test_no_fault_log_is_whole_when_no_planned_fault_was_reached(tmp_path):
    """A run that stopped before its fault fired has no fault log: that is no integrity problem (the
    fault's own check fails it as never injected)."""
    run = copy_run(tmp_path)
    (run / "faults.jsonl").unlink()
    harness(run, faults_unfinished=["f1"], ending="nodes_exited", stop_reason="every node exited")
    h, res = judged(run)
    assert h.integrity == [] and res["fault:f1"].status == "failed"


@pytest.mark.parametrize("part, damage", [("scenario.yaml", "missing"), ("scenario.yaml", "a: [b"),
                                          ("scenario.yaml", "- a list"), ("exits.json", "missing"),
                                          ("exits.json", "{not json"), ("exits.json", "[]")])
def test_a_missing_or_unparsable_part(tmp_path, part, damage):
    run = copy_run(tmp_path)
    if damage == "missing":
        (run / part).unlink()
    else:
        (run / part).write_text(damage)
    h, res = judged(run)
    assert parts(h) == [part]
    assert res["record_integrity"].status == "failed" and part in res["record_integrity"].reason


@pytest.mark.parametrize("how", ["gone", "empty"])
def test_no_events(tmp_path, how):
    run = copy_run(tmp_path)
    for p in (run / "events").iterdir():
        p.unlink()
    if how == "gone":
        (run / "events").rmdir()
    h, _ = judged(run)
    assert parts(h) == ["events/"]


def test_a_run_whose_harness_broke_needs_only_its_harness_record(tmp_path):
    """The harness broke before the cluster was up: no events, exits or fault log to require."""
    run = copy_run(tmp_path)
    for name in ("exits.json", "faults.jsonl"):
        (run / name).unlink()
    for p in (run / "events").iterdir():
        p.unlink()
    (run / "harness.json").write_text(json.dumps({"ending": "error", "schema_version": 1, "run_id": "x"}))
    h, _ = judged(run)
    assert h.integrity == []


@pytest.mark.parametrize("expect", [{"optional": ["record_integrity"]}, {"relax": {"record_integrity": "a story"}}])
def test_no_scenario_can_relax_the_record_integrity(expect):
    from chaosbench.scenario import ScenarioError
    from chaosbench.scenario.loader import parse_scenario
    data = {"name": "x", "trainer": {"config": "tiny"}, "expect": {"reaches_step": 10, **expect}}
    with pytest.raises(ScenarioError, match="record_integrity"):
        parse_scenario(data, source="x.yaml")
