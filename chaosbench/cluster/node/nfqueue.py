"""In-node NFQUEUE handler: delay, jitter, duplicate, corrupt and reorder for a kernel without sch_netem.

Run inside a node by the node's own python (stdlib only: no library with wheels speaks nfnetlink_queue),
as `python -c <this file> chaosbench-nfqueue <queue> <pidfile> <effects json>`. It binds NFQUEUE queue
`<queue>` over netlink (NETLINK_NETFILTER, copy-packet mode, fail-open), and for every packet our
`-j NFQUEUE` rules send it decides, netem-like:
  delay_ms + jitter_ms  each packet waits delay +- uniform(jitter) ms (independently, so jitter
                        reorders, as netem's tfifo does)
  keep_order            jitter without reordering: a packet also waits for the one sent before it
                        (a queue's head-of-line wait, as netem with a pfifo child; a congested switch)
  reorder_pct           that share of packets goes at once, the rest waits the delay (netem's reorder)
  corrupt_pct           one random bit flipped past the IP header (netem flips anywhere; a flipped IP
                        header is re-checksummed by the raw resend below, a transport checksum never
                        is). The kernel computed the checksums before handing the packet over, so the
                        receiver's TCP/UDP checksum sees the flip
  duplicate_pct         a copy follows after its own delay
A packet that waits (or is corrupted) is not held in the kernel's queue: the handler keeps its bytes,
drops the original at once and sends the bytes at their time through a raw socket (IP_HDRINCL) whose
MARK our rules let pass. Held in the queue, the original would still count against its TCP socket's
small-queue budget (TSQ) until released: a 100 ms hold let TCP send 2 packets per 100 ms (measured),
where netem orphans the packet from its socket when it delays it.
On SIGTERM it sends every held packet at once, unbinds and exits; the rules use --queue-bypass, so
packets pass untouched whenever no handler is bound.
"""
from __future__ import annotations

import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
NLMSG_ERROR, NLM_F_REQUEST, NLM_F_ACK = 2, 1, 4
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND, CMD_UNBIND = 1, 2
COPY_PACKET = 2
CFG_F_FAIL_OPEN = 1              # a full queue lets packets pass instead of dropping them
ATTR_PACKET_HDR, ATTR_VERDICT_HDR, ATTR_PAYLOAD = 1, 2, 10
NF_DROP, NF_ACCEPT = 0, 1
MARK = 0x1cb                     # duplicates carry it; our NFQUEUE rules skip it (scripts.DEGRADE_LINK)
QUEUE_MAXLEN = 65536             # packets awaiting a verdict (a burst the handler has not read yet)
_NLMSG = struct.Struct("=IHHII")
_NFGEN = struct.Struct("=BBH")   # family, version, res_id (big-endian queue number, packed by hand)
_ATTR = struct.Struct("=HH")


# -- nfnetlink_queue messages ----------------------------------------------------------------
def attr(kind: int, data: bytes) -> bytes:
    """A netlink attribute, padded to 4 bytes."""
    n = _ATTR.size + len(data)
    return _ATTR.pack(n, kind) + data + b"\0" * (-n % 4)


def message(queue: int, msg: int, attrs: bytes, flags: int = NLM_F_REQUEST, seq: int = 0,
            family: int = socket.AF_UNSPEC) -> bytes:
    """One nfnetlink message to queue `queue` (msg: MSG_VERDICT | MSG_CONFIG)."""
    body = _NFGEN.pack(family, 0, socket.htons(queue)) + attrs
    return _NLMSG.pack(_NLMSG.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def config(queue: int, seq: int) -> list[bytes]:
    """Bind `queue` for IPv4, copy whole packets, hold up to QUEUE_MAXLEN of them, fail open."""
    return [message(queue, MSG_CONFIG, attr(CFG_CMD, struct.pack("!BxH", CMD_BIND, socket.AF_INET)),
                    NLM_F_REQUEST | NLM_F_ACK, seq),
            message(queue, MSG_CONFIG, attr(CFG_PARAMS, struct.pack("!IBxxx", 0xFFFF, COPY_PACKET)),
                    NLM_F_REQUEST | NLM_F_ACK, seq + 1),
            message(queue, MSG_CONFIG, attr(CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)),
                    NLM_F_REQUEST | NLM_F_ACK, seq + 2),
            message(queue, MSG_CONFIG, attr(CFG_FLAGS, struct.pack("!I", CFG_F_FAIL_OPEN))
                    + attr(CFG_MASK, struct.pack("!I", CFG_F_FAIL_OPEN)), NLM_F_REQUEST | NLM_F_ACK, seq + 3)]


