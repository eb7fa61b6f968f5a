"""Fault proxy figures, measured side by side in one run, loopback only.

1. Throughput with no toxic: client -> proxy -> sink versus client -> sink directly
   (target: >= 50% of direct and >= 200 MB/s).
2. Latency toxic accuracy: median request/response time with the toxic minus without,
   versus the configured latency (target: within +-10%).
3. Bandwidth toxic accuracy: received rate versus the configured rate (target: +-10%).

The proxy runs as its own process (`python -m chaosbench.proxy`), as in a cluster.
Every loop is bounded in time and bytes.

    python bench/proxy_bench.py [--seconds 3] [--max-mb 2048]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from chaosbench.proxy import ProxyClient  # noqa: E402

BUF = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sink:
    """Counts bytes until EOF, then answers with the count; also echoes in 'echo' mode."""

    def __init__(self, echo: bool = False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.echo = echo
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(BUF)
        with conn:
            try:
                self._pump(conn, buf)
            except OSError:
                pass      # the client went away mid-run: nothing to count

    def _pump(self, conn: socket.socket, buf: bytearray) -> None:
        total = 0
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            total += n
            if self.echo:
                conn.sendall(buf[:n])
        if not self.echo:
            conn.sendall(str(total).encode())

    def close(self) -> None:
        self.sock.close()


def proc_cpu(pid: int) -> float:
    """User+system CPU seconds used so far by a process (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(port: int, seconds: float, max_bytes: int) -> float:
    """MB/s pushed through to the sink (confirmed by the sink's byte count)."""
    payload = b"\0" * BUF
    with socket.create_connection(("127.0.0.1", port), timeout=seconds + 30) as s:
        start = time.perf_counter()
        sent = 0
        while sent < max_bytes and time.perf_counter() - start < seconds:
            s.sendall(payload)
            sent += len(payload)
        s.shutdown(socket.SHUT_WR)
        got = int(s.recv(64) or b"0")
        elapsed = time.perf_counter() - start
    assert got == sent, f"sink got {got} bytes of {sent}"
    return sent / elapsed / 1e6


def rtt_ms(port: int, count: int) -> float:
    """Median time for a 1-byte request to come back from the echo sink."""
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t = time.perf_counter()
            s.sendall(b"x")
            if not s.recv(1):
                raise RuntimeError("echo connection closed")
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def received_rate(port: int, seconds: float) -> float:
    """Bytes/s arriving from the proxy when the echo sink sends back as fast as allowed."""
    chunk = b"\1" * 65536
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        got, stop = [0], time.perf_counter() + seconds

        def send() -> None:
            try:
                while time.perf_counter() < stop:
                    s.sendall(chunk)
            except OSError:
                pass
        t = threading.Thread(target=send, daemon=True)
        t.start()
        # start the clock at the first byte so connection set-up is not counted
        first = s.recv(BUF)
        start, got[0] = time.perf_counter(), 0
        while time.perf_counter() < stop:
            got[0] += len(s.recv(BUF))
        elapsed = time.perf_counter() - start
        del first
    return got[0] / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput/bandwidth run")
    ap.add_argument("--max-mb", type=int, default=4096, help="byte cap per throughput run")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    api_port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "chaosbench.proxy", "--host", "127.0.0.1",
                             "--port", str(api_port), "--log-level", "WARNING"])
    sink, echo = Sink(), Sink(echo=True)
    try:
        client = ProxyClient(f"http://127.0.0.1:{api_port}", timeout=5)
        deadline = time.time() + 15
        while True:
            try:
                client.version()
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("proxy did not start")
                time.sleep(0.1)
        p_sink = client.create_proxy("sink", f"127.0.0.1:{sink.port}").port
        p_echo = client.create_proxy("echo", f"127.0.0.1:{echo.port}").port

        print("== throughput, no toxic (MB/s, best of %d) ==" % args.repeats)
        cap = args.max_mb * 1024 * 1024
        # interleaved, so a load change on a shared machine hits both sides alike
        runs = [(throughput(sink.port, args.seconds, cap), throughput(p_sink, args.seconds, cap))
                for _ in range(args.repeats)]
        for i, (d, p) in enumerate(runs, 1):
            print(f"  run {i}: direct {d:8.1f}  proxied {p:8.1f}  ratio {p / d:.2f}")
        direct, proxied = max(r[0] for r in runs), max(r[1] for r in runs)
        ratio = statistics.median(p / d for d, p in runs)
        cpu0 = proc_cpu(proc.pid)
        t0 = time.perf_counter()
        moved = throughput(p_sink, args.seconds, cap) * 1e6 * (time.perf_counter() - t0)
        cpu_per_gb = (proc_cpu(proc.pid) - cpu0) / (moved / 1e9)
        print(f"proxy process CPU: {cpu_per_gb:.2f} s per GB moved "
              f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
        print(f"best direct {direct:9.1f} MB/s, best proxied {proxied:9.1f} MB/s")
        print(f"median paired ratio {ratio:.2f}   "
              f"target >= 0.50 and >= 200 MB/s: {'PASS' if ratio >= 0.5 and proxied >= 200 else 'FAIL'}")

        print("== latency toxic (downstream; median of 30 request/response) ==")
        ok = True
        for latency in (20, 100, 250):
            base = rtt_ms(p_echo, 30)                    # baseline next to each measurement
            client.add_toxic("echo", "latency", {"latency": latency}, name="lat")
            added = rtt_ms(p_echo, 30 if latency < 200 else 12) - base
            client.remove_toxic("echo", "lat")
            err = (added - latency) / latency * 100
            ok &= abs(err) <= 10
            print(f"latency {latency:4d} ms  baseline {base:6.2f} ms  measured +{added:7.2f} ms  "
                  f"error {err:+6.1f}%")
        print(f"latency target within +-10%: {'PASS' if ok else 'FAIL'}")

        print(f"== bandwidth toxic (downstream; {args.seconds:.0f} s each) ==")
        ok = True
        for rate_kb in (500, 5000, 50000):
            client.add_toxic("echo", "bandwidth", {"rate": rate_kb}, name="bw")
            rate = received_rate(p_echo, args.seconds)
            client.remove_toxic("echo", "bw")
            err = (rate / (rate_kb * 1000) - 1) * 100
            ok &= abs(err) <= 10
            print(f"rate {rate_kb:6d} KB/s  measured {rate / 1000:9.1f} KB/s  error {err:+6.1f}%")
        print(f"bandwidth target within +-10%: {'PASS' if ok else 'FAIL'}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.close()
        echo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
