"""The GPU path, measured on one machine with one GPU (docs/gpu.md holds the figures):

- the reference trainer (tiny and medium_50mb) under torchrun on NCCL/CUDA and, in the same call, on
  the same machine's CPU (gloo): step time, checkpoint save stall per tier, and a worker SIGKILLed
  mid-run that torchrun restarts (restore tier, step, time from the kill to the first step after);
  the same kill once more under warm start (trainer.warm_start, what the cluster backends run);
- bring-your-own jobs: examples/byo_ddp (CPU/gloo by design) and a default-settings NCCL DDP job;
- two NCCL ranks on one GPU (refused) and a real two-rank hang on one GPU: NCCL sees two hosts
  (NCCL_HOSTID per rank), rank 1 goes silent, rank 0's all-reduce waits: when the watchdog fires and
  when the process ends, per NCCL setting, against gloo;
- the messages real CUDA failures carry.

    python bench/gpu_probe.py [--out DIR] [--budget 270]     # bench/gpu_path.sh wraps it

Everything runs as plain torchrun processes (`--standalone`: c10d on localhost; no docker, no etcd),
so it needs only python, torch, pyyaml and numpy. Without CUDA the GPU cases are reported skipped
and the rest runs (that is how it is tested off the GPU machine). Writes DIR/gpu_probe.json and
DIR/logs.tgz (every case's log, each line stamped with seconds since its start) after every phase.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "GPU_PROBE_SESSION"      # in every child's environment: the final sweep kills only ours
HANG_TIMEOUT_S = 10.0


# -- worker modes (run under torchrun by the cases below) ----------------------------------------
def byo_worker(steps: int) -> None:
    """A default-settings DDP job on NCCL: what a user's script looks like. PROBE_SAME_GPU=1 puts
    every rank on GPU 0 (what NCCL refuses), instead of cuda:LOCAL_RANK (no such GPU past the first)."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("nccl")
    dev = torch.device("cuda", 0 if os.environ.get("PROBE_SAME_GPU") == "1" else int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=dev)
    t0 = time.time()
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    print(f"byo done: {steps} steps in {time.time() - t0:.3f}s on {torch.cuda.get_device_name(dev)}", flush=True)
    dist.destroy_process_group()


def hang_worker() -> None:
    """Two ranks, one warm all-reduce; then rank 1 goes silent and rank 0's next all-reduce waits.
    PROBE_BACKEND picks nccl (both ranks on GPU 0: each gets its own NCCL_HOSTID, so NCCL sees two
    hosts and talks over sockets instead of refusing a duplicate GPU) or gloo (CPU)."""
    import torch
    import torch.distributed as dist
    backend, rank = os.environ["PROBE_BACKEND"], int(os.environ["RANK"])
    dev = "cpu"
    if backend == "nccl":
        os.environ["NCCL_HOSTID"] = f"probe-host-{rank}"     # read by NCCL at communicator init
        torch.cuda.set_device(0)
        dev = "cuda"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=HANG_TIMEOUT_S))
    t = torch.ones(1024, device=dev)
    dist.all_reduce(t)
    print(f"PROBE warm all-reduce ok: {t[0].item():.0f}", flush=True)
    if rank == 1:
        print("PROBE rank 1 goes silent", flush=True)
        time.sleep(600)
        return
    time.sleep(0.5)                                # rank 1 is past its warm all-reduce
    print("PROBE ISSUED", flush=True)
    t0 = time.time()
    try:
        dist.all_reduce(t, async_op=True).wait()   # blocks here only with TORCH_NCCL_BLOCKING_WAIT=1 (or gloo)
        print("PROBE wait returned; reading the result (as a training loop's loss.item())", flush=True)
        t.sum().item()
        print(f"PROBE RESULT completed after {time.time() - t0:.2f}s (unexpected)", flush=True)
    except Exception as e:   # noqa: BLE001 -- what the job sees is the measurement
        msg = str(e).replace("\n", " ")[:240]
        print(f"PROBE RAISED after {time.time() - t0:.2f}s: {type(e).__name__}: {msg}", flush=True)
        sys.exit(3)