def verdict(queue: int, packet_id: int, accept: bool = True, payload: bytes | None = None) -> bytes:
    """The verdict on one packet; with `payload`, the packet goes on with these bytes instead."""
    attrs = attr(ATTR_VERDICT_HDR, struct.pack("!II", NF_ACCEPT if accept else NF_DROP, packet_id))
    return message(queue, MSG_VERDICT, attrs + (attr(ATTR_PAYLOAD, payload) if payload is not None else b""))


def attrs_of(buf: bytes | memoryview, start: int, end: int) -> dict[int, memoryview]:
    """type -> value of the attributes in buf[start:end] (flag bits masked off)."""
    out, view = {}, memoryview(buf)
    while start + _ATTR.size <= end:
        n, kind = _ATTR.unpack_from(buf, start)
        if n < _ATTR.size:
            break
        out[kind & 0x3FFF] = view[start + _ATTR.size:start + n]
        start += (n + 3) & ~3
    return out


def parse(buf: bytes | memoryview, n: int):
    """The messages in buf[:n]: ('packet', id, payload bytes) | ('error', errno, seq) | ('other', type, 0)."""
    off = 0
    while off + _NLMSG.size <= n:
        length, kind, _flags, seq, _pid = _NLMSG.unpack_from(buf, off)
        if length < _NLMSG.size:
            break
        if kind == NLMSG_ERROR:
            err, = struct.unpack_from("=i", buf, off + _NLMSG.size)
            oseq = _NLMSG.unpack_from(buf, off + _NLMSG.size + 4)[3]
            yield "error", -err, oseq
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
            a = attrs_of(buf, off + _NLMSG.size + _NFGEN.size, off + length)
            pid, = struct.unpack_from("!I", a[ATTR_PACKET_HDR])
            yield "packet", pid, bytes(a.get(ATTR_PAYLOAD, b""))
        else:
            yield "other", kind, 0
        off += (length + 3) & ~3


# -- the effects (netem's semantics) -----------------------------------------------------------
class Effects:
    """What happens to each packet: when it goes, whether a bit of it flips, whether a copy follows."""

    def __init__(self, spec: dict, rng: random.Random | None = None):
        self.delay = (spec.get("delay_ms") or 0) / 1000
        self.jitter = (spec.get("jitter_ms") or 0) / 1000
        self.dup, self.corrupt, self.reorder = (float(spec.get(k) or 0) / 100
                                                for k in ("duplicate_pct", "corrupt_pct", "reorder_pct"))
        self.keep_order = bool(spec.get("keep_order"))
        self.rng = rng or random.Random()

    def wait(self) -> float:
        """Seconds one packet (or copy) waits: delay +- uniform jitter, never negative."""
        if self.reorder and self.rng.random() < self.reorder:
            return 0.0
        return max(0.0, self.delay + (self.rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0))

    def decide(self, payload: bytes) -> tuple[float, bytes | None, float | None]:
        """(wait, corrupted payload or None, the copy's wait or None) for one packet."""
        flipped = None
        start = (payload[0] & 0x0F) * 4 if payload else 0   # past the IP header
        if self.corrupt and len(payload) > start and self.rng.random() < self.corrupt:
            flipped = bytearray(payload)
            flipped[self.rng.randrange(start, len(flipped))] ^= 1 << self.rng.randrange(8)
            flipped = bytes(flipped)
        copy = self.wait() if self.dup and self.rng.random() < self.dup else None
        return self.wait(), flipped, copy


