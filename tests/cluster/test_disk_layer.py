"""The disk layer itself (cluster/node/disk_layer.py), mounted for real on this host in a temp directory:
passthrough, each injected errno, latency, bit flips, writeback loss after a SIGKILL of the daemon,
a clean unmount. Needs root and /dev/fuse (skipped without them)."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosbench.cluster.node import disk_layer

LAYER = Path(disk_layer.__file__)
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="mounting FUSE needs root and /dev/fuse")


class Mounted:
    def __init__(self, tmp: Path, writeback: bool = False, writeback_s: float = 30.0):
        self.under, self.ctl = tmp / "tier", tmp / "ctl"
        self.under.mkdir()
        (self.under / "old").write_bytes(b"written before the mount")
        self.env = {**os.environ, "CHAOSBENCH_DISK_CONTROL": str(self.ctl)}
        args = ["--writeback"] if writeback else []
        subprocess.run([sys.executable, str(LAYER), "start", *args, f"--writeback-s={writeback_s}",
                        f"nvme={self.under}"], env=self.env, check=True, timeout=30)
        self.pid = json.loads((self.ctl / "nvme.stats.json").read_text())["pid"] if self._stats_soon() else None

    def _stats_soon(self) -> bool:
        for _ in range(50):
            if (self.ctl / "nvme.stats.json").exists():
                return True
            time.sleep(0.05)
        return False

    def control(self, fault: dict) -> dict:
        out = subprocess.run([sys.executable, str(LAYER), "control", "nvme", json.dumps(fault)], env=self.env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def mounted(self) -> bool:
        return str(self.under) in disk_layer.layer_mounts()

    def unmount(self):
        if self.mounted():
            subprocess.run(["fusermount3", "-u", "-z", str(self.under)], check=False)


@pytest.fixture
def layer(tmp_path):
    m = Mounted(tmp_path)
    yield m
    m.unmount()


def test_passthrough_serves_the_directory_underneath(layer):
    d = layer.under
    assert layer.mounted()
    assert (d / "old").read_bytes() == b"written before the mount"   # the fd opened before the mount
    (d / "sub").mkdir()
    data = os.urandom(3 << 20)
    (d / "sub" / "a.tmp").write_bytes(data)
    os.rename(d / "sub" / "a.tmp", d / "sub" / "a")
    assert (d / "sub" / "a").read_bytes() == data
    assert sorted(os.listdir(d)) == ["old", "sub"]
    with open(d / "sub" / "a", "r+b") as f:
        f.truncate(10)
    assert (d / "sub" / "a").stat().st_size == 10
    os.unlink(d / "sub" / "a")
    os.rmdir(d / "sub")
    assert os.listdir(d) == ["old"]
    layer.unmount()
    assert not layer.mounted()
    assert sorted(os.listdir(d)) == ["old"]   # what the layer wrote went to the directory underneath


@pytest.mark.parametrize("name,op,action", [
    ("EIO", "write", lambda p: p.write_bytes(b"x")),
    ("ENOSPC", "write", lambda p: p.write_bytes(b"x")),
    ("EROFS", "open", lambda p: p.write_bytes(b"x")),
    ("EIO", "read", lambda p: p.read_bytes()),
])
def test_each_errno_is_injected_on_its_op_and_counted(layer, name, op, action):
    target = layer.under / "old" if op == "read" else layer.under / "new"
    stats = layer.control({"op": op, "errno": name, "probability": 1.0})
    assert stats["active"]["errno"] == name
    with pytest.raises(OSError) as exc:
        action(target)
    assert exc.value.errno == getattr(errno, name)
    healed = layer.control({})
    assert healed["active"] is None and healed["injected"][op] >= 1
    action(layer.under / "old" if op == "read" else layer.under / "after")   # healed: works again


def test_fsync_fails_but_writes_succeed(layer):
    layer.control({"op": "fsync", "errno": "EIO"})
    fd = os.open(layer.under / "f", os.O_WRONLY | os.O_CREAT)
    try:
        assert os.write(fd, b"data") == 4
        with pytest.raises(OSError) as exc:
            os.fsync(fd)
        assert exc.value.errno == errno.EIO
    finally:
        os.close(fd)


def test_probability_fails_only_a_share(layer):
    layer.control({"op": "read", "errno": "EIO", "probability": 0.3})
    fails = 0
    for _ in range(200):
        try:
            (layer.under / "old").read_bytes()
        except OSError:
            fails += 1
    # the kernel retries a failed page read once (readahead, then a single-page read), both must fail:
    # a read() fails with p^2 = 9 % (measured: 16/200); a read() failing 30 % of the time would be >= 40
    stats = layer.control({})
    assert 5 < fails < 40 and stats["injected"]["read"] >= fails


def test_latency_delays_the_op(layer):
    (layer.under / "f").write_bytes(b"x" * 100)
    t0 = time.monotonic()
    (layer.under / "f").read_bytes()
    plain = time.monotonic() - t0
    layer.control({"op": "read", "latency_ms": 300})
    t0 = time.monotonic()
    (layer.under / "f").read_bytes()
    assert time.monotonic() - t0 >= 0.3 > plain
    assert layer.control({})["delayed"] >= 1


def test_bitflip_on_read_flips_one_bit_in_the_named_file_only(layer):
    data = os.urandom(4096)
    (layer.under / "ck").mkdir()
    (layer.under / "ck" / "state.pt").write_bytes(data)
    (layer.under / "other").write_bytes(data)
    layer.control({"bitflip_on_read": ["ck/state.pt"]})
    got = (layer.under / "ck" / "state.pt").read_bytes()
    diff = [i for i in range(len(data)) if got[i] != data[i]]
    assert len(diff) == 1 and bin(got[diff[0]] ^ data[diff[0]]).count("1") == 1
    assert (layer.under / "other").read_bytes() == data
    assert (layer.under / "ck" / "state.pt").stat().st_size == len(data)
    assert layer.control({})["bitflips"] >= 1
    assert (layer.under / "ck" / "state.pt").read_bytes() == data   # on disk the file never changed


def _kill_daemon(m: Mounted):
    os.kill(m.pid, signal.SIGKILL)
    for _ in range(100):
        try:
            os.kill(m.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    m.unmount()   # the dead daemon's mount: what `chaosbench clean` does with fusermount3 -u -z


def test_writeback_loses_what_was_not_fsynced_when_the_daemon_is_killed(tmp_path):
    m = Mounted(tmp_path, writeback=True)
    try:
        d = m.under
        # durable: written, fsynced, renamed, directory fsynced
        fd = os.open(d / "durable.tmp", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"A" * 1000)
        os.fsync(fd)
        os.close(fd)
        os.rename(d / "durable.tmp", d / "durable")
        dfd = os.open(d, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        # the classic crash: written and renamed, never fsynced
        (d / "lost.tmp").write_bytes(b"B" * 1000)
        os.rename(d / "lost.tmp", d / "lost")
        assert (d / "lost").read_bytes() == b"B" * 1000           # reads see the held data
        assert (d / "lost").stat().st_size == 1000
        # synced, then appended to without a sync: keeps exactly what was synced
        with open(d / "half", "wb") as f:
            f.write(b"C" * 10)
            f.flush()
            os.fsync(f.fileno())
            f.write(b"D" * 10)
        time.sleep(3 * disk_layer.POLL_S)
        assert json.loads((m.ctl / "nvme.stats.json").read_text())["pending_bytes"] >= 1000
        _kill_daemon(m)
        assert (d / "durable").read_bytes() == b"A" * 1000
        assert (d / "lost").exists() and (d / "lost").read_bytes() == b""   # the name survived, the data did not
        assert (d / "half").read_bytes() == b"C" * 10
    finally:
        m.unmount()


def test_writeback_flushes_after_writeback_s(tmp_path):
    m = Mounted(tmp_path, writeback=True, writeback_s=0.5)
    try:
        (m.under / "f").write_bytes(b"E" * 100)
        time.sleep(1.5)
        _kill_daemon(m)
        assert (m.under / "f").read_bytes() == b"E" * 100   # expired: written back like the kernel's dirty pages
    finally:
        m.unmount()


def test_sigterm_unmounts_cleanly(tmp_path):
    m = Mounted(tmp_path)
    os.kill(m.pid, signal.SIGTERM)
    for _ in range(100):
        if not m.mounted():
            break
        time.sleep(0.05)
    assert not m.mounted()
    assert (m.under / "old").read_bytes() == b"written before the mount"


def test_control_fails_loudly_without_a_layer(tmp_path):
    env = {**os.environ, "CHAOSBENCH_DISK_CONTROL": str(tmp_path / "none")}
    out = subprocess.run([sys.executable, str(LAYER), "control", "nvme", "{}"], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "no disk layer" in out.stderr


def test_the_trainers_save_is_durable_under_writeback_and_a_torn_one_is_never_published(tmp_path):
    """The reference trainer's LocalStore through the writeback layer: a save that returned survives the
    kill byte for byte; a save whose fsync fails is reported and leaves no published checkpoint."""
    from trainer.checkpoint import fmt
    from trainer.checkpoint.errors import CheckpointSaveError
    from trainer.checkpoint.local_store import LocalStore
    m = Mounted(tmp_path, writeback=True)
    try:
        store = LocalStore("nvme", str(m.under / "ckpt" / "checkpoints"), keep_last=3, fsync=True)
        data = os.urandom(1 << 20)
        store.save(10, data, fmt.make_manifest(10, data, fmt.checksum(data)))
        m.control({"op": "fsync", "errno": "EIO"})
        with pytest.raises(CheckpointSaveError, match="Input/output error"):
            store.save(20, data, fmt.make_manifest(20, data, fmt.checksum(data)))
        m.control({})
        _kill_daemon(m)
        store = LocalStore("nvme", str(m.under / "ckpt" / "checkpoints"), keep_last=3, fsync=True)
        assert [r.step for r in store.list()] == [10]   # step 20 never published
        got, manifest = store.read(store.list()[0])
        assert got == data and manifest["step"] == 10
    finally:
        m.unmount()


def test_a_new_checkpoint_root_is_fsynced_into_its_parent(tmp_path, monkeypatch):
    """The first save creates the tier's directory: its name is durable only once its parent is fsynced."""
    from trainer.checkpoint import fmt
    from trainer.checkpoint.local_store import LocalStore
    synced = []
    monkeypatch.setattr(LocalStore, "_sync_dir", lambda self, p: synced.append(p))
    store = LocalStore("nvme", str(tmp_path / "a" / "checkpoints"), keep_last=2, fsync=True)
    store.save(1, b"x", fmt.make_manifest(1, b"x", fmt.checksum(b"x")))
    assert synced[:2] == [str(tmp_path), str(tmp_path / "a")]   # each new entry, in its parent
    assert synced[-1] == store.root                              # the rename, in the root


