import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from chaosbench import instrument as cb
from chaosbench.instrument import inject
from chaosbench.jsonl import read_jsonl

torch = pytest.importorskip("torch")


class Harness:
    """The harness's side of the contract, as a test writes it."""

    def __init__(self, root):
        self.ev = root / "ev"
        self.dir = self.ev / "inject"
        self.dir.mkdir(parents=True)

    def command(self, fid, fault, rank=1, at_step=None, run_id="r1", **params):
        body = {"v": 1, "id": fid, "fault": fault, "run_id": run_id, "rank": rank, "at_step": at_step,
                "params": params}
        tmp = self.dir / f"{fid}.json.tmp"
        tmp.write_text(json.dumps(body))
        os.rename(tmp, self.dir / f"{fid}.json")

    def events(self):
        path = self.ev / "events-node-1-local0.jsonl"
        return read_jsonl(path) if path.exists() else []

    def marker(self, fid):
        path = self.dir / f"{fid}.fired"
        return json.loads(path.read_text()) if path.exists() else None


def _env(root, rank=1):
    return {"CHAOSBENCH_EVENTS_DIR": str(root / "ev"), "CHAOSBENCH_NODE": "node-1", "CHAOSBENCH_RUN_ID": "r1",
            "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2"}


@pytest.fixture
def h(tmp_path, monkeypatch):
    for k, v in _env(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cb, "_writer", None)
    monkeypatch.setattr(inject, "_key", None)
    monkeypatch.setattr(inject, "_watched", {"model": None, "optimizer": None, "digest_every": None})
    return Harness(tmp_path)


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


@pytest.mark.parametrize("kind,etype,text", [
    ("cuda", RuntimeError, "CUDA error: an illegal memory access was encountered"),
    ("nccl", torch.distributed.DistBackendError, "NCCL error in: .*ProcessGroupNCCL.cpp:1970, unhandled system"),
    ("exception", RuntimeError, "chaosbench worker_error: injected exception")])
def test_worker_error_raises_out_of_step_after_its_event_and_only_once(h, kind, etype, text):
    h.command("f1", "worker_error", kind=kind)
    with pytest.raises(etype, match=text) as err:
        cb.step(7, loss=0.5)
    assert type(err.value) is etype
    for s in (8, 9):
        cb.step(s)                       # fired once: later steps go on
    got = h.events()
    assert [e["event"] for e in got] == ["step", "fault_fired", "step", "step"]
    fired = got[1]
    assert (fired["fault_id"], fired["fault"], fired["step"], fired["rank"]) == ("f1", "worker_error", 7, 1)
    assert fired["detail"] == f"{etype.__name__}: {str(err.value).splitlines()[0]}"
    assert {k: v for k, v in h.marker("f1").items() if k != "ts"} == {"rank": 1, "step": 7, "pid": os.getpid()}


def test_cuda_error_text_is_the_real_one(h):
    h.command("f1", "worker_error", kind="cuda")
    with pytest.raises(RuntimeError) as err:
        cb.fault_point(1)
    assert str(err.value).splitlines() == [
        "CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"]


def test_at_step_is_the_first_step_at_or_after_it(h):
    h.command("f1", "worker_error", at_step=10)
    for s in range(1, 10):
        cb.fault_point(s)
    assert h.marker("f1") is None and h.events() == []
    with pytest.raises(RuntimeError):
        cb.fault_point(12)               # steps 10 and 11 were never seen (log_every, a restart)
    assert h.events()[0]["step"] == 12


def test_other_ranks_and_stale_runs_are_ignored_while_ours_fires(h):
    h.command("f1", "worker_error", rank=0)
    h.command("f2", "worker_error", run_id="an-earlier-run")
    h.command("f3", "worker_error", rank=1, at_step=5)
    for s in range(1, 5):
        cb.fault_point(s)
    with pytest.raises(RuntimeError):
        cb.fault_point(5)
    assert [e["fault_id"] for e in h.events()] == ["f3"]
    assert h.marker("f1") is None and h.marker("f2") is None and h.marker("f3")["step"] == 5


