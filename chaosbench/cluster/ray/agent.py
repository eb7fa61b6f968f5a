"""What runs on a site's Ray cluster for chaosbench (the address backend, address.py): shipped in the job's
working_dir package, imported by trainer/ray_driver.py and run as small jobs of its own.

Stdlib and `ray` only (imported inside the functions: the harness imports this file without ray):

- the scenario's node names: the alive Ray nodes with a CPU, by IP, are node-0..N-1 (`names`);
- each node's own directories: a site's nodes carry no CHAOSBENCH_* environment, so a worker sets its
  node's (events, NVMe and memory tiers, node-local under /tmp and /dev/shm) before the loop runs (`on_node`);
- a fault agent per node: a `num_cpus=0` actor pinned with NodeAffinitySchedulingStrategy(soft=False),
  named `agent-<node>` in the run's namespace. It streams the node's event files to its stdout, which
  Ray sends to the driver's log (`CBEV<TAB>file<TAB>line`): the harness reads them back from the Jobs
  API, live, with no shared filesystem. It signals the node's Ray Train workers or its raylet on a
  request to a TCP port it opens on the node's Ray address (one JSON line, carrying the run's token
  from the job's env_vars): the harness connects to it directly where it can reach the nodes (a few
  ms), else through a small job on the head, which reaches every node as Ray itself does (seconds);
- the harness's small jobs: `python -m chaosbench.cluster.ray.agent signal|preflight|cleanup ...`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import socketserver
import sys
import threading
import time

MARK = "CBEV\t"                        # an event line in the driver's log: MARK + file + TAB + json line
TRAIN_WORKER = "ray::RayTrainWorker"   # the title Ray gives a Ray Train worker actor's process
SIGNALS = {"KILL": 9, "STOP": 19, "CONT": 18, "TERM": 15}
TOKEN_ENV = "CHAOSBENCH_AGENT_TOKEN"   # the run's secret: an agent answers only requests that carry it


def namespace(run_id: str) -> str:
    return f"chaosbench-{run_id}"


def node_dirs(run_id: str) -> tuple[str, str]:
    """(disk base, memory base) of the run on a node; the same path on every node, each node's own files."""
    return f"/tmp/chaosbench/{run_id}", f"/dev/shm/chaosbench-{run_id}"


def node_env(run_id: str, node: str) -> dict[str, str]:
    disk, memory = node_dirs(run_id)
    return {"CHAOSBENCH_RUN_ID": run_id, "CHAOSBENCH_NODE": node, "CHAOSBENCH_EVENTS_DIR": f"{disk}/events",
            "CHAOSBENCH_NVME_DIR": f"{disk}/nvme", "CHAOSBENCH_MEMORY_DIR": f"{memory}/memory",
            "CHAOSBENCH_CHECKPOINT_DIR": f"{disk}/nvme/checkpoints"}


def _ip_key(ip: str):
    parts = ip.split(".")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else [ip]


def names(nodes: list[dict]) -> dict[str, str]:
    """Ray node id -> node-i for the alive nodes with a CPU (`ray.nodes()` rows), by IP then id."""
    alive = [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    alive.sort(key=lambda n: (_ip_key(n.get("NodeManagerAddress", "")), n["NodeID"]))
    return {n["NodeID"]: f"node-{i}" for i, n in enumerate(alive)}


def on_node(loop, node_names: dict[str, str], run_id: str):
    """`loop` with its node's CHAOSBENCH_* environment set first (a worker finds its node by Ray's node id)."""
    def train_loop_on_node(config):
        import ray
        env = node_env(run_id, node_names.get(ray.get_runtime_context().get_node_id(), "node-unknown"))
        for key in ("CHAOSBENCH_EVENTS_DIR", "CHAOSBENCH_NVME_DIR", "CHAOSBENCH_MEMORY_DIR"):
            os.makedirs(env[key], exist_ok=True)
        os.environ.update(env)
        return loop(config)
    return train_loop_on_node


# -- on a node ----------------------------------------------------------------------------------
def _proc_start(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])   # field 22: start time in clock ticks