# -- running torchrun with every output line time-stamped -----------------------------------------
class Launch:
    """torchrun (or any command) in its own session; output lines stamped with seconds since start."""

    def __init__(self, cmd: list[str], env: dict, log: Path):
        self.t0 = time.time()
        self.lines: list[tuple[float, str]] = []
        self.log = open(log, "w")
        self.p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True, text=True, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            t = time.time() - self.t0
            self.lines.append((t, line.rstrip("\n")))
            self.log.write(f"{t:8.3f} {line}")
            self.log.flush()
        self.p.wait()
        self.ended_s = time.time() - self.t0    # when it ended, not when a caller got round to wait()

    def wait(self, bound_s: float) -> int | None:
        """Exit status, or None if still running after bound_s (then it is stopped)."""
        try:
            rc = self.p.wait(timeout=max(0.1, bound_s - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            rc = None
            self.p.send_signal(signal.SIGTERM)     # torchrun stops its workers (their own sessions)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.reader.join(timeout=5)
        self.wall_s = round(getattr(self, "ended_s", time.time() - self.t0), 2)
        self.log.close()
        return rc

    def first(self, pattern: str) -> tuple[float, str] | None:
        return next(((t, ln) for t, ln in self.lines if re.search(pattern, ln)), None)


def torchrun_cmd(nproc: int, target: list[str], restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={restarts}", *target]


def events(d: Path) -> list[dict]:
    evs = []
    for f in sorted(d.glob("*.jsonl")):
        for ln in f.read_text(errors="replace").splitlines():
            try:
                evs.append(json.loads(ln))
            except ValueError:
                pass                                 # a line cut by the SIGKILL
    return sorted(evs, key=lambda e: e["ts"])


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return round(xs[len(xs) // 2], 5) if xs else None


# -- cases ---------------------------------------------------------------------------------------
def reference_trainer(out: Path, scratch: Path, name: str, config: str, steps: int, gpu: bool,
                      kill_at_step: int, warm: bool = False, bound_s: float = 120) -> dict:
    """The reference trainer, 1 node x 1 worker; its worker is SIGKILLed once a step >= kill_at_step
    is logged, torchrun (--max-restarts=1) starts it again and it restores and trains to the end."""
    d = scratch / name
    shm = Path("/dev/shm")
    mem_root = shm / "chaosbench-gpu-probe" if shm.is_dir() and os.access(shm, os.W_OK) else d
    evdir, nvme, mem = d / "events", d / "nvme", mem_root / "mem" / name
    for p in (evdir, nvme, mem):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    env = {**os.environ, "CHAOSBENCH_EVENTS_DIR": str(evdir), "CHAOSBENCH_NODE": "gpu-node-0",
           "CHAOSBENCH_RUN_ID": f"gpu-probe-{name}", "PYTHONPATH": str(ROOT)}
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    worker = ["-m", "trainer.train", "--config", config, "--set", f"training.max_steps={steps}",
              "--set", f"checkpoint.nvme_dir={nvme}", "--set", f"checkpoint.memory_dir={mem}"]
    cmd = torchrun_cmd(1, ["-m", "trainer.warm_start", "run", *worker] if warm else worker, restarts=1)
    if warm:
        cmd = [sys.executable, "-m", "trainer.warm_start", "node", "--", *cmd]
    run = Launch(cmd, env, out / f"{name}.log")
    killed_at = victim = None
    while run.p.poll() is None and time.time() - run.t0 < bound_s:
        time.sleep(0.02)
        if killed_at is None:
            late = [e for e in events(evdir) if e["event"] == "step" and e.get("step", 0) >= kill_at_step]
            if late:
                victim = late[-1]["pid"]
                os.kill(victim, signal.SIGKILL)
                killed_at = time.time()
    rc = run.wait(bound_s)
    shutil.rmtree(mem, ignore_errors=True)
    evs = events(evdir)
    steps_ev = [e for e in evs if e["event"] == "step"]
    first_inc = [e for e in steps_ev if e.get("restart_count", 0) == 0]
    after = [e for e in evs if killed_at and e["ts"] > killed_at]
    loaded = next((e for e in after if e["event"] == "checkpoint_loaded"), None)
    next_step = next((e for e in after if e["event"] == "step"), None)
    killed_step = max((e["step"] for e in first_inc), default=None)
    saves: dict = {}
    for e in evs:
        if e["event"] == "checkpoint_saved":
            saves.setdefault(e["tier"], []).append(e)
    joined = run.first(r"joined: rank")
    span = (first_inc[-1]["ts"] - first_inc[5]["ts"]) / (len(first_inc) - 6) if len(first_inc) > 7 else None
    return {
        "config": config, "device": "cuda" if gpu else "cpu", "warm_start": warm, "rc": rc, "wall_s": run.wall_s,
        "backend": (re.findall(r"backend (\w+)", joined[1]) or ["?"])[0] if joined else None,
        "last_step": max((e["step"] for e in steps_ev), default=None), "steps_planned": steps,
        "median_step_time_s": _median([e.get("step_time_s") for e in steps_ev[5:]]),
        "steps_per_s_first_incarnation": round(1 / span, 2) if span else None,
        "saves": {t: {"count": len(v), "bytes": v[-1].get("bytes"),
                      "stall_median_s": _median([e.get("stall_s") for e in v]),
                      "stall_max_s": max((e.get("stall_s") or 0 for e in v), default=None),
                      "total_median_s": _median([e.get("total_s") for e in v])} for t, v in saves.items()},
        "kill": {"at_step_last_logged": killed_step, "pid": victim,
                 "restored": loaded and {k: loaded.get(k) for k in
                                         ("tier", "step", "source", "duration_s", "checksum_ok", "bytes")},
                 "kill_to_checkpoint_loaded_s": round(loaded["ts"] - killed_at, 3) if loaded else None,
                 "kill_to_next_step_s": round(next_step["ts"] - killed_at, 3) if next_step else None,
                 "next_step": next_step and next_step["step"]},
        "fatal": [e.get("error", e.get("reason")) for e in evs if e["event"] == "fatal"][:3],
        "log_tail": [ln for _, ln in run.lines[-4:]],
    }


def byo_cases(out: Path, scratch: Path, gpu: bool) -> dict:
    """Started together (none is timed here): the example job plain and instrumented (CPU/gloo as
    written), a default-settings NCCL DDP job, and two NCCL ranks on one GPU."""
    base = {**os.environ}
    ex = ROOT / "examples" / "byo_ddp"
    args = ["--steps", "20", "--step-time", "0.05"]
    cases = {   # name: (command, env, log); started by the caller, which may pick some
        "byo_example_plain": (torchrun_cmd(2, [str(ex / "train_plain.py"), *args, "--ckpt-dir", str(scratch / "byo-plain")]),
                              base, "byo-example-plain.log"),
        "byo_example_instrumented": (
            torchrun_cmd(2, [str(ex / "train_instrumented.py"), *args, "--ckpt-dir", str(scratch / "byo-instr")]),
            {**base, "PYTHONPATH": str(ROOT), "CHAOSBENCH_EVENTS_DIR": str(scratch / "byo-instr-events"),
             "CHAOSBENCH_NODE": "gpu-node-0", "CHAOSBENCH_RUN_ID": "gpu-probe-byo"},
            "byo-example-instrumented.log"),
    }
    if gpu:
        byo = [__file__, "--mode", "byo"]
        cases["byo_nccl"] = (torchrun_cmd(1, byo), base, "byo-nccl.log")
        cases["byo_nccl_two_ranks_local_rank_gpu"] = (torchrun_cmd(2, byo), base, "byo-two-ranks-local-rank-gpu.log")
        cases["two_ranks_one_gpu"] = (torchrun_cmd(2, byo), {**base, "PROBE_SAME_GPU": "1"}, "two-ranks-one-gpu.log")
        cases["trainer_two_ranks_one_gpu"] = (
            torchrun_cmd(2, ["-m", "trainer.train", "--config", "trainer/configs/tiny.yaml",
                             "--set", "training.max_steps=5", "--set", f"checkpoint.nvme_dir={scratch / 'tr2-nvme'}",
                             "--set", f"checkpoint.memory_dir={scratch / 'tr2-mem'}"]),
            {**base, "PYTHONPATH": str(ROOT)}, "trainer-two-ranks-one-gpu.log")
    return {name: (cmd, env, out / log) for name, (cmd, env, log) in cases.items()}


HANG_CASES = {   # name: (backend, extra env). torchrun itself sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1.
    "nccl_defaults": ("nccl", {}),
    "nccl_dump_wait_500ms": ("nccl", {"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "500"}),
    "nccl_no_dump_on_timeout": ("nccl", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}),
    "nccl_blocking_wait": ("nccl", {"TORCH_NCCL_BLOCKING_WAIT": "1"}),
    "gloo": ("gloo", {}),
}


def hang_cases(out: Path, gpu: bool) -> dict:
    runs = {}
    for name, (backend, extra) in HANG_CASES.items():
        if backend == "nccl" and not gpu:
            continue
        env = {**os.environ, "PROBE_BACKEND": backend, "NCCL_SOCKET_IFNAME": "lo", **extra}
        if backend == "gloo":
            env["CUDA_VISIBLE_DEVICES"] = ""
        runs[f"hang_{name}"] = (torchrun_cmd(2, [__file__, "--mode", "hang"]), env, out / f"hang-{name}.log")
    return runs


def hang_result(run: Launch, rc) -> dict:
    issued = run.first(r"PROBE ISSUED")
    rel = (lambda hit: round(hit[0] - issued[0], 2) if hit and issued else None)
    watchdog = run.first(r"Watchdog caught collective operation timeout|timed out|Timed out")
    keys = [ln[:300] for _, ln in run.lines
            if re.search(r"PROBE|Watchdog|[Tt]imed? ?out|dump|SIGABRT|[Ss]ignal|exitcode|terminate|Error", ln)]
    failed = run.first(r"failed \(exitcode: (-?\d+)\)")   # stamped when torchrun saw rank 0 end
    return {"rc": rc, "still_hung_at_bound": rc is None, "wall_s": run.wall_s,
            "issued_at_s": issued and round(issued[0], 2),
            "watchdog_or_timeout_line_after_s": rel(watchdog),
            "python_raised_after_s": rel(run.first(r"PROBE RAISED")),
            "worker_end_seen_after_s": rel(failed),
            "worker_exitcode": failed and int(re.search(r"exitcode: (-?\d+)", failed[1]).group(1)),
            "torchrun_exit_after_s": round(run.wall_s - issued[0], 2) if issued and rc is not None else None,
            "key_lines": keys[:20]}


def cuda_errors() -> dict:
    """The messages real CUDA failures carry, and whether the context survives them."""
    out = {}
    code = ("import torch; x = torch.zeros(4, device='cuda'); i = torch.tensor([10], device='cuda');"
            "y = x[i]; torch.cuda.synchronize()")
    out["device_assert"] = _error_lines(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                       text=True, timeout=60))
    code = ("import torch\nx = torch.zeros(1, device='cuda')\n"
            "try:\n torch.empty(int(4e14), dtype=torch.uint8, device='cuda')\n"
            "except Exception as e: print('oom:', type(e).__name__, str(e)[:200], flush=True)\n"
            "print('after oom, context usable:', (x + 1).item(), flush=True)\n")
    out["oom_then_use"] = _error_lines(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                      text=True, timeout=60), keep_stdout=True)
    return out


def _error_lines(p: subprocess.CompletedProcess, keep_stdout: bool = False) -> dict:
    lines = [ln for ln in (p.stderr or "").splitlines() if re.search(r"Error|error", ln)]
    return {"rc": p.returncode, "stdout": (p.stdout or "").strip()[-500:] if keep_stdout else None,
            "error_lines": [ln[:300] for ln in lines[:4]]}


def sweep(session: str) -> list[int]:
    """Kill what this probe started and left behind (workers run in sessions of their own)."""
    killed = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if f"{MARK}={session}".encode() in (p / "environ").read_bytes().split(b"\0"):
                os.kill(int(p.name), signal.SIGKILL)
                killed.append(int(p.name))
        except OSError:
            pass
    return killed


# -- the probe -----------------------------------------------------------------------------------
def probe(out: Path, budget_s: float, only: set[str] | None = None) -> dict:
    import torch
    t_start = time.time()
    left = lambda: budget_s - (time.time() - t_start)   # noqa: E731
    session = uuid.uuid4().hex[:12]
    os.environ[MARK] = session
    scratch = Path(tempfile.mkdtemp(prefix="gpu-probe-"))   # checkpoints: not under --out
    logs = Path(tempfile.mkdtemp(prefix="gpu-probe-logs-"))   # few files under --out: logs.tgz carries these
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.is_available()
    r: dict = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "torch": torch.__version__, "cuda": torch.version.cuda,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpu else None,
               "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
               "cpus": os.cpu_count(), "python": sys.version.split()[0],
               "docker": shutil.which("docker"), "nvidia_ctk": shutil.which("nvidia-ctk"), "skipped": []}

    def save(phase: str) -> None:
        r["elapsed_s"] = round(time.time() - t_start, 1)
        (out / "gpu_probe.json").write_text(json.dumps(r, indent=1))
        with tarfile.open(out / "logs.tgz", "w:gz") as tf:
            tf.add(logs, arcname="logs")
        print(f"== {phase} done at {r['elapsed_s']} s", flush=True)

    save("start")
    plan = [("tiny_gpu", "trainer/configs/tiny.yaml", 300, True, 60, False),
            ("tiny_cpu", "trainer/configs/tiny.yaml", 300, False, 60, False),
            ("medium_gpu", "trainer/configs/medium_50mb.yaml", 120, True, 40, False),
            ("medium_cpu", "trainer/configs/medium_50mb.yaml", 80, False, 30, False),
            ("tiny_gpu_warm_start", "trainer/configs/tiny.yaml", 300, True, 60, True)]
    for name, config, steps, on_gpu, kill_at, warm in plan:
        if only and name not in only:
            continue
        if on_gpu and not gpu:
            r["skipped"].append(f"{name}: no CUDA")
            continue
        if left() < 45 + 100:                          # keep room for the parallel group below
            r["skipped"].append(f"{name}: budget")
            continue
        try:
            r[name] = reference_trainer(logs, scratch, name, config, steps, on_gpu, kill_at, warm,
                                        bound_s=min(90, left() - 100))
        except Exception as e:   # noqa: BLE001 -- one broken case must not lose the others
            r[name] = {"probe_error": f"{type(e).__name__}: {e}"}
        print(json.dumps({name: {k: r[name].get(k) for k in ("rc", "backend", "median_step_time_s", "saves", "kill",
                                                             "probe_error")}}), flush=True)
        save(name)

    # byo jobs, hang cases and CUDA errors together: none of them is a timing of the trainer
    bound = max(20.0, min(100.0, left() - 15))
    group = {k: Launch(*v) for k, v in {**byo_cases(logs, scratch, gpu), **hang_cases(logs, gpu)}.items()
             if not only or k in only}
    errs = {}
    if gpu and (not only or "cuda_errors" in only):
        try:
            errs = cuda_errors()
        except Exception as e:   # noqa: BLE001
            errs = {"probe_error": f"{type(e).__name__}: {e}"}
    for name, run in group.items():
        rc = run.wait(bound)
        if name.startswith("hang_"):
            r[name] = hang_result(run, rc)
        else:
            r[name] = {"rc": rc, "wall_s": run.wall_s,
                       "key_lines": [ln[:300] for _, ln in run.lines
                                     if re.search(r"byo done|Duplicate GPU|ncclInvalidUsage|LaunchError|Error", ln)][:6],
                       "last_line": run.lines[-1][1][:200] if run.lines else None}
    if "byo_example_instrumented" in r:
        r["byo_example_instrumented"]["events"] = sorted({e["event"] for e in events(scratch / "byo-instr-events")})
    r["cuda_errors"] = errs
    r["swept_pids"] = sweep(session)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree("/dev/shm/chaosbench-gpu-probe", ignore_errors=True)
    save("all")
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="probe", choices=["probe", "byo", "hang"])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpu-probe-out-"))
    ap.add_argument("--budget", type=float, default=270.0, help="seconds the whole probe may take")
    ap.add_argument("--only", default="", help="comma-separated case names (the keys of gpu_probe.json); default all")
    a = ap.parse_args()
    if a.mode == "byo":
        return byo_worker(300)
    if a.mode == "hang":
        return hang_worker()
    r = probe(Path(a.out), a.budget, {c for c in a.only.split(",") if c} or None)
    print(json.dumps({k: v for k, v in r.items() if k.startswith(("hang_", "byo", "two_", "cuda_"))}, indent=1))


if __name__ == "__main__":
    main()
