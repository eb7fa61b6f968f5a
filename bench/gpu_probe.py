"""The GPU path, measured on one machine with a GPU: the reference trainer and a plain DDP job on
NCCL, a worker crash recovered on NCCL, NCCL's watchdog on a hung collective (short timeout with
async error handling vs the defaults), the flight-recorder dump, real CUDA error messages, and
whether the compose GPU override can run there.

    python bench/gpu_probe.py [--out DIR] [--hang-bound 60]

Prints one JSON object (also written to DIR/gpu_probe.json) and each case's log tail. Needs torch
with CUDA and one GPU; everything runs as plain torchrun processes (no docker, no etcd: the
`--standalone` rendezvous), so it runs where only python and torch are installed.
A hung collective on one GPU: a kernel that spins (`torch.cuda._sleep`) sits on the compute
stream, the all-reduce queued behind it never completes, and NCCL's watchdog sees the same
"collective did not complete within the timeout" it sees when a peer rank hangs.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# -- worker modes (run under torchrun by the cases below) ----------------------------------------
def byo_worker(steps: int) -> None:
    """A default-settings DDP job on NCCL: what a user's script looks like."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("nccl")
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=dev)
    t0 = time.time()
    for step in range(1, steps + 1):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
        if step % 10 == 0:
            print(f"step {step} {time.time() - t0:.3f}s", flush=True)
    print(f"byo done: {steps} steps in {time.time() - t0:.3f}s on {torch.cuda.get_device_name(dev)}", flush=True)
    dist.destroy_process_group()


def hang_worker() -> None:
    """One warm all-reduce, then an all-reduce queued behind a kernel that spins for minutes."""
    import datetime
    import torch
    import torch.distributed as dist
    timeout = os.environ.get("PROBE_PG_TIMEOUT_S")
    kw = {"timeout": datetime.timedelta(seconds=float(timeout))} if timeout else {}
    dist.init_process_group("nccl", **kw)
    torch.cuda.set_device(0)
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"warm all-reduce ok; hang starts at {time.time():.3f}", flush=True)
    torch.cuda._sleep(int(4e12))          # ~30 min of spinning at ~2 GHz
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print("hang_worker: the hung all-reduce completed (unexpected)", flush=True)


def cuda_errors() -> dict:
    """The messages real CUDA failures carry, and whether the context survives them."""
    out = {}
    code = ("import torch; x = torch.zeros(4, device='cuda'); i = torch.tensor([10], device='cuda');"
            "y = x[i]; torch.cuda.synchronize()")
    out["device_assert"] = _first_error(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True))
    code = ("import cupy, torch\n"
            "k = cupy.RawKernel(r'extern \"C\" __global__ void bad(float* p){ p[1ull<<40] = 1.0f; }', 'bad')\n"
            "try:\n k((1,), (1,), (cupy.zeros(1, dtype=cupy.float32),)); cupy.cuda.runtime.deviceSynchronize()\n"
            "except Exception as e: print('cupy:', type(e).__name__, e, flush=True)\n"
            "torch.ones(1, device='cuda').sum().item()\n")
    out["illegal_address_then_torch"] = _first_error(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True), keep_stdout=True)
    return out


def _first_error(p: subprocess.CompletedProcess, keep_stdout: bool = False) -> dict:
    lines = [ln for ln in (p.stderr or "").splitlines() if re.search(r"Error|error", ln)]
    return {"rc": p.returncode, "stdout": (p.stdout or "").strip()[-400:] if keep_stdout else None,
            "error_lines": lines[:4]}


# -- cases ---------------------------------------------------------------------------------------
def torchrun(args: list[str], env: dict, log: Path, timeout: float) -> tuple[int | None, float, str]:
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], cwd=ROOT, env=env,
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    return rc, time.time() - t0, log.read_text(errors="replace")