def test_several_due_commands_fire_in_order_and_a_raise_leaves_the_rest_pending(h, tmp_path):
    h.command("f2", "worker_error", at_step=1)
    h.command("f1", "corrupt_replica")   # no model watched: refused, then f2 raises
    with pytest.raises(RuntimeError):
        cb.fault_point(3)
    h.command("f3", "worker_error", kind="cuda")
    with pytest.raises(RuntimeError, match="CUDA"):
        cb.fault_point(4)
    assert [(e["event"], e["fault_id"]) for e in h.events()] == [
        ("fault_refused", "f1"), ("fault_fired", "f2"), ("fault_fired", "f3")]


def test_once_only_across_incarnations_and_racing_processes(h):
    h.command("f1", "worker_error")
    first = inject.Injector(str(h.ev), "r1", 1, cb.emit)
    second = inject.Injector(str(h.ev), "r1", 1, cb.emit)   # e.g. a restarted worker still starting up
    due1, due2 = first.poll(3), second.poll(3)
    assert [c["id"] for c in due1] == [c["id"] for c in due2] == ["f1"]
    with pytest.raises(RuntimeError):
        first.fire(due1[0], 3)
    second.fire(due2[0], 3)              # the marker exists: nothing happens
    later = inject.Injector(str(h.ev), "r1", 1, cb.emit)   # an incarnation after the restart
    assert later.poll(4) == [] and second.poll(4) == []
    assert [e["event"] for e in h.events()] == ["fault_fired"]


def _claim(dir_, q):
    q.put(inject.Injector(dir_, "r1", 1, lambda *a, **k: None).claim(
        {"id": "race", "fault": "gil_hang"}, 1))


def test_exactly_one_of_many_racing_processes_claims_a_fault(h):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(h.ev), q)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sorted(q.get(timeout=5) for _ in procs) == [False] * 7 + [True]


def test_partial_and_malformed_files_are_skipped_with_one_warning(h, capsys):
    (h.dir / "f1.json.tmp").write_text('{"v": 1, "id": "f1", "fau')          # still being written
    (h.dir / "f2.json").write_text('{"v": 1, "id": "f2", "fault": "work')    # written in place, torn
    (h.dir / "f4.json").write_text(json.dumps({"v": 1, "id": "other", "fault": "worker_error", "run_id": "r1",
                                               "rank": 1, "at_step": None, "params": {}}))
    (h.dir / "f5.json").write_text(json.dumps({"v": 1, "id": "f5", "fault": "unplug", "run_id": "r1",
                                               "rank": 1, "at_step": None, "params": {}}))
    for s in range(1, 6):
        cb.step(s)
    err = capsys.readouterr().err
    assert err.count("ignoring fault command") == 3, err
    assert "f2.json: unreadable: JSONDecodeError" in err and "does not match the file name" in err
    assert "'unplug' is not one of worker_error, gil_hang, corrupt_replica" in err
    assert not list(h.dir.glob("*.fired"))
    time.sleep(0.01)                     # the writer finishes f2 in place: it is read again and fires
    (h.dir / "f2.json").write_text(json.dumps({"v": 1, "id": "f2", "fault": "worker_error", "run_id": "r1",
                                               "rank": 1, "at_step": None, "params": {"kind": "exception"}}))
    with pytest.raises(RuntimeError, match="injected exception"):
        cb.step(6)
    assert capsys.readouterr().err.count("ignoring") == 0


def test_no_op_without_the_events_dir(h, monkeypatch):
    h.command("f1", "worker_error", rank=1)
    monkeypatch.delenv("CHAOSBENCH_EVENTS_DIR")
    model = _model()
    cb.watch(model, digest_every=1)
    assert cb.fault_point(1) is None and cb.step(2) is None
    assert h.marker("f1") is None and not (h.ev / "events-node-1-local0.jsonl").exists()


