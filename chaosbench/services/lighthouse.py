"""torchft's Lighthouse as a service beside etcd, the proxy and S3 (scenarios whose trainer.launcher is torchft).

    python -m chaosbench.services.lighthouse --host 0.0.0.0 --port 29510

The Lighthouse is torchft's own Rust server (torchft.coordination.LighthouseServer, the one the
`torchft_lighthouse` binary runs): replica groups heartbeat to it and ask it for a quorum every step.
It needs the torchft package, so it runs where the job's packages are (the job image on docker, the
job's prefix locally: cluster/jobenv). Its log lines (`Quorum status: ...`, `Detected quorum change,
bumping quorum_id to N`) go to stderr: the service's log.

The settings are the ones the torchft docs start their example with, except the join timeout: a
group that heartbeats but has not asked for a quorum yet is waited for `join_timeout_ms`
(torchft's default 60 s); 10 s lets a healed group's first quorum go through without a minute's stall.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import urllib.request

PORT = 29510            # torchft's default Lighthouse port
MIN_REPLICAS = 1        # survivors keep training down to one replica group
JOIN_TIMEOUT_MS = 10_000
HEARTBEAT_TIMEOUT_MS = 5_000   # torchft's default: a lost group is dropped from the quorum after 5 s
QUORUM_TICK_MS = 100


def ready(url: str, timeout: float = 2.0) -> bool:
    """The Lighthouse answers its status page (GET /status)."""
    try:
        with urllib.request.urlopen(f"{url}/status", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def argv(python: str, host: str, port: int) -> list[str]:
    """How a backend starts this service."""
    return [python, "-m", "chaosbench.services.lighthouse", "--host", host, "--port", str(port)]


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaosbench.services.lighthouse", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--min-replicas", type=int, default=MIN_REPLICAS)
    p.add_argument("--join-timeout-ms", type=int, default=JOIN_TIMEOUT_MS)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=HEARTBEAT_TIMEOUT_MS)
    p.add_argument("--quorum-tick-ms", type=int, default=QUORUM_TICK_MS)
    a = p.parse_args(args)
    try:
        from torchft.coordination import LighthouseServer
    except ImportError as exc:
        print(f"error: the Lighthouse needs torchft ({exc}); trainer.launcher torchft installs it beside the job "
              f"(docs/frameworks.md#torchft)", file=sys.stderr)
        return 2
    server = LighthouseServer(bind=f"{a.host}:{a.port}", min_replicas=a.min_replicas,
                              join_timeout_ms=a.join_timeout_ms, quorum_tick_ms=a.quorum_tick_ms,
                              heartbeat_timeout_ms=a.heartbeat_timeout_ms)
    print(f"lighthouse: serving on {server.address()} (min_replicas={a.min_replicas}, "
          f"heartbeat_timeout_ms={a.heartbeat_timeout_ms}, join_timeout_ms={a.join_timeout_ms})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