def events(d: Path) -> list[dict]:
    evs = []
    for f in sorted(d.glob("*.jsonl")):
        evs += [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
    return sorted(evs, key=lambda e: e["ts"])


def reference_trainer(out: Path, kill_at_step: int = 30) -> dict:
    """The reference trainer on NCCL (1 node x 1 GPU); its worker is SIGKILLed at a step and torchrun
    restarts it: the restore tier and the time from the kill to the next step."""
    scratch = Path(tempfile.mkdtemp(prefix="gpu-probe-ref-"))   # many files: not under --out
    evdir, nvme = scratch / "events", scratch / "nvme"
    for d in (evdir, nvme):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    env = {**os.environ, "CHAOSBENCH_EVENTS_DIR": str(evdir), "CHAOSBENCH_NODE": "gpu-node-0",
           "CHAOSBENCH_RUN_ID": f"gpu-probe-{os.getpid()}", "PYTHONPATH": str(ROOT)}
    args = ["--standalone", "--nproc-per-node=1", "--max-restarts=2", "-m", "trainer.train",
            "--config", "trainer/configs/tiny.yaml", "--set", "training.max_steps=80",
            "--set", "training.step_sleep_s=0.05", "--set", f"checkpoint.nvme_dir={nvme}"]
    log = out / "ref-trainer.log"
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], cwd=ROOT, env=env,
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        killed_at, victim = None, None
        while p.poll() is None and time.time() - t0 < 240:
            time.sleep(0.05)
            if killed_at is None:
                steps = [e for e in events(evdir) if e["event"] == "step" and e.get("step", 0) >= kill_at_step]
                if steps:
                    victim = steps[-1]["pid"]
                    os.kill(victim, signal.SIGKILL)
                    killed_at = time.time()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
    evs = events(evdir)
    after = [e for e in evs if killed_at and e["ts"] > killed_at]
    first_step = next((e for e in after if e["event"] == "step"), None)
    loaded = next((e for e in after if e["event"] == "checkpoint_loaded"), None)
    steps = [e for e in evs if e["event"] == "step"]
    saves = {}
    for e in evs:
        if e["event"] == "checkpoint_saved":
            saves.setdefault(e["tier"], []).append(e.get("stall_s", 0.0))
    text = log.read_text(errors="replace")
    return {
        "rc": rc, "wall_s": round(time.time() - t0, 2),
        "backend": (re.findall(r"backend (\w+)", text) or ["?"])[0],
        "last_step": max((e["step"] for e in steps), default=None),
        "median_step_time_s": _median([e.get("step_time_s") for e in steps if e.get("step_time_s")]),
        "kill_step": kill_at_step, "killed_pid": victim,
        "restored_tier": loaded and loaded.get("tier"), "restored_step": loaded and loaded.get("step"),
        "kill_to_next_step_s": round(first_step["ts"] - killed_at, 3) if first_step and killed_at else None,
        "save_stall_median_s": {t: _median(v) for t, v in saves.items()},
        "log_tail": text.splitlines()[-6:],
    }


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return round(xs[len(xs) // 2], 4) if xs else None


def hang_case(out: Path, name: str, extra_env: dict, bound_s: float) -> dict:
    env = {**os.environ, **extra_env}
    log = out / f"hang-{name}.log"
    rc, wall, text = torchrun(["--standalone", "--nproc-per-node=1", "--max-restarts=0", __file__, "--mode", "hang"],
                              env, log, bound_s)
    m = re.search(r"hang starts at ([\d.]+)", text)
    keys = [ln for ln in text.splitlines() if re.search(r"Watchdog|timed out|Timeout|flight|dump|SIGABRT|terminate", ln)]
    return {"env": extra_env, "rc": rc, "still_hung_at_bound": rc is None, "wall_s": round(wall, 2),
            "hang_started_after_s": None if not m else "logged", "key_lines": [k[:300] for k in keys[:8]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="probe", choices=["probe", "byo", "hang"])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpu-probe-"))
    ap.add_argument("--hang-bound", type=float, default=60.0)
    a = ap.parse_args()
    if a.mode == "byo":
        return byo_worker(200)
    if a.mode == "hang":
        return hang_worker()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    r: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
               "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
               "docker": shutil.which("docker"), "nvidia_ctk": shutil.which("nvidia-ctk")}
    print(json.dumps(r), flush=True)
    r["reference_trainer"] = reference_trainer(out)
    print(json.dumps(r["reference_trainer"]), flush=True)
    rc, wall, text = torchrun(["--standalone", "--nproc-per-node=1", __file__, "--mode", "byo"], dict(os.environ),
                              out / "byo.log", 120)
    r["byo_nccl"] = {"rc": rc, "wall_s": round(wall, 2), "done": [ln for ln in text.splitlines() if "byo done" in ln]}
    rc, wall, text = torchrun(["--standalone", "--nproc-per-node=2", __file__, "--mode", "byo"], dict(os.environ),
                              out / "byo-2ranks-1gpu.log", 120)
    r["two_ranks_one_gpu"] = {"rc": rc, "wall_s": round(wall, 2),
                              "error_lines": [ln[:300] for ln in text.splitlines() if "Duplicate GPU" in ln or "ncclInvalidUsage" in ln][:3]}
    print(json.dumps({k: r[k] for k in ("byo_nccl", "two_ranks_one_gpu")}), flush=True)
    dump = str(out / "nccl_trace_rank_")
    r["hang_short_timeout"] = hang_case(out, "short", {
        "PROBE_PG_TIMEOUT_S": "10", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": dump}, a.hang_bound)
    r["hang_short_timeout"]["flight_recorder_files"] = [os.path.basename(p) for p in glob.glob(dump + "*")]
    print(json.dumps(r["hang_short_timeout"]), flush=True)
    r["hang_defaults"] = hang_case(out, "defaults", {}, a.hang_bound)
    print(json.dumps(r["hang_defaults"]), flush=True)
    r["cuda_errors"] = cuda_errors()
    (out / "gpu_probe.json").write_text(json.dumps(r, indent=1))
    print(json.dumps(r["cuda_errors"], indent=1), flush=True)


if __name__ == "__main__":
    main()
