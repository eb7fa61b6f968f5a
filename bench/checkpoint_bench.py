"""Checkpoint costs, each measured against a baseline in the same run.

    python bench/checkpoint_bench.py [--config trainer/configs/medium_50mb.yaml] [--nvme-dir DIR]

Uses the reference trainer's model and optimizer built from the config, and the config's
checkpoint intervals.

Prints:
  * stall per save (the in-loop CPU copy) vs a plain memory copy of the same bytes   (target ≤ 1.5×)
  * that stall as % of the training time between two memory snapshots (default interval) (≤ 5%)
  * step time with background saving on vs off (what the loop really feels, incl. CPU contention)
  * NVMe tier write throughput vs `dd conv=fsync` to the same directory              (target ≥ 70%)
  * restore time per tier: memory, nvme, s3 (moto server over HTTP), and peer (2 gloo ranks)
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer.checkpoint import CheckpointManager  # noqa: E402
from trainer.checkpoint import fmt  # noqa: E402
from trainer.checkpoint.config import TIERS, CheckpointConfig  # noqa: E402
from trainer.checkpoint.local_store import LocalStore  # noqa: E402
from trainer.checkpoint.snapshot import BufferPool, Snapshot, tensor_bytes  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.model import build_model  # noqa: E402


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def train_loop(model, opt, steps, mgr=None, state_fn=None, batch=(2, 65), vocab=256):
    times = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        tokens = torch.randint(0, vocab, batch)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if mgr is not None:
            mgr.maybe_save(step, state_fn)
        times.append(time.perf_counter() - t0)
    return times


def dd_throughput(directory, nbytes):
    path = os.path.join(directory, "dd-bench.bin")
    count = max(1, nbytes // (8 << 20))
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=8M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True, timeout=600)
    dt = time.perf_counter() - t0
    os.unlink(path)
    return count * (8 << 20) / dt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _peer_worker(rank, world, init, mem_dirs, nvme_dirs, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    cfg = {"memory_dir": mem_dirs[rank], "nvme_dir": nvme_dirs[rank]}
    mgr = CheckpointManager(cfg, node=f"n{rank}", rank=rank, local_rank=0, world_size=world, run_id="bench")
    t0 = time.perf_counter()
    mgr.restore()
    dt = time.perf_counter() - t0
    if rank == 1:
        with open(out, "w") as f:
            f.write(f"{dt} {mgr.last_restore['source']}")
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="trainer/configs/medium_50mb.yaml")
    ap.add_argument("--steps", type=int, default=30, help="training steps per loop measurement")
    ap.add_argument("--nvme-dir", default=".chaosbench/bench-nvme", help="directory the NVMe tier writes to")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-s3", action="store_true")
    args = ap.parse_args()
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log

    cfg, _ = load_config(args.config)
    t = cfg["training"]
    torch.manual_seed(0)
    model = build_model(t["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"])
    shape = dict(batch=(t["per_worker_batch_size"], t["seq_len"] + 1), vocab=t["model"]["vocab_size"])
    train_loop(model, opt, 2, **shape)  # materialise the optimizer state
    state_fn = lambda: {"step": 0, "model": model.state_dict(), "optimizer": opt.state_dict()}  # noqa: E731
    nbytes = tensor_bytes(state_fn())
    defaults = CheckpointConfig.from_dict(cfg["checkpoint"])
    print(f"config: {args.config}")
    print(f"state: {sum(p.numel() for p in model.parameters()) * 4 / 2**20:.1f} MB parameters, "
          f"{nbytes / 2**20:.1f} MB with optimizer state; torch threads={torch.get_num_threads()}")

    # 1. stall per save vs a plain copy of the same bytes (alternated so load changes hit both).
    # Steady state as in the manager: the copies go into pooled buffers from the previous snapshot.
    flat = torch.empty(nbytes, dtype=torch.uint8)
    flat.fill_(1)
    pool = BufferPool(4 * nbytes)
    cold = median_time(lambda: Snapshot.take(0, state_fn, pool).encoded(), 1)  # fills the pool
    stalls, copies = [], []
    for _ in range(args.repeat):
        snap = Snapshot.take(0, state_fn, pool)
        stalls.append(snap.stall_s)
        snap.encoded()  # background work in the manager; hands the buffers back
        copies.append(median_time(lambda: flat.clone(), 1))
    stall, copy = statistics.median(stalls), statistics.median(copies)
    print(f"stall per save        : {stall * 1e3:8.1f} ms   plain copy {copy * 1e3:8.1f} ms   "
          f"ratio {stall / copy:5.2f}x  (target <= 1.5x)")

    # 2. stall vs step time, and the loop with saving on vs off
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-")
    shm = tempfile.mkdtemp(prefix="ckpt-bench-", dir="/dev/shm")
    nvme_dir = os.path.abspath(args.nvme_dir)
    os.makedirs(nvme_dir, exist_ok=True)
    try:
        off1 = train_loop(model, opt, args.steps, **shape)
        saved = []
        mgr = CheckpointManager({"memory_dir": shm, "nvme_dir": os.path.join(nvme_dir, "loop"),
                                 "memory_snapshot_interval": defaults.memory_snapshot_interval,
                                 "checkpoint_interval": defaults.checkpoint_interval}, node="bench", run_id="bench",
                                emit=lambda ev, f: saved.append(f) if ev == "checkpoint_saved" else None)
        on = train_loop(model, opt, args.steps, mgr, state_fn, **shape)
        mgr.close(300)
        off2 = train_loop(model, opt, args.steps, **shape)
        step_off = statistics.mean(off1 + off2)
        step_on = statistics.mean(on)
        interval = defaults.memory_snapshot_interval
        print(f"step time             : {step_off * 1e3:8.1f} ms   stall/(interval {interval} x step) "
              f"{100 * stall / (interval * step_off):5.2f} %  (target <= 5%)")
        loop_stalls = [f["stall_s"] for f in saved if f["tier"] == "memory"]
        if loop_stalls:
            ls = statistics.median(loop_stalls)
            print(f"stall in the loop     : {ls * 1e3:8.1f} ms   median of {len(loop_stalls)} saves, "
                  f"{ls / copy:5.2f}x plain copy, {100 * ls / (interval * step_off):5.2f} % of {interval} steps")
        print(f"loop with saving on   : {step_on * 1e3:8.1f} ms/step vs {step_off * 1e3:.1f} off "
              f"({100 * (step_on / step_off - 1):+.1f} %, memory every {interval}, nvme every "
              f"{defaults.checkpoint_interval} steps, writes share the same CPU cores)")

        # 3. NVMe write throughput vs dd to the same directory
        data, digest = Snapshot.take(1, state_fn).encoded()
        manifest = fmt.make_manifest(1, data, digest)
        store = LocalStore("nvme", os.path.join(nvme_dir, "tp"), keep_last=1, fsync=True)
        ours, dds = [], []
        for i in range(3):
            ours.append(len(data) / median_time(lambda: store.save(i + 1, data, manifest | {"step": i + 1}), 1))
            dds.append(dd_throughput(nvme_dir, len(data)))
        o, d = statistics.median(ours), statistics.median(dds)
        print(f"nvme write throughput : {o / 2**20:8.1f} MB/s   dd conv=fsync {d / 2**20:8.1f} MB/s   "
              f"ratio {100 * o / d:5.1f} %  (target >= 70%)  [{nvme_dir}]")

        # 4. restore time per tier (read + checksum + torch.load)
        cfg = {"memory_dir": shm, "nvme_dir": os.path.join(nvme_dir, "restore")}
        s3_server = None
        if not args.no_s3:
            from moto.server import ThreadedMotoServer
            import boto3
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
            port = free_port()
            s3_server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            s3_server.start()
            boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(Bucket="bench")
            cfg["s3"] = {"enabled": True, "endpoint_url": f"http://127.0.0.1:{port}", "bucket": "bench"}
        try:
            mgr = CheckpointManager(cfg, node="bench", run_id="bench")
            tiers = [t for t in TIERS if t in mgr.stores]
            state = {"step": 7, "model": model.state_dict(), "optimizer": opt.state_dict()}
            mgr.save(state, tier=tiers)
            # the restore train.py runs (choose, read, checksum, torch.load), on a view of the node in which
            # the faster tiers are empty, so that each tier in turn is the one chosen
            empty = {"memory": os.path.join(shm, "empty"), "nvme": os.path.join(tmp, "empty-nvme")}
            for i, t in enumerate(tiers):
                view = CheckpointManager({**cfg, **{f"{f}_dir": empty[f] for f in TIERS[:i] if f in empty}},
                                         node="bench", run_id="bench")
                dt = median_time(view.restore, 3)
                print(f"restore {t:<6}        : {dt * 1e3:8.1f} ms   ({len(data) / 2**20 / dt:6.1f} MB/s)")
        finally:
            if s3_server is not None:
                s3_server.stop()

        # peer: rank 1 has nothing, receives rank 0's memory snapshot by gloo broadcast
        import torch.multiprocessing as mp
        out = os.path.join(tmp, "peer.txt")
        empty = tempfile.mkdtemp(prefix="ckpt-bench-peer-", dir="/dev/shm")
        try:
            mp.spawn(_peer_worker, args=(2, f"tcp://127.0.0.1:{free_port()}", [shm, empty],
                                         [os.path.join(nvme_dir, "restore"), os.path.join(tmp, "none")], out),
                     nprocs=2, join=True)
            dt, source = open(out).read().split()
            print(f"restore memory (peer) : {float(dt) * 1e3:8.1f} ms   (source={source}, incl. agreement)")
        finally:
            shutil.rmtree(empty, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
        for sub in ("loop", "tp", "restore"):
            shutil.rmtree(os.path.join(nvme_dir, sub), ignore_errors=True)
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup in main's finally
    sys.exit(main())
