"""reordering_jitter: a packet fault's reordering jitter failed max_slowdown, named from the failed check,
the inject record and the node's TCP counters; silent where any of that evidence is missing or says
otherwise."""
import json

import pytest

from chaosbench.diagnosis import diagnose

T0 = 1795825736.6
TCP = {"segments_sent": 5200, "segments_retransmitted": 640, "reordering_seen_sack": 212,
       "reordering_seen_timestamps": 0, "spurious_retransmits_dsack": 590, "retransmit_timeouts": 4,
       "congestion_control": "bbr"}
SLOW = {"name": "max_slowdown:f1", "status": "failed", "expected": "step rate during the fault >= rate before it / 12",
        "observed": 12.99, "fault_id": "f1",
        "reason": "f1 (packet_fault) on node-0->data: 0.66 steps/s over its 6.1 s (injection to healed) vs 8.53 "
                  "steps/s over the 2.8 s before it: x12.99 slower (bound x12)"}


def run_dir(tmp_path, inject=None, tcp=TCP, check=SLOW):
    d = tmp_path / "run"
    d.mkdir()
    params = {"node": "node-0", "to": "data", "delay_ms": 50.0, "jitter_ms": 20.0, "keep_order": False,
              "mechanism": {"delay_ms": "nfqueue", "jitter_ms": "nfqueue"}, "tcp_congestion_control": "bbr",
              **(inject or {})}
    records = [{"ts": T0, "id": "f1", "fault": "packet_fault", "action": "inject", "target": "node-0->data",
                "params": params},
               {"ts": T0 + 6.2, "id": "f1", "fault": "packet_fault", "action": "heal", "target": "node-0->data",
                "params": {**{k: v for k, v in params.items() if k not in ("mechanism", "tcp_congestion_control")},
                           "tcp": tcp}}]
    (d / "faults.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "result.json").write_text(json.dumps({"checks": [check] if check else []}))
    return d


def finding(d):
    found = [f for f in diagnose(d).findings if f.rule == "reordering_jitter"]
    assert len(found) <= 1
    return found[0] if found else None


def test_names_the_fault_the_jitter_the_retransmits_the_congestion_control_and_the_bound(tmp_path):
    f = finding(run_dir(tmp_path))
    assert f.title == ("f1 (packet_fault on node-0->data): its 50 ± 20 ms jitter gave each packet its own delay, so "
                       "packets overtook each other and TCP took the reordering for loss (640 of 5200 segments "
                       "retransmitted, 12.3 %; congestion control bbr): x12.99 slower, bound x12.")
    assert f.severity == "cause" and "keep_order: true" in f.fix and "x2.68-2.86" in f.effect
    assert f.measured.startswith("docs/below-the-process.md")
    inject, counters, check = f.evidence
    assert "keep_order off" in inject.text and "bbr" in inject.text and inject.ts == T0
    assert "reordering seen 212 times" in counters.text and "590 retransmits" in counters.text
    assert check.source == "result.json" and "x12.99 slower" in check.text


@pytest.mark.parametrize("inject, tcp, check", [
    ({"keep_order": True}, TCP, SLOW),                                   # the order was kept
    ({"reorder_pct": 25}, TCP, SLOW),                                    # reordering was the fault's point
    ({"jitter_ms": None}, TCP, SLOW),                                    # no jitter
    ({}, TCP, {**SLOW, "status": "passed"}),                             # the bound held
    ({}, TCP, None),                                                     # no bound asked for
    ({}, None, SLOW),                                                    # counters not read: effect unshown
    ({}, {**TCP, "reordering_seen_sack": 0, "spurious_retransmits_dsack": 0}, SLOW),   # TCP saw no reordering
])
def test_says_nothing_without_its_evidence(tmp_path, inject, tcp, check):
    assert finding(run_dir(tmp_path, inject, tcp, check)) is None
