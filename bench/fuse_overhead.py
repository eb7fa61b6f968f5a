"""The disk layer's cost (chaosbench/cluster/node/disk_layer.py): checkpoint saves and reads through the FUSE
layer against the plain directory underneath, side by side in one run.

    sudo .venv/bin/python bench/fuse_overhead.py [--mb 64] [--repeat 5] [--dir /tmp]

Saves go through the reference trainer's own LocalStore (8 MiB writes, fsync of the file, the temp
directory, the rename and the root); reads open and read the checkpoint's state.pt in full (a fresh
open: the layer's page cache is dropped at each open, as the node's restore sees it). Three setups:
the plain directory, the layer in passthrough mode (what disk_fault runs with, no fault set), and
the layer in writeback mode (what lose_unsynced_writes runs with). Prints MB/s (median of --repeat)
and each layer's ratio to the plain directory. Needs root and /dev/fuse.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from chaosbench.cluster.node import disk_layer  # noqa: E402
from trainer.checkpoint.local_store import LocalStore  # noqa: E402

LAYER = Path(disk_layer.__file__)


def measure(store: LocalStore, step: int, data: bytes) -> tuple[float, float]:
    """(save MB/s, read MB/s) of one checkpoint through `store`."""
    mb = len(data) / 2**20
    t = time.perf_counter()
    final = store.save(step, data, {"step": step})
    save = mb / (time.perf_counter() - t)
    t = time.perf_counter()
    with open(os.path.join(final, "state.pt"), "rb") as f:
        n = len(f.read())
    read = mb / (time.perf_counter() - t)
    assert n == len(data)
    return save, read


def mounted(under: Path, ctl: Path, writeback: bool):
    env = {**os.environ, "CHAOSBENCH_DISK_CONTROL": str(ctl)}
    subprocess.run([sys.executable, str(LAYER), "start", *(["--writeback"] if writeback else []), f"nvme={under}"],
                   env=env, check=True, timeout=30)


def unmount(under: Path):
    subprocess.run(["fusermount3", "-u", "-z", str(under)], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="checkpoint size (MiB)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the test directories go (default: the temp dir)")
    a = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        sys.exit("needs root and /dev/fuse (a FUSE mount)")
    data = os.urandom(a.mb << 20)
    setups = (("plain directory", False, False), ("layer (passthrough)", True, False), ("layer (writeback)", True, True))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in setups}
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="fuse-bench-") as tmp:
        stores, mounts = {}, []
        try:
            for i, (name, layer, writeback) in enumerate(setups):
                under = Path(tmp, f"tier{i}")
                under.mkdir()
                if layer:
                    mounted(under, Path(tmp, f"ctl{i}"), writeback)
                    mounts.append(under)
                stores[name] = LocalStore("nvme", str(under / "checkpoints"), keep_last=2, fsync=True)
            for step in range(a.repeat):   # rounds: each setup once per round, so drift hits all alike
                for name in runs:
                    runs[name].append(measure(stores[name], step, data))
        finally:
            for under in mounts:
                unmount(under)
    rows = {name: (statistics.median(s for s, _ in r), statistics.median(x for _, x in r)) for name, r in runs.items()}
    base_save, base_read = rows["plain directory"]
    print(f"checkpoint {a.mb} MiB, median of {a.repeat} (save: LocalStore.save with fsync; read: a fresh open)")
    print(f"{'setup':22} {'save MB/s':>10} {'x plain':>8} {'read MB/s':>10} {'x plain':>8}")
    for name, (save, read) in rows.items():
        print(f"{name:22} {save:10.0f} {save / base_save:8.2f} {read:10.0f} {read / base_read:8.2f}")


if __name__ == "__main__":
    main()
