"""Real torchrun, 2 local nodes × 1 process: restore from memory (peer), then nvme, then s3.

Each node is its own torchrun agent in its own session with its own memory and nvme directories.
A "node loss" kills the node's whole process tree (agent and worker, which torchrun puts in a
session of its own). Wiping a node's shared-memory directory stands for the fresh /dev/shm a
restarted container gets.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

WORKER = os.path.join(os.path.dirname(__file__), "mp_worker.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kill_tree(proc):
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


class Cluster:
    def __init__(self, root, run_id, s3_endpoint, bucket):
        self.root, self.run_id = root, run_id
        self.events_dir = os.path.join(root, "events")
        self.s3 = {"enabled": True, "interval": 10, "endpoint_url": s3_endpoint, "bucket": bucket,
                   "max_retries": 2, "retry_backoff_s": 0.5}
        self.procs = {}

    def dirs(self, node):
        return os.path.join(self.root, "shm", node), os.path.join(self.root, "nvme", node)

    def start(self, node, port, host, tag, max_steps=10_000, nnodes="2:2"):
        mem, nvme = self.dirs(node)
        cfg = {"memory_snapshot_interval": 5, "checkpoint_interval": 10, "keep_last": 2,
               "memory_dir": mem, "nvme_dir": nvme, "s3": self.s3}
        env = dict(os.environ, CHAOSBENCH_NODE=node, CHAOSBENCH_EVENTS_DIR=self.events_dir,
                   CHAOSBENCH_RUN_ID=self.run_id, CKPT_TEST_CFG=json.dumps(cfg), CKPT_TEST_TAG=tag,
                   CKPT_TEST_MAX_STEPS=str(max_steps), CKPT_TEST_STEP_SLEEP="0.15",
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", OMP_NUM_THREADS="1", LOGLEVEL="INFO",
                   # torch's shared agent TCPStore caches MASTER_ADDR from the first round on the
                   # rank-0 agent, so a node joining a later round waits forever for it
                   TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
                   PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        conf = f"is_host={int(host)},last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=3,join_timeout=120"
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={self.run_id}",
               f"--rdzv-conf={conf}", "--max-restarts=3", "--monitor-interval=0.5", WORKER]
        log = open(os.path.join(self.root, f"{node}-{tag}.log"), "w")
        self.procs[node] = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill(self, node):
        kill_tree(self.procs.pop(node))

    def kill_all(self):
        for node in list(self.procs):
            self.kill(node)

    def events(self, tag=None):
        out = []
        if not os.path.isdir(self.events_dir):
            return out
        for name in sorted(os.listdir(self.events_dir)):
            with open(os.path.join(self.events_dir, name)) as f:
                for line in f:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue  # the last line of a killed process may be cut
                    if tag is None or e.get("tag") == tag:
                        out.append(e)
        return out

    def wait(self, pred, what, timeout=150):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred(self.events()):
                return
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                self.fail(f"{dead} exited while waiting for {what}")
            time.sleep(0.5)
        self.fail(f"timed out waiting for {what}")

    def fail(self, why):
        logs = {n: open(os.path.join(self.root, n)).read()[-3000:] for n in os.listdir(self.root) if n.endswith(".log")}
        pytest.fail(f"{why}; logs:\n" + "\n".join(f"--- {n}\n{t}" for n, t in logs.items()))


def loaded(events, tag):
    return {e["node"]: e for e in events if e["event"] == "checkpoint_loaded" and e.get("tag") == tag}


def max_step(events, node, tag):
    return max([e["step"] for e in events if e["event"] == "step" and e["node"] == node and e.get("tag") == tag],
               default=0)


def saved_checksum(events, tier, step):
    (digest,) = {e["checksum"] for e in events if e["event"] == "checkpoint_saved" and e["tier"] == tier
                 and e["step"] == step}
    return digest


def saved_steps(events, tier):
    return [e["step"] for e in events if e["event"] == "checkpoint_saved" and e["tier"] == tier]


def assert_replay_identical(events, tag_before, tag_after, restored_step):
    """Steps run before the failure and again after the restore have bit-identical losses."""
    def losses(tag):
        return {(e["rank"], e["step"]): e["loss"] for e in events if e["event"] == "step"
                and e.get("tag") == tag and e["step"] > restored_step and e["world_size"] == 2}
    before, after = losses(tag_before), losses(tag_after)
    common = set(before) & set(after)
    assert common, "no step was replayed after the restore"
    assert {k: before[k] for k in common} == {k: after[k] for k in common}


def test_memory_peer_then_nvme_then_s3(tmp_path, s3_bucket):
    endpoint, bucket = s3_bucket
    c = Cluster(str(tmp_path), f"mp-{uuid.uuid4().hex[:6]}", endpoint, bucket)
    try:
        # --- phase 1: two nodes train; node-b is lost; node-a and a new node-c resume from memory
        port = free_port()
        c.start("node-a", port, host=True, tag="p1")
        time.sleep(1.0)
        c.start("node-b", port, host=False, tag="p1")
        c.wait(lambda ev: min(max_step(ev, n, "p1") for n in ("node-a", "node-b")) >= 17
               and saved_steps(ev, "s3"), "both nodes past step 17")
        c.kill("node-b")
        killed_at = max_step(c.events(), "node-a", "p1")
        c.start("node-c", port, host=False, tag="p1c")
        c.wait(lambda ev: len(loaded(ev, "p1")) + len(loaded(ev, "p1c")) >= 2
               and max_step(ev, "node-c", "p1c") >= killed_at + 3, "survivor and replacement to restore")
        ev = c.events()
        a, cc = loaded(ev, "p1")["node-a"], loaded(ev, "p1c")["node-c"]
        assert (a["tier"], a["source"]) == ("memory", "local") and (cc["tier"], cc["source"]) == ("memory", "peer")
        assert a["checksum"] == cc["checksum"] == saved_checksum(ev, "memory", a["step"])   # computed per rank
        assert a["step"] == cc["step"] and a["step"] % 5 == 0 and killed_at - a["step"] <= 5 + 2
        if killed_at - a["step"] > 1:   # else the kill landed on the snapshot itself: nothing to replay
            assert_replay_identical(ev, "p1", "p1c", a["step"])

        # --- phase 2: every process killed, containers restarted (fresh /dev/shm) → nvme
        c.wait(lambda ev: any(s > a["step"] for s in saved_steps(ev, "nvme")), "an nvme save after the restore")
        c.kill_all()
        newest_nvme = max(saved_steps(c.events(), "nvme"))
        for node in ("node-a", "node-c"):
            shutil.rmtree(c.dirs(node)[0], ignore_errors=True)
        port = free_port()
        c.start("node-a", port, host=True, tag="p2")
        time.sleep(1.0)
        c.start("node-c", port, host=False, tag="p2")
        c.wait(lambda ev: len(loaded(ev, "p2")) == 2, "restore after a full restart")
        ev = c.events()
        for node, e in loaded(ev, "p2").items():
            assert e["tier"] == "nvme" and e["checksum"] == saved_checksum(ev, "nvme", e["step"]), e
            assert e["step"] >= newest_nvme and e["step"] % 10 == 0
        c.wait(lambda ev: saved_steps([e for e in ev if e.get("tag") == "p2"], "s3"), "an s3 upload in phase 2")
        c.kill_all()

        # --- phase 3: new machines (no shm, no nvme), and only one of them → s3 at world size 1
        newest_s3 = max(saved_steps(c.events(), "s3"))
        for node in ("node-a", "node-c"):
            for d in c.dirs(node):
                shutil.rmtree(d, ignore_errors=True)
        c.start("node-a", free_port(), host=True, tag="p3", max_steps=newest_s3 + 5, nnodes="1:2")
        rc = c.procs["node-a"].wait(timeout=150)
        c.procs.pop("node-a")
        ev = c.events()
        e = loaded(ev, "p3")["node-a"]
        assert rc == 0
        assert (e["tier"], e["source"], e["world_size"]) == ("s3", "local", 1)
        assert e["checksum"] == saved_checksum(ev, "s3", e["step"])
        assert e["step"] >= newest_s3
        assert any(x["event"] == "run_complete" and x.get("tag") == "p3" for x in ev)
    finally:
        c.kill_all()
