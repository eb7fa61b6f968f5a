"""oom_killed_worker: named from the kernel's count in memory_pressure's heal record and the node's log,
silent without that count."""
import json
from datetime import datetime, timezone

import pytest

from chaosbench.diagnosis import diagnose

T0 = 1795494153.0   # the injection


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


LOG = [  # node-1's log around the kill, as docker logs --timestamps writes torchrun's lines
    (T0 - 5, "I1124 04:22:30.000000 7 torch/distributed/elastic/agent/server/api.py:552]   restart_count=0"),
    (T0 + 2.0, "E1124 04:22:38.345000 7 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
               "(exitcode: -9) local_rank: 0 (pid: 25) of binary: /opt/venv/bin/python"),
    (T0 + 2.0, "I1124 04:22:38.346000 7 torch/distributed/elastic/agent/server/api.py:941] [default] Worker "
               "group FAILED. 10/10 attempts left; will restart worker group"),
]


def run_dir(tmp_path, heal_params=None, fault="memory_pressure", log=LOG, heal=True):
    d = tmp_path / "run"
    (d / "logs").mkdir(parents=True)
    records = [{"ts": T0, "id": "f1", "fault": fault, "action": "inject", "target": "node-1",
                "params": {"node": "node-1", "mb": 300, "fraction": None}}]
    if heal:
        records.append({"ts": T0 + 15, "id": "f1", "fault": fault, "action": "heal", "target": "node-1",
                        "params": {"node": "node-1", "mb": 300, "fraction": None, "limit_mb": 300, "held_mb": 900,
                                   **(heal_params if heal_params is not None else {"oom_kills": 1,
                                                                                    "docker_oom_events": 1})}})
    (d / "faults.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "logs" / "node-1.log").write_text("".join(f"{stamp(ts)} {text}\n" for ts, text in log))
    (d / "result.json").write_text(json.dumps({"recoveries": [{"fault_id": "f1", "total_s": 3.07}]}))
    return d


def finding(d):
    found = [f for f in diagnose(d).findings if f.rule == "oom_killed_worker"]
    assert len(found) <= 1
    return found[0] if found else None


def test_names_the_node_the_limit_the_fault_the_sigkill_and_the_restart(tmp_path):
    f = finding(run_dir(tmp_path))
    assert f.title == ("node-1: the kernel OOM-killed a worker (memory limit 300 MiB set by memory_pressure f1); "
                       "the worker exited by SIGKILL and its agent restarted it.")
    assert f.severity == "warning" and "3.1 s" in f.effect and f.fix
    counted, sigkill, restart = f.evidence
    assert counted.source == "faults.jsonl" and "OOM kills counted by the kernel: 1" in counted.text
    assert sigkill.source == "logs/node-1.log:2" and "exitcode: -9" in sigkill.text
    assert restart.source == "logs/node-1.log:3" and "will restart worker group" in restart.text


@pytest.mark.parametrize("params", [
    {"oom_kills": 0, "docker_oom_events": 0},   # the squeeze killed nothing
    {"oom_kills": None, "docker_oom_events": 0},
    {"oom_kills": None},                        # nothing could be read
    {},                                          # an older record without the count
    {"oom_kills": True},                         # not a count
])
def test_silent_without_a_kill_the_kernel_counted(tmp_path, params):
    assert finding(run_dir(tmp_path, params)) is None


def test_the_cgroup_count_wins_over_dockers_events(tmp_path):
    assert finding(run_dir(tmp_path, {"oom_kills": 0, "docker_oom_events": 2})) is None
    assert finding(run_dir(tmp_path / "b", {"oom_kills": None, "docker_oom_events": 2})).title.startswith(
        "node-1: the kernel OOM-killed 2 processes")


def test_silent_without_a_heal_record(tmp_path):
    assert finding(run_dir(tmp_path, heal=False)) is None


def test_silent_for_another_fault_with_a_count(tmp_path):
    assert finding(run_dir(tmp_path, fault="kill_worker")) is None


def test_claims_no_sigkill_the_log_does_not_show(tmp_path):
    # the SIGKILL came before the squeeze (an earlier crash), and the worker's exit after it was code 1
    log = [(T0 - 30, LOG[1][1]), (T0 + 2, LOG[1][1].replace("exitcode: -9", "exitcode: 1")), LOG[2]]
    f = finding(run_dir(tmp_path, log=log))
    assert f.title == "node-1: the kernel OOM-killed a worker (memory limit 300 MiB set by memory_pressure f1)."
    assert [e.source for e in f.evidence] == ["faults.jsonl"]


def test_claims_no_restart_the_log_does_not_show(tmp_path):
    f = finding(run_dir(tmp_path, log=LOG[:2]))
    assert f.title.endswith("the worker exited by SIGKILL.")
