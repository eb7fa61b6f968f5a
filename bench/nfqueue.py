"""What the NFQUEUE handler (chaosbench/cluster/node/nfqueue.py) costs a link, side by side in one run:
two network namespaces joined by a veth pair (as two docker nodes are), measured without the handler
and with it bound at delay 0 (every packet read, judged and accepted by it):
  round trip  median / p99 of 1-byte TCP echoes (TCP_NODELAY)
  packets/s   64-byte UDP datagrams blasted for 2 s: what the receiver got, and what the handler judged
              (fail-open: a full queue lets packets pass unjudged, so the two can differ)
  TCP MB/s    one bulk stream (the kernel segments it for the queue: ~1448-byte packets)
Needs root and `ip netns` (it creates and removes the namespaces cbbenchA/cbbenchB).
Run: sudo .venv/bin/python bench/nfqueue.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HANDLER = Path(__file__).resolve().parents[1] / "chaosbench" / "cluster" / "node" / "nfqueue.py"
A, B, IP_A, IP_B, QUEUE = "cbbenchA", "cbbenchB", "10.209.0.1", "10.209.0.2", 459
PIDFILE = "/tmp/cbbench-nfqueue.pid"

SERVER = r"""
import socket, sys, time, threading
def echo():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 9931)); s.listen(8)
    while True:
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=lambda c=c: [c.sendall(b) for b in iter(lambda: c.recv(1 << 16), b'')], daemon=True).start()
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('0.0.0.0', 9932)); n = 0
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    while True:
        b = u.recv(2048)
        if b == b'report': u.sendto(str(n).encode(), ('%s', 9933)); n = 0
        else: n += 1
threading.Thread(target=echo, daemon=True).start(); udp()
""" % IP_A

CLIENT = r"""
import socket, sys, time, os
ip = sys.argv[1]
c = socket.create_connection((ip, 9931)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); ts = []
for _ in range(2000):
    t = time.perf_counter(); c.sendall(b'x'); c.recv(1); ts.append(time.perf_counter() - t)
ts.sort(); c.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.bind(('0.0.0.0', 9933)); r.settimeout(5); msg = b'x' * 64; sent = 0; end = time.perf_counter() + 2
while time.perf_counter() < end:
    for _ in range(64):
        try: u.sendto(msg, (ip, 9932)); sent += 1
        except OSError: pass
time.sleep(0.5); u.sendto(b'report', (ip, 9932)); got = int(r.recv(64))
b = socket.create_connection((ip, 9931)); data = os.urandom(1 << 20); total = 0; t = time.perf_counter()
import threading
threading.Thread(target=lambda: [b.sendall(data) for _ in range(40)] and b.shutdown(socket.SHUT_WR), daemon=True).start()
while total < 40 << 20:
    total += len(b.recv(1 << 20))
mbs = total / (time.perf_counter() - t) / 1e6
print(ts[len(ts) // 2] * 1e3, ts[int(len(ts) * 0.99)] * 1e3, sent / 2, got / 2, mbs)
"""


def sh(*cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, check=check, capture_output=True, text=True).stdout


def setup() -> None:
    teardown()
    for ns in (A, B):
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", "cbbva", "type", "veth", "peer", "name", "cbbvb")
    for ns, dev, ip in ((A, "cbbva", IP_A), (B, "cbbvb", IP_B)):
        sh("ip", "link", "set", dev, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def teardown() -> None:
    for ns in (A, B):
        sh("ip", "netns", "del", ns, check=False)


def measure(label: str) -> dict:
    out = sh("ip", "netns", "exec", A, sys.executable, "-c", CLIENT, IP_B).split()
    med, p99, sent, got, mbs = map(float, out)
    return {"label": label, "rtt_median_ms": med, "rtt_p99_ms": p99, "udp_sent_pps": sent, "udp_recv_pps": got,
            "tcp_MBps": mbs}


def main() -> int:
    if os.geteuid() != 0:
        print("needs root (ip netns, iptables, NFQUEUE)", file=sys.stderr)
        return 2
    setup()
    server = subprocess.Popen(["ip", "netns", "exec", B, sys.executable, "-c", SERVER])
    try:
        time.sleep(0.5)
        plain = measure("plain veth")
        sh("ip", "netns", "exec", A, "iptables", "-A", "OUTPUT", "-d", IP_B, "-j", "NFQUEUE", "--queue-num",
           str(QUEUE), "--queue-bypass")
        handler = subprocess.Popen(["ip", "netns", "exec", A, sys.executable, str(HANDLER), "chaosbench-nfqueue",
                                    str(QUEUE), PIDFILE, json.dumps({})], stdout=subprocess.PIPE, text=True)
        handler.stdout.readline()   # bound
        t0 = time.monotonic()
        judged = measure("through the handler, delay 0")
        span = time.monotonic() - t0
        handler.terminate()
        stats = json.loads(handler.stdout.read().split("done: ", 1)[1])
    finally:
        server.kill()
        teardown()
    print(f"{'':32} {'rtt median':>11} {'rtt p99':>9} {'UDP pps sent':>13} {'UDP pps got':>12} {'TCP MB/s':>9}")
    for r in (plain, judged):
        print(f"{r['label']:32} {r['rtt_median_ms']:9.3f}ms {r['rtt_p99_ms']:7.3f}ms {r['udp_sent_pps']:13.0f} "
              f"{r['udp_recv_pps']:12.0f} {r['tcp_MBps']:9.1f}")
    print(f"handler: judged {stats['packets']} packets in {span:.1f} s of measuring ({stats['gaps']} lost "
          f"messages let go); ratios handler/plain: round trip x{judged['rtt_median_ms'] / plain['rtt_median_ms']:.1f} "
          f"(+{(judged['rtt_median_ms'] - plain['rtt_median_ms']) * 1000:.0f} us), UDP pps "
          f"x{judged['udp_recv_pps'] / plain['udp_recv_pps']:.3f}, TCP x{judged['tcp_MBps'] / plain['tcp_MBps']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
