"""CI rerun policy: only the tests named in KNOWN_FLAKY get one rerun (no blanket --reruns), and a
rerun is recorded in the JUnit file as the test's `reruns` property, next to the reason it is allowed.

A test joins this list with the reason it is timing-sensitive; a test that needs a rerun and is not
listed fails CI. Remove an entry once its cause is fixed.
"""
from __future__ import annotations

import os
import signal

import pytest

# A run started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every process the tests start: the Ctrl-C tests would then time out
# instead of testing anything. Restore Python's own handler; children get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# nodeid suffix -> why a second attempt is allowed
KNOWN_FLAKY = {
    "tests/services/test_etcd_server.py::test_lifecycle_restart_keeps_data_pause_resume":
        "a SIGSTOPped etcd answered /health once in a fresh-clone -n 2 run (2026-11-24), 0 of 12 runs alone; "
        "cause not established: the assertion now prints the process state and the answer",
    "tests/rendezvous/test_etcd_v3_backend.py::test_hung_etcd_gives_a_clear_error":
        "its etcd hang is timed on a 2-core machine shared by two test workers (one rerun seen, then 8/8 alone)",
    "tests/byo/test_verdicts.py::test_a_job_that_hangs_after_node_loss_is_reported_stuck_in_its_phase":
        "three torchrun nodes must reach training before the 30-s stuck window ends and the verdict is timed "
        "against it; on a loaded 2-core machine they may not (no rerun needed in the fresh-clone runs of "
        "2026-11-23/25; the one failure of 2026-11-25 was the doctor counting a line read at teardown, fixed)",
    "tests/byo/test_verdicts.py::test_a_frozen_node_under_etcd_v3_is_found_by_the_agents_and_the_job_recovers_without_a_health_check":
        "fresh-clone -n 2 run of 2026-11-25: node-1's agent found the frozen node-2 silent on its link and to etcd "
        "(1.1 s) and revoked its lease, yet never restarted its workers, and node-0 never saw its link go "
        "silent; the run stopped as stuck at 60 s. Cause found: the keep-alive sync dropped the dead node from the "
        "state before the monitor loop looked (fixed in rendezvous/watched.py, tests/rendezvous/test_liveness.py); "
        "the rerun stays until a CI confirms it",
    "tests/rendezvous/test_links.py::test_c10d_links_a_reset_link_to_a_live_agent_relinks_and_the_node_is_alive_again":
        "fresh-clone -n 2 run of 2026-11-25, with other test runs loading the machine beside it: the reset "
        "link's peer was not seen dead within 10 s; passed in every run before; cause not established",
    "examples/torchft/scenarios/node_loss.yaml::torchft_node_loss":
        "torchft 0.2.0's own bug: a survivor whose peer dies during an all-reduce dies on `assert fut._fut` in "
        "torchft/ddp.py _comm_hook (docs/frameworks.md, 'Found on the way'); it depends on where in the step "
        "the kill lands: 4 of 9 docker runs of torchft jobs on 2026-11-28, none of this example's node_loss "
        "runs (3 of 3 passed, the fresh-clone chaos suite included); 0 of 6 runs of this example's node_loss and "
        "worker_crash on docker on 2026-12-07 (6 of 6 passed). The reference trainer no longer uses the DDP "
        "wrapper (trainer/torchft_train.py allreduce_grads: 3 of 3 reference node losses passed, one of them "
        "through a failed all-reduce); this example keeps it as torchft's docs teach. Leaves when torchft fixes it. "
        "Also ours, open: in the fresh-clone CI of 15e14db (2026-12-07) the first try failed quorum_recovery with "
        "'node-1 resumed at step 129 while the world had reached step 129' (1 step lost, a false failure): the "
        "healed group's observed heal_start (step 128) was stamped after the survivor's step 129, the step both "
        "trained together; lineage.resume_point must not trust the order of two watchers' observed stamps",
    "scenarios/oom_worker.yaml::oom_worker":
        "the memory_pressure ballast's second OOM kill: in a fresh-clone CI of 2026-11-25 the kernel killed the "
        "worker and, 11 ms later, the agent (pt_elastic): the ballast's write went on charging before its "
        "watcher thread ran on the loaded cores; node-1 exited 137 and the world went 2 -> 1 (passed in every "
        "run before it). The ballast now also reads the counter after every 256-KiB chunk in its writing thread "
        "(docker_memory.py); it happened again in the CI of 0157d1b (2026-11-26). Since then the workers "
        "and the ballast get oom_score_adj 1000, so a second kill takes the ballast, never the agent "
        "(tests/cluster/test_oom_order_docker.py holds both orders in a real cgroup); kept until a CI confirms it",
    "tests/rendezvous/test_rendezvous_torchrun.py::test_join_leave_replace[etcd]":
        "torch's legacy etcd (v2) rendezvous: failed once in a local -n 2 run beside the full rendezvous "
        "suite (2026-11-23), passed alone; its output was not kept, cause not established",
    "tests/trainer/test_elastic_node_loss.py::test_node_loss_resumes_at_world_size_1_from_last_checkpoint":
        "under -n 2 load node-1 missed the first round and the second one hung on the shared agent store "
        "(pytorch#135712; the test now sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1); kept until CI confirms it",
}