def test_a_quiet_directory_costs_one_stat_and_a_same_tick_rename_is_still_seen(h, monkeypatch):
    h.command("f1", "worker_error", at_step=10_000)
    listings = []
    real = os.listdir
    monkeypatch.setattr(inject.os, "listdir", lambda p: listings.append(p) or real(p))
    cb.fault_point(1)
    old = time.time_ns() - 10 * 10**9            # an mtime old enough to trust
    os.utime(h.dir, ns=(old, old))
    cb.fault_point(2)
    n = len(listings)
    for s in range(3, 500):
        cb.fault_point(s)
    assert len(listings) == n                    # nothing changed: no listing at all
    # a command renamed in within the same mtime tick as the last listing: the mtime says nothing
    # changed, yet a listing taken that soon after the mtime is not trusted
    now = time.time_ns()
    os.utime(h.dir, ns=(now, now))
    cb.fault_point(500)
    h.command("f2", "worker_error", kind="cuda")
    os.utime(h.dir, ns=(now, now))
    with pytest.raises(RuntimeError, match="CUDA"):
        cb.fault_point(501)


def test_a_withdrawn_command_does_not_fire(h):
    h.command("f1", "worker_error", at_step=10)
    cb.fault_point(1)
    (h.dir / "f1.json").unlink()
    for s in range(10, 13):
        cb.fault_point(s)
    assert h.events() == [] and h.marker("f1") is None


def test_corrupt_replica_param_flips_one_element_of_the_watched_model(h):
    model, twin = _model(), _model()
    cb.watch(model)
    h.command("f1", "corrupt_replica", target="param", bits=2, seed=7)
    cb.step(4)
    assert cb.digest(model) != cb.digest(twin)
    diff = [(n, (p != q).nonzero().tolist()) for (n, p), (_, q) in
            zip(model.named_parameters(), twin.named_parameters()) if (p != q).any()]
    assert len(diff) == 1 and len(diff[0][1]) == 1, diff
    name, [idx] = diff[0]
    fired = h.events()[1]
    assert fired["event"] == "fault_fired" and fired["step"] == 4
    assert f"of {name}{idx} (float32)" in fired["detail"] and "->" in fired["detail"]
    # seeded with seed + rank: the same draw again on an identical model, for the same rank
    again = _model()
    assert inject.flip_bits(list(again.named_parameters()), 2, 7 + 1) == fired["detail"]
    assert torch.equal(again.weight, model.weight) and torch.equal(again.bias, model.bias)