def find(pattern: str, first_word: bool = False) -> list[int]:
    """Pids on this node whose command line contains `pattern` (first_word: whose first word ends with
    it), oldest first; never this process."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            start = _proc_start(int(entry))
        except OSError:
            continue
        text = words[0].decode(errors="replace") if first_word else b" ".join(words).decode(errors="replace")
        if (text.endswith(pattern) if first_word else pattern in text):
            out.append((start, int(entry)))
    return [pid for _, pid in sorted(out)]


def signal_here(what: str, local_rank: int = 0, sig: str = "KILL") -> list[int]:
    """Signal this node's `local_rank`-th Ray Train worker (by start) or its raylet; the pids signalled.
    The raylet is signalled 0.3 s later (this process dies with it), so the answer still goes back."""
    if sig not in SIGNALS:
        raise ValueError(f"signal {sig!r}: one of {', '.join(SIGNALS)}")
    if what == "raylet":
        pids = find("/raylet", first_word=True)
        if not pids:
            raise RuntimeError("no raylet is running on this node")
        threading.Timer(0.3, lambda: [_kill(p, SIGNALS[sig]) for p in pids]).start()
        return pids
    pids = find(TRAIN_WORKER)
    if local_rank >= len(pids):
        raise RuntimeError(f"no Ray Train worker #{local_rank} on this node (found {len(pids)}: {pids}); the "
                           f"group may be restarting")
    _kill(pids[local_rank], SIGNALS[sig])
    return [pids[local_rank]]


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class _Marked:
    """stream()'s output, each line marked for the harness, on this actor's stdout (Ray sends it to the driver)."""
    def write(self, data: bytes) -> None:
        for line in data.decode(errors="replace").splitlines():
            sys.stdout.write(MARK + line + "\n")

    def flush(self) -> None:
        sys.stdout.flush()


def serve(host: str, token: str) -> socketserver.TCPServer:
    """The agent's request port on `host` (a port the kernel picks), answering in a thread of its own:
    a request is one JSON line {token, what, local_rank, sig}; the answer {pids} or {error}."""
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                req = json.loads(self.rfile.readline(4096))
                if not token or req.get("token") != token:
                    raise PermissionError("wrong token")
                answer = {"pids": signal_here(req["what"], int(req.get("local_rank", 0)), req.get("sig", "KILL"))}
            except Exception as exc:  # noqa: BLE001 — every failure goes back as the answer
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write(json.dumps(answer).encode() + b"\n")

    server = socketserver.ThreadingTCPServer((host, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def request(address: str, token: str, what: str, local_rank: int = 0, sig: str = "KILL",
            timeout_s: float = 10) -> list[int]:
    """Ask the agent at `address` (host:port) to signal; the pids signalled. OSError when unreachable,
    RuntimeError with the agent's own words when it refused or failed."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(json.dumps({"token": token, "what": what, "local_rank": local_rank, "sig": sig}).encode() + b"\n")
        answer = json.loads(conn.makefile("rb").readline() or b"{}")
    if "pids" not in answer:
        raise RuntimeError(f"agent at {address}: {answer.get('error', 'no answer')}")
    return answer["pids"]


def _agent_class():
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class FaultAgent:
        def __init__(self, run_id: str, node: str):
            self.node, self.events = node, node_env(run_id, node)["CHAOSBENCH_EVENTS_DIR"]
            os.makedirs(self.events, exist_ok=True)
            from chaosbench.observer.stream import stream
            threading.Thread(target=stream, args=(self.events, False), kwargs={"out": _Marked()},
                             daemon=True).start()
            ip = ray.util.get_node_ip_address()
            self.address = f"{ip}:{serve(ip, os.environ.get(TOKEN_ENV, '')).server_address[1]}"

        def where(self) -> str:
            return self.address
    return FaultAgent


def start(run_id: str, node_names: dict[str, str], within_s: float = 60) -> dict[str, str]:
    """A fault agent on each named node (owned by the calling driver: they go when its job stops);
    node name -> the agent's request address."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    cls = _agent_class()
    agents = {name: cls.options(name=f"agent-{name}", scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False))
              .remote(run_id, name) for nid, name in node_names.items()}
    where = ray.get([a.where.remote() for a in agents.values()], timeout=within_s)
    start.held = list(agents.values())   # alive as long as the driver
    return dict(zip(agents, where))


# -- the harness's small jobs --------------------------------------------------------------------
def _signal_job(args) -> int:
    """From the head (which reaches every node): the harness's request to an agent it cannot reach itself."""
    pids = request(args.to, os.environ.get(TOKEN_ENV, ""), args.what, args.local_rank, args.sig)
    print(json.dumps({"node": args.node, "what": args.what, "sig": args.sig, "pids": pids}), flush=True)
    return 0


def _preflight_job(args) -> int:
    """What the run needs on the site's image: torch, Ray Train and the trainer's package; each missing one named."""
    import importlib
    found, missing = {}, []
    for name in ("ray", "ray.train", "torch", *args.modules):
        try:
            mod = importlib.import_module(name)
            found[name] = getattr(mod, "__version__", "ok")
        except Exception as exc:  # noqa: BLE001 — any import failure is the answer
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    print(json.dumps({"python": sys.version.split()[0], "found": found, "missing": missing}), flush=True)
    return 1 if missing else 0


def _cleanup_job(args) -> int:
    """Remove the run's node-local directories on every alive node (a pinned task each)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address="auto", log_to_driver=False)

    @ray.remote(num_cpus=0)
    def remove(run_id: str) -> list[str]:
        gone = [d for d in node_dirs(run_id) if os.path.isdir(d)]
        for d in gone:
            shutil.rmtree(d, ignore_errors=True)
        return gone

    alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    done = ray.get([remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False))
                    .remote(args.run) for nid in alive], timeout=60)
    print(json.dumps({"nodes": len(alive), "removed": sorted({d for ds in done for d in ds})}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.ray.agent")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("signal", help="signal a node's Ray Train worker or raylet through its agent")
    s.add_argument("--to", required=True, help="the agent's host:port")
    s.add_argument("--node", required=True)
    s.add_argument("--what", choices=("worker", "raylet"), default="worker")
    s.add_argument("--local-rank", type=int, default=0)
    s.add_argument("--sig", choices=tuple(SIGNALS), default="KILL")
    p = sub.add_parser("preflight", help="import what the run needs; exit 1 naming what is missing")
    p.add_argument("modules", nargs="*", default=["trainer.ray_driver"])
    c = sub.add_parser("cleanup", help="remove the run's node-local directories on every node")
    c.add_argument("--run", required=True)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    rc = {"signal": _signal_job, "preflight": _preflight_job, "cleanup": _cleanup_job}[args.cmd](args)
    print(f"agent {args.cmd}: {time.monotonic() - t0:.2f}s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