# -- the handler -----------------------------------------------------------------------------------
class Handler:
    def __init__(self, queue: int, effects: Effects):
        self.queue, self.effects = queue, effects
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        for opt in (33, socket.SO_RCVBUF):   # SO_RCVBUFFORCE (root) first: bursts of whole packets
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 64 << 20)
                break
            except OSError:
                pass
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)   # lost messages: gaps in ids, let go below
        self.sock.bind((0, 0))
        self.raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)   # IP_HDRINCL implied
        self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        self.held: list[tuple[float, int, bytes]] = []   # (due, n, the packet's bytes)
        self.last_due = 0.0                               # keep_order: nothing leaves before this
        self.n = 0
        self.last_id = 0
        self.out: list[bytes] = []
        self.stats = {"packets": 0, "corrupted": 0, "duplicated": 0, "gaps": 0}

    def bind(self) -> None:
        for msg in config(self.queue, 1):
            self.sock.send(msg)
            for kind, err, seq in parse(*self._recv()):
                if kind == "error" and err:
                    raise OSError(err, f"nfqueue {self.queue}: config message {seq} refused: {os.strerror(err)}")

    def _recv(self):
        buf = bytearray(0x10000 + 4096)
        return buf, self.sock.recv_into(buf)

    def on_packet(self, pid: int, payload: bytes, now: float) -> None:
        if self.last_id and pid > self.last_id + 1:   # messages lost to a full socket buffer: let them go
            gap = range(self.last_id + 1, min(pid, self.last_id + 4097))
            self.out += [verdict(self.queue, i) for i in gap]
            self.stats["gaps"] += len(gap)
        self.last_id = max(self.last_id, pid)
        self.stats["packets"] += 1
        wait, flipped, copy = self.effects.decide(payload)
        self.stats["corrupted"] += flipped is not None
        if copy is not None:
            self.stats["duplicated"] += 1
            self._hold(now + copy, payload)
        if wait <= 0 and flipped is None:
            self.out.append(verdict(self.queue, pid))
        else:   # its bytes go later through the raw socket; the original leaves its socket's budget now
            self.out.append(verdict(self.queue, pid, accept=False))
            self._hold(now + wait, flipped or payload)

    def _hold(self, due: float, payload: bytes) -> None:
        if self.effects.keep_order:   # FIFO: no packet overtakes one held before it
            due = self.last_due = max(due, self.last_due)
        self.n += 1
        heapq.heappush(self.held, (due, self.n, payload))

    def release(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            self._send(heapq.heappop(self.held)[2])

    def _send(self, payload: bytes) -> None:
        try:
            self.raw.sendto(payload, (socket.inet_ntoa(payload[16:20]), 0))
        except OSError:
            pass   # a full send buffer or a vanished route: lost, as on a congested link

    def flush(self) -> None:
        """Send the verdicts gathered so far, many netlink messages per send."""
        while self.out:
            chunk, size = [], 0
            while self.out and size < 200_000:
                size += len(self.out[-1])
                chunk.append(self.out.pop())
            try:
                self.sock.send(b"".join(reversed(chunk)))
            except OSError as exc:   # ENOENT etc.: a packet the kernel no longer holds
                if exc.errno not in (2, 105):
                    raise

    def run(self, stop) -> None:
        buf = bytearray(0x10000 + 4096)
        self.sock.setblocking(False)
        while not stop():
            now = time.monotonic()
            timeout = max(0.0, self.held[0][0] - now) if self.held else 0.5
            ready, _, _ = select.select([self.sock], [], [], min(timeout, 0.5))
            for _ in range(512 if ready else 0):
                try:
                    n = self.sock.recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    if exc.errno == 105:   # ENOBUFS despite NO_ENOBUFS: the gap logic frees the lost ones
                        continue
                    raise
                now = time.monotonic()
                for kind, pid, payload in parse(buf, n):
                    if kind == "packet":
                        self.on_packet(pid, payload, now)
            self.release(time.monotonic())
            self.flush()

    def close(self) -> None:
        """Send every held packet at once, then unbind."""
        for _, _, payload in sorted(self.held):
            self._send(payload)
        self.held.clear()
        self.flush()
        try:
            self.sock.send(message(self.queue, MSG_CONFIG, attr(CFG_CMD, struct.pack("!BxH", CMD_UNBIND,
                                                                                      socket.AF_INET))))
        except OSError:
            pass


def main(argv: list[str]) -> int:
    _marker, queue, pidfile, spec = argv[:4]
    handler = Handler(int(queue), Effects(json.loads(spec)))
    handler.bind()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    print(f"nfqueue {queue} bound: {spec}", flush=True)
    try:
        handler.run(lambda: bool(stopping))
    finally:
        handler.close()
        try:
            os.unlink(pidfile)
        except OSError:
            pass
        print(f"nfqueue {queue} done: {json.dumps(handler.stats)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