def test_clean_unmounts_a_dead_daemons_layer_and_leaves_a_live_one(tmp_path, monkeypatch):
    from chaosbench.cluster import clean as clean_mod
    for name in ("sweep_local", "_docker", "_slurm"):   # only the layer sweep: other runs share this host
        monkeypatch.setattr(clean_mod, name, lambda *a, **k: None)
    monkeypatch.setattr(clean_mod.loopfs, "sweep", lambda *a: [])
    monkeypatch.setattr(clean_mod.loopfs, "stale_loops", lambda *a: [])
    monkeypatch.setattr(clean_mod.loopfs, "ROOT", tmp_path / "no-loop-disks")
    (tmp_path / "dead").mkdir()
    (tmp_path / "live").mkdir()
    dead, live = Mounted(tmp_path / "dead"), Mounted(tmp_path / "live")
    try:
        os.kill(dead.pid, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(OSError) as exc:
            os.stat(dead.under)
        assert exc.value.errno == errno.ENOTCONN   # what a SIGKILLed layer leaves
        removed, _ = clean_mod.clean(docker=False)
        assert str(dead.under) in removed["disk layer mounts"]
        assert not dead.mounted() and live.mounted()
        assert (live.under / "old").read_bytes() == b"written before the mount"
    finally:
        dead.unmount()
        live.unmount()
