"""etcd, the S3 endpoint and the fault proxy for a Slurm run, where the site wants them:

- `harness` (default): processes beside the harness (the login node), bound to
  $CHAOSBENCH_SLURM_SERVICE_HOST (host_services.HostServices, as on the local backend);
- `node`: one more host of the allocation runs them, as one `srun --overlap` step of

      python -m chaosbench.cluster.slurm.services --data DIR

  which prints `READY {"host": ip, "ports": {...}}` and then serves a small HTTP control API,
  `POST /<etcd|s3|proxy>/<kill|start|pause|unpause>`, so service faults act on the node.

Either way the cluster sees one object: `.host`, `.ports`, `.action(service, action)`, `.stop()`.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.host_services import HostServices, ServiceEndpoints
from chaosbench.cluster.slurm.commands import step_argv

MODES = ("harness", "node")


class NodeServices(ServiceEndpoints):
    """The services on a host of the allocation: started as an srun step, driven over HTTP."""

    def __init__(self, slurm, job_id: str, host: str, python: str, srcdir: str, data_dir: str, log: Path,
                 prefix: list[str] | None = None):
        """`prefix`: what the services run behind on the host (the backend's: make data_dir private first)."""
        self.slurm, self.job_id, self.node_host = slurm, job_id, host
        self.argv = [*step_argv(job_id, host, "chaosbench-services", srcdir), *(prefix or []), python, "-m",
                     "chaosbench.cluster.slurm.services", "--data", data_dir]
        self.log = Path(log)
        self.proc: subprocess.Popen | None = None
        super().__init__()
        self.host = ""
        self.ports: dict[str, int] = {}

    def start(self, timeout: float = 180) -> None:
        self.proc = subprocess.Popen(self.slurm.argv(self.argv), stdout=subprocess.PIPE, stderr=open(self.log, "ab"),
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline().decode(errors="replace")),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        line = got[0] if got else ""
        if not line.startswith("READY "):
            raise ClusterError(f"services on {self.node_host} did not come up within {timeout:g} s "
                               f"(said {line.strip()!r}); see {self.log}")
        ready = json.loads(line[len("READY "):])
        self.host, self.ports = ready["host"], {k: int(v) for k, v in ready["ports"].items()}
        self.at(self.host, self.ports)

    def action(self, service: str, action: str) -> None:
        url = f"http://{self.host}:{self.ports['control']}/{service}/{action}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=120) as r:
                r.read()
        except OSError as exc:
            body = exc.read().decode(errors="replace") if hasattr(exc, "read") else str(exc)
            raise ClusterError(f"{action} {service} on {self.node_host}: {body}") from exc

    def alive(self) -> list[int]:
        return [self.proc.pid] if self.proc and self.proc.poll() is None else []

    def stop(self) -> None:
        """The step ends with the job (scancel); the srun client is stopped here."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


# -- the node side ----------------------------------------------------------------------------
def _own_address() -> str:
    """The address peers reach this node at (the one used towards the outside)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def serve(data_dir: Path) -> int:
    services = HostServices(_own_address(), data_dir / "etcd", data_dir / "logs", "chaosbench-etcd")
    services.start()

    class Control(BaseHTTPRequestHandler):
        def do_POST(self):   # noqa: N802 (http.server's name)
            parts = self.path.strip("/").split("/")
            try:
                if len(parts) != 2 or parts[1] not in ("kill", "start", "pause", "unpause"):
                    raise ClusterError(f"unknown control path {self.path!r}: POST /<service>/<kill|start|pause|unpause>")
                services.action(parts[0], parts[1])
                code, body = 200, b"ok"
            except Exception as exc:   # reported to the harness, which raises it as a fault error
                code, body = 500, f"{type(exc).__name__}: {exc}".encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    control = ThreadingHTTPServer((services.host, 0), Control)
    ports = {**services.ports, "control": control.server_address[1]}
    print("READY " + json.dumps({"host": services.host, "ports": ports}), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=control.serve_forever, daemon=True).start()
    try:
        while not stop.is_set():
            time.sleep(0.2)
    finally:
        control.shutdown()
        services.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.slurm.services")
    ap.add_argument("--data", required=True, help="node-local directory for etcd's data and the logs")
    args = ap.parse_args(argv)
    return serve(Path(args.data))


if __name__ == "__main__":
    sys.exit(main())
