"""Events from nodes that share no filesystem with the harness: one `srun --overlap` step per
host runs `chaosbench.observer.stream` on the node-local events dir; what it prints is appended to the
run's events dir as it arrives (live triggers and progress work as with a shared filesystem), and a
`--once` pass at collection rewrites each file whole from the node's copy."""
from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.slurm.commands import step_argv

_NAME = re.compile(r"^[\w.-]+\.jsonl$")   # a file name the node may send: nothing with a path in it


def _step(job_id: str, host: str, python: str, srcdir: str, node_dir: str, once: bool,
          prefix: list[str]) -> list[str]:
    return [*step_argv(job_id, host, "chaosbench-events", srcdir), *prefix, python, "-m", "chaosbench.observer.stream",
            *(["--once"] if once else []), node_dir]


class EventPump:
    def __init__(self, slurm, job_id: str, python: str, srcdir: str, node_dir: str, dest: Path,
                 prefix: list[str] | None = None):
        """`prefix`: what the stream runs behind on the node (the backend's: make node_dir private first)."""
        self.slurm, self.job_id, self.python, self.srcdir = slurm, job_id, python, srcdir
        self.node_dir, self.dest, self.prefix = node_dir, Path(dest), list(prefix or [])
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def follow(self, host: str) -> None:
        """Start streaming a host's events (once per host)."""
        if host in self.procs and self.procs[host].poll() is None:
            return
        self.dest.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(self.slurm.argv(_step(self.job_id, host, self.python, self.srcdir,
                                                      self.node_dir, once=False, prefix=self.prefix)),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs[host] = proc
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            name, sep, line = raw.rstrip(b"\n").partition(b"\t")
            name = name.decode(errors="replace")
            if sep and _NAME.match(name):
                with self.lock, open(self.dest / name, "ab") as f:
                    f.write(line + b"\n")

    def sync(self, hosts: list[str]) -> list[str]:
        """Rewrite each file whole from the nodes (after the run); returns the hosts it could not read."""
        failed = []
        files: dict[str, list[bytes]] = {}
        for host in hosts:
            try:
                out = self.slurm.run(*_step(self.job_id, host, self.python, self.srcdir, self.node_dir, once=True,
                                            prefix=self.prefix), timeout=120, text=False)
            except ClusterError:
                failed.append(host)
                continue
            for raw in out.splitlines():
                name, sep, line = raw.partition(b"\t")
                if sep and _NAME.match(name.decode(errors="replace")):
                    files.setdefault(name.decode(), []).append(line)
        with self.lock:
            for name, lines in files.items():
                (self.dest / name).write_bytes(b"".join(line + b"\n" for line in lines))
        return failed

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