def test_corrupt_replica_grad_changes_only_the_next_update(h):
    model, twin = _model(), _model()
    opt, opt_twin = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    cb.watch(model, opt)
    h.command("f1", "corrupt_replica", target="grad", bits=1, seed=3)
    cb.fault_point(5)
    assert torch.equal(model.weight, twin.weight) and [e["event"] for e in h.events()] == []
    x = torch.randn(8, 4)
    for step in (6, 7):
        for m, o in ((model, opt), (twin, opt_twin)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
        if step == 6:
            delta = [(p - q).abs() for p, q in zip(model.parameters(), twin.parameters())]
            assert sum(int((d > 0).sum()) for d in delta) == 1          # one element's update differs
    fired = h.events()
    assert [e["event"] for e in fired] == ["fault_fired"]               # once: the hook is gone
    assert fired[0]["step"] == 5 and "of grad of " in fired[0]["detail"]
    assert "in the update after step 5" in fired[0]["detail"]
    assert not opt._optimizer_step_pre_hooks


def test_corrupt_replica_is_refused_with_the_fix_when_nothing_is_watched(h):
    h.command("f1", "corrupt_replica", target="param", bits=1, seed=0)
    cb.fault_point(1)
    cb.fault_point(2)
    model = _model()
    cb.watch(model)                      # too late for f1; f2 wants the optimizer
    h.command("f2", "corrupt_replica", target="grad", bits=1, seed=0)
    cb.fault_point(3)
    cb.watch(_model())                   # dropped at once: the weak reference dies with it
    h.command("f3", "corrupt_replica", target="param", bits=1, seed=0)
    cb.fault_point(4)
    got = h.events()
    assert [(e["event"], e["fault_id"], e["step"]) for e in got] == [
        ("fault_refused", "f1", 1), ("fault_refused", "f2", 3), ("fault_refused", "f3", 4)]
    assert "call cb.watch(model, optimizer)" in got[0]["reason"]
    assert "target grad needs the optimizer: call cb.watch(model, optimizer)" in got[1]["reason"]
    assert "no model to corrupt" in got[2]["reason"]
    assert all(h.marker(f) for f in ("f1", "f2", "f3"))


def test_step_adds_param_digest_every_k_steps(h):
    model = _model()
    cb.watch(model, digest_every=3)
    for s in range(1, 7):
        cb.step(s)
    got = {e["step"]: e.get("param_digest") for e in h.events()}
    assert got == {1: None, 2: None, 3: cb.digest(model), 4: None, 5: None, 6: cb.digest(model)}
    with pytest.raises(ValueError, match="digest_every=0"):
        cb.watch(model, digest_every=0)


GIL_JOB = textwrap.dedent("""
    import os, signal, sys, threading, time
    from chaosbench import instrument as cb
    if os.environ.get("JOB_SIGTERM_HANDLER"):   # a job that saves and leaves on SIGTERM
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))
    def say(what):   # one write() per line: the two threads' lines never interleave
        os.write(1, f"{what} {time.time()}\\n".encode())
    def beat():
        while True:
            say("beat")
            time.sleep(0.02)
    threading.Thread(target=beat, daemon=True).start()
    time.sleep(0.5)
    say("before")
    cb.fault_point(1)
    say("after")
    time.sleep(0.5)
""")


def _gil_job(tmp_path, hold_s, handler=False):
    harness = Harness(tmp_path)
    harness.command("g1", "gil_hang", hold_s=hold_s)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CHAOSBENCH_")}, **_env(tmp_path),
           "PYTHONPATH": os.getcwd(), **({"JOB_SIGTERM_HANDLER": "1"} if handler else {})}
    proc = subprocess.Popen([sys.executable, "-c", GIL_JOB], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return harness, proc


def test_gil_hang_stops_every_thread_for_hold_s_then_the_job_goes_on(tmp_path):
    harness, proc = _gil_job(tmp_path, 1.0)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = [(w, float(t)) for w, t in (line.split() for line in out.splitlines())]
    fired = harness.events()[0]
    after = next(t for w, t in lines if w == "after")
    beats = [t for w, t in lines if w == "beat"]
    assert fired["detail"] == "holding the GIL for 1 s" and 1.0 <= after - fired["ts"] < 5
    assert len([t for t in beats if t < fired["ts"]]) >= 3                      # the heartbeat ran
    assert not [t for t in beats if fired["ts"] + 0.05 < t < after - 0.01]      # then stopped
    assert len([t for t in beats if t > after]) >= 3                            # and came back


@pytest.mark.parametrize("handler", [False, True], ids=["default-sigterm", "job-sigterm-handler"])
def test_gil_hang_until_killed_survives_sigterm_and_ends_with_sigkill(tmp_path, handler):
    harness, proc = _gil_job(tmp_path, None, handler)
    try:
        assert "fired at step 1: holding the GIL until killed" in proc.stderr.readline()
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None                       # SIGTERM only set a flag
        proc.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
    out = proc.stdout.read()
    fired = harness.events()[0]["ts"]
    assert "after" not in out and max(float(line.split()[1]) for line in out.splitlines()) < fired + 0.05


def test_sigterm_during_a_bounded_hang_takes_effect_when_it_ends(tmp_path):
    harness, proc = _gil_job(tmp_path, 1.5)
    t0 = time.monotonic()
    assert "holding the GIL for 1.5 s" in proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert time.monotonic() - t0 >= 1.3 and "after" not in proc.stdout.read()