# Under `-n 2` the long tests (docker, then integration: 5-100 s each) go first and the ~1200 unit
# tests (mostly under 0.1 s) last, so with --dist worksteal the worker that finishes first takes
# short tests from the other's queue instead of idling while the other runs one long test to the end.
# A stable sort: within a class, collection order; every worker sorts the same way, as xdist requires.
def _long_first(item) -> int:
    return 0 if item.get_closest_marker("docker") else 1 if item.get_closest_marker("integration") else 2


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_long_first)
    for item in items:
        reason = next((r for k, r in KNOWN_FLAKY.items() if item.nodeid.endswith(k)), None)
        if reason is not None and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=1))
            item.user_properties.append(("known_flaky", reason))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    # pytest-rerunfailures sets `rerun` (earlier attempts) on the final report; JUnit drops the
    # attempts themselves, so name them on the final teardown report (JUnit reads properties there).
    attempts = getattr(report, "rerun", 0)
    if attempts and report.when == "teardown" and report.outcome != "rerun" and \
            not any(k == "reruns" for k, _ in report.user_properties):
        report.user_properties.append(("reruns", str(attempts)))


# Randomised trials (clean-up under signals, fuzzing, crash-consistency) record how many ran with
# record_property("trials", "..."): shown in the JUnit file and in one block at the end of the run.
def pytest_terminal_summary(terminalreporter):
    lines = [f"{r.nodeid}: {v}" for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
             if r.when == "call" for k, v in r.user_properties if k == "trials"]
    if lines:
        terminalreporter.section("randomised trials")
        for line in lines:
            terminalreporter.write_line(line)
    _mutation_summary(terminalreporter)


def _mutation_summary(terminalreporter):
    """The mutation suite (tests/mutation) records each (operator, run) outcome as the `mutation`
    property: one line sums up what ran, then the survivors by operator."""
    import json
    props = [(k, json.loads(v)) for key in ("passed", "failed", "skipped") for r in terminalreporter.stats.get(key, [])
             if r.when == "call" for k, v in r.user_properties if k in ("mutation", "mutation_composed")]
    rows = [v for k, v in props if k == "mutation"]
    if not rows:
        return
    count = {o: sum(r["outcome"] == o for r in rows) for o in ("killed", "n/a", "survivor", "crashed")}
    line = (f"mutation: {len({r['operator'] for r in rows})} operators x {len({r['run'] for r in rows})} runs = "
            f"{len(rows)} pairs, {count['killed']} killed, {count['n/a']} not applicable, "
            f"{count['survivor']} survivors" + (f", {count['crashed']} crashed" if count["crashed"] else ""))
    terminalreporter.section("mutation suite")
    terminalreporter.write_line(line)
    for v in (v for k, v in props if k == "mutation_composed"):
        terminalreporter.write_line(f"mutation, composed: {v['judged']} histories judged, {v['survivors']} survivors"
                                    + (f", {v['crashed']} crashed" if v["crashed"] else ""))
    by_op: dict[str, list[str]] = {}
    for r in rows:
        if r["outcome"] in ("survivor", "crashed"):
            by_op.setdefault(r["operator"], []).append(r["run"] + (" (crashed)" if r["outcome"] == "crashed" else ""))
    for op, runs in sorted(by_op.items()):
        terminalreporter.write_line(f"  {op}: {', '.join(sorted(runs))}")


def pytest_runtest_setup(item):
    """With CI set, a docker test whose daemon or images are unusable fails instead of skipping: a
    broken docker must turn CI red, not quietly shorter."""
    if item.get_closest_marker("docker") is None or \
            os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    from chaosbench.cluster.docker.cli import docker_unusable
    why = docker_unusable()
    if why is not None:
        pytest.fail(f"CI is set and this test needs docker: {why}", pytrace=False)
