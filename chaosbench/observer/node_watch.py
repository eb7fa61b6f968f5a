"""The node watcher: runs a user's launcher (torchrun + their script, or a raw command) on a node and
records what it sees as events, so a job that writes none still has a history (docs/byo-trainer.md).

    python -m chaosbench.observer.node_watch [--progress REGEX] -- torchrun ... train.py ...

What it records, each line marked `"observed": true`, in `$CHAOSBENCH_EVENTS_DIR`:
- `events-<node>-local<N>-observed.jsonl` (worker events, read like a trainer's): `worker_start` when a worker
  process appears under the launcher (rank, world size and restart count read from its environment,
  `ts` its start time), `worker_exit` when it is gone, and `step` (with `loss` when the regex has that
  group) for every output line of a worker that matches `--progress`;
- `agent-<node>.jsonl` (the torchrun agent, not a worker): `rendezvous_start`, `rendezvous_done`
  (restart_count, nodes, world_size), `worker_group_failed`, `launcher_exit`.

The launcher's output is passed through unchanged to our stdout (the node log). Stdlib only: it also
runs in a user's image that has only python and torch, with the chaosbench source on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time

from chaosbench import launchers

PREFIX = re.compile(r"^\[[A-Za-z_-]*?(\d+)\]:(.*)$")   # --tee: "[default0]:text", dlrover-run "[dlrover-trainer0]:"


class Writer:
    """Appends whole JSON lines (one write() each, O_APPEND) to one file."""

    def __init__(self, path: str | None):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None
        self.lock = threading.Lock()

    def emit(self, record: dict) -> None:
        if self.fd is None:
            return
        line = (json.dumps(record, default=str) + "\n").encode()
        with self.lock:
            try:
                os.write(self.fd, line)
            except OSError:
                pass   # a full or vanished events dir must not stop the job


def _boot_time() -> float:
    """Unix time of boot to 10 ms (/proc/stat's btime is whole seconds: too coarse to order events)."""
    try:
        return time.time() - float(open("/proc/uptime").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


BOOT, TICK = _boot_time(), os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(ppid, state, start time as unix seconds) of a process, or None when it is gone."""
    try:
        rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[1]), rest[0], BOOT + int(rest[19]) / TICK


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


class Watcher:
    def __init__(self, launcher_pid: int, events_dir: str | None, node: str, progress: str | None,
                 launcher: str = launchers.DEFAULT):
        self.launcher_pid, self.node = launcher_pid, node
        self.adapter = launchers.get(launcher).adapter()   # the launcher's own lines -> agent events
        self.launcher = launcher
        self.progress = re.compile(progress) if progress else None
        if events_dir:
            os.makedirs(events_dir, exist_ok=True)
        self.events_dir = events_dir
        self.rank_out: dict[int, Writer] = {}   # local_rank -> its file (doctor reads one file per rank)
        self.agent_out = Writer(events_dir and os.path.join(events_dir, f"agent-{node}.jsonl"))
        self.workers: dict[int, dict] = {}      # pid -> common fields of a live worker
        self.lock = threading.Lock()
        self.run_id = os.environ.get("CHAOSBENCH_RUN_ID", "")
        self.prefixed = False                   # seen a "[default<N>]:" line: torchrun --tee output
        self.agent_only = False                 # the job writes its own worker events: no worker scan

    # -- workers: processes under the launcher that carry torchrun's LOCAL_RANK ----------------
    def scan(self) -> None:
        children: dict[int, list[int]] = {}
        states: dict[int, tuple] = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (st := _stat(int(name))) is not None:
                states[int(name)] = st
                children.setdefault(st[0], []).append(int(name))
        found: set[int] = set()
        todo = list(children.get(self.launcher_pid, []))
        while todo:   # the topmost descendants with LOCAL_RANK: a worker's own children inherit it
            pid = todo.pop()
            if states[pid][1] == "Z":
                continue
            if "LOCAL_RANK" in (env := _environ(pid)):
                found.add(pid)
                if pid not in self.workers:
                    self._started(pid, env, states[pid][2])
            else:
                todo += children.get(pid, [])
        with self.lock:
            gone = [pid for pid in self.workers if pid not in found]
        for pid in gone:
            self._emit_worker("worker_exit", self.workers[pid])
            with self.lock:
                self.workers.pop(pid)

    def _started(self, pid: int, env: dict, started_at: float) -> None:
        common = {"node": self.node, "rank": _int(env.get("RANK")), "local_rank": _int(env.get("LOCAL_RANK")),
                  "world_size": _int(env.get("WORLD_SIZE"), 1),
                  "restart_count": _int(env.get("TORCHELASTIC_RESTART_COUNT")), "pid": pid,
                  "run_id": self.run_id}
        with self.lock:
            self.workers[pid] = common
        self._emit_worker("worker_start", common, ts=started_at, started_at=round(started_at, 3))

    def _emit_worker(self, event: str, common: dict, ts: float | None = None, **fields) -> None:
        lr = common["local_rank"]
        if lr not in self.rank_out:
            self.rank_out[lr] = Writer(self.events_dir and os.path.join(
                self.events_dir, f"events-{self.node}-local{lr}-observed.jsonl"))
        self.rank_out[lr].emit({"ts": ts or time.time(), "event": event, **common, "observed": True, **fields})

    def _emit_agent(self, event: str, **fields) -> None:
        named = {} if self.launcher == launchers.DEFAULT else {"launcher": self.launcher}
        self.agent_out.emit({"ts": time.time(), "event": event, "node": self.node, "pid": self.launcher_pid,
                             "run_id": self.run_id, "observed": True, **named, **fields})

    # -- output lines ------------------------------------------------------------------------
    def line(self, text: str) -> None:
        m = PREFIX.match(text)
        if m:
            self.prefixed = True
            self._worker_line(int(m.group(1)), m.group(2))
            # a framework that runs in the workers (torchft's Manager) logs its quorums there
            for event, fields in getattr(self.adapter, "worker_line", lambda _t: [])(m.group(2)):
                self._emit_agent(event, **fields)
        else:
            self._agent_line(text)
            if not self.prefixed and not self.agent_only:   # a raw command's own output; under --tee unprefixed lines are the agent's
                self._worker_line(None, text)

    def _live_worker(self, local_rank: int | None) -> dict | None:
        with self.lock:
            live = {w["local_rank"]: w for w in self.workers.values()}
        return live.get(local_rank if local_rank is not None else min(live, default=0))

    def _worker_line(self, local_rank: int | None, text: str) -> None:
        if self.progress is None or not (m := self.progress.search(text)):
            return
        worker = self._live_worker(local_rank)
        if worker is None:   # printed before the scanner's next pass saw the process
            self.scan()
            worker = self._live_worker(local_rank)
        if worker is None:
            return
        step = _step(m)
        if step is None:   # the regex matched something that is no step number: not progress
            return
        fields = {"step": step}
        if "loss" in m.re.groupindex and m.group("loss") is not None:
            try:
                loss = float(m.group("loss"))
                if math.isfinite(loss):   # NaN/inf would not be valid JSON for the readers
                    fields["loss"] = loss
            except ValueError:
                pass
        self._emit_worker("step", worker, **fields)

    def _agent_line(self, text: str) -> None:
        for event, fields in self.adapter.line(text):
            self._emit_agent(event, **fields)


MAX_STEP = 10 ** 15   # beyond any real step count: a match this large is not a step


def _step(m: re.Match) -> int | None:
    """The match's `step` group as a step number, or None (no such group, not an integer, negative,
    implausibly large: int() of a 5,000-digit string raises, and would have killed the watcher)."""
    try:
        step = int(m.group("step"))
    except (IndexError, TypeError, ValueError):
        return None
    return step if 0 <= step <= MAX_STEP else None


def _int(v, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.observer.node_watch", description=__doc__.split("\n")[0])
    ap.add_argument("--progress", help="regex with a named group 'step' (and optionally 'loss')")
    ap.add_argument("--poll", type=float, default=0.1, help="seconds between process scans")
    ap.add_argument("--launcher", dest="launcher_name", default=launchers.DEFAULT, choices=launchers.NAMES,
                    help="whose log lines become agent events (chaosbench/launchers/)")
    ap.add_argument("--agent-only", action="store_true",
                    help="record the launcher's events only: the job writes its own worker events")
    ap.add_argument("launcher", nargs=argparse.REMAINDER, help="-- then the launcher's argv")
    args = ap.parse_args(argv)
    launcher = args.launcher[1:] if args.launcher[:1] == ["--"] else args.launcher
    if not launcher:
        ap.error("give the launcher's argv after --")
    node = os.environ.get("CHAOSBENCH_NODE") or os.uname().nodename
    proc = subprocess.Popen(launcher, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):   # `docker stop` / Ctrl-C reach torchrun
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    w = Watcher(proc.pid, os.environ.get("CHAOSBENCH_EVENTS_DIR"), node, args.progress, args.launcher_name)
    w.agent_only = args.agent_only

    def scanner():
        while proc.poll() is None:
            w.scan()
            time.sleep(args.poll)
    if not args.agent_only:
        threading.Thread(target=scanner, daemon=True).start()
    out = sys.stdout.buffer
    for raw in iter(proc.stdout.readline, b""):
        out.write(raw)
        out.flush()
        try:
            w.line(raw.decode(errors="replace").rstrip("\r\n"))
        except Exception as e:   # reading a line must never stop the output and the signals going through
            print(f"chaosbench node watcher: line not recorded: {type(e).__name__}: {e}", file=sys.stderr)
    code = proc.wait()
    if not args.agent_only:
        w.scan()
    w._emit_agent("launcher_exit", exit_code=code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
