"""bench/recovery.py --previous: the tuned case with and without rejoin_at_once, side by side. No timing."""
from argparse import Namespace

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def bench():
    yield from import_bench("recovery")


def _args(previous=False):
    return Namespace(faults=["kill"], rdzv=["etcd-v3"], stock_pause=False, skip_stock=True, cold=False,
                     polling=False, trainer_defaults=False, previous=previous)


def test_previous_adds_the_tuned_case_without_rejoin_at_once(bench):
    assert [c.kind for c in bench._cases(_args())] == ["tuned"]
    assert [c.kind for c in bench._cases(_args(previous=True))] == ["tuned", "tuned-previous"]
    assert bench.TUNED_RDZV["rejoin_at_once"] == 1
    assert bench.PREVIOUS_RDZV == {k: v for k, v in bench.TUNED_RDZV.items() if k != "rejoin_at_once"}


def test_the_ratio_line_compares_the_same_backend_and_fault(bench):
    med = lambda total, rdzv: {"detection_s": 0.05, "rendezvous_s": rdzv, "restore_s": 0.06,  # noqa: E731
                               "first_step_s": 0.03, "total_s": total}
    done = [bench.summarize([bench.Rep(case="tuned trainer, kill", rdzv="etcd-v3")]),
            bench.summarize([bench.Rep(case="tuned, previous, kill", rdzv="etcd-v3")]),
            bench.summarize([bench.Rep(case="tuned trainer, kill", rdzv="c10d-links")])]
    done[0].med, done[1].med, done[2].med = med(0.3, 0.15), med(0.5, 0.35), med(0.3, 0.15)
    lines = bench.previous_ratios(done)
    assert lines == ["# tuned trainer, kill on etcd-v3: 0.500 s previous -> 0.300 s (1.67x); detection 0.050->0.050 "
                     "rendezvous 0.350->0.150 restore 0.060->0.060 first_step 0.030->0.030"]


@pytest.fixture(scope="module")
def split():
    yield from import_bench("recovery_split")


def test_the_rendezvous_phase_splits_by_the_survivor_agents_log_and_adds_up(split, tmp_path):
    import time
    base = time.mktime((2026, 11, 28, 9, 41, 7, 0, 0, -1))      # local time, as torch's glog lines are
    log = tmp_path / "node-0.log"
    log.write_text(
        "I1128 09:41:06.900000 1 api.py:1] [default] Worker group FAILED. earlier round: will restart worker group\n"
        "2026-11-28 09:41:07,262 chaosbench.rendezvous.links INFO link to x closed\n"
        "I1128 09:41:07.300000 1 api.py:941] [default] Worker group FAILED. 10/10 attempts left; will restart worker group\n"
        "I1128 09:41:07.320000 1 api.py:706] [default] Rendezvous'ing worker group\n"
        "I1128 09:41:07.370000 1 api.py:552] [default] Rendezvous complete for workers. Result:\n"
        "I1128 09:41:07.900000 1 api.py:706] [default] Rendezvous'ing worker group\n")
    out = split.split(log, fault_ts=base, sign_ts=base + 0.25, first_new_ts=base + 0.42)
    assert out == {"notice_s": 0.05, "stop_s": 0.02, "round_s": 0.05, "start_s": 0.05}
    assert sum(out.values()) == pytest.approx(0.42 - 0.25)
    assert split.split(tmp_path / "none.log", base, base, base) == dict.fromkeys(split.SPLIT)
