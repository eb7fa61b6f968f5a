"""The NFQUEUE handler (cluster/node/nfqueue.py) without a kernel: its nfnetlink_queue messages as bytes, its
effects' decisions (netem's semantics), its out-of-order verdicts and its release of lost ids; and the
link scripts' NFQUEUE rules as the packet fault sends them (against the recording iptables stand-in)."""
import random
import socket
import struct

import pytest

from chaosbench.cluster.node import nfqueue as nfq, scripts
from tests.faults.test_packet_fault import ShellCluster


def test_a_verdict_is_one_nfnetlink_queue_message():
    msg = nfq.verdict(459, 7)
    length, kind, flags, _seq, _pid = struct.unpack_from("=IHHII", msg)
    assert length == len(msg) == 16 + 4 + 12
    assert kind == (3 << 8) | 1 and flags == 1                        # NFQNL_MSG_VERDICT, NLM_F_REQUEST
    assert msg[16:20] == bytes([0, 0]) + struct.pack("!H", 459)       # AF_UNSPEC, version 0, queue big-endian
    assert msg[20:24] == struct.pack("=HH", 12, 2)                    # NFQA_VERDICT_HDR
    assert struct.unpack("!II", msg[24:32]) == (1, 7)                 # NF_ACCEPT, packet id
    with_payload = nfq.verdict(459, 7, payload=b"abcde")
    assert with_payload[32:36] == struct.pack("=HH", 9, 10) and with_payload[36:41] == b"abcde"
    assert len(with_payload) == 44 and with_payload.endswith(b"\0\0\0")   # padded to 4


def test_config_binds_ipv4_copies_whole_packets_and_fails_open():
    bind, params, maxlen, flags = nfq.config(459, 1)
    assert struct.unpack_from("=HH", bind, 4)[1] & 4                  # NLM_F_ACK: errors come back
    assert bind[24:28] == struct.pack("!BxH", 1, socket.AF_INET)      # NFQNL_CFG_CMD_BIND
    assert params[24:29] == struct.pack("!IB", 0xFFFF, 2)             # copy range, NFQNL_COPY_PACKET
    assert struct.unpack("!I", maxlen[24:28]) == (nfq.QUEUE_MAXLEN,)
    assert struct.unpack("!I", flags[24:28]) == (1,) and struct.unpack("!I", flags[32:36]) == (1,)


def _packet_msg(pid: int, payload: bytes) -> bytes:
    attrs = nfq.attr(1, struct.pack("!IHB", pid, 0x0800, 3)) + nfq.attr(10, payload)
    body = struct.pack("=BBH", socket.AF_INET, 0, socket.htons(459)) + attrs
    return struct.pack("=IHHII", 16 + len(body), 3 << 8, 0, 0, 0) + body


def test_parse_reads_packets_and_errors_from_one_buffer():
    err = struct.pack("=IHHII", 36, 2, 0, 0, 0) + struct.pack("=i", -16) + struct.pack("=IHHII", 20, 0x302, 5, 9, 0)
    buf = _packet_msg(42, b"\x45" + b"x" * 30) + err
    got = list(nfq.parse(buf, len(buf)))
    assert got == [("packet", 42, b"\x45" + b"x" * 30), ("error", 16, 9)]


def test_effects_follow_netem():
    rng = random.Random(1)
    e = nfq.Effects({"delay_ms": 50, "jitter_ms": 20}, rng)
    waits = [e.wait() for _ in range(2000)]
    assert 0.030 <= min(waits) < 0.032 and 0.068 < max(waits) <= 0.070   # uniform +-jitter around the delay
    assert abs(sum(waits) / len(waits) - 0.050) < 0.001
    reorder = nfq.Effects({"delay_ms": 10, "reorder_pct": 25}, random.Random(2))
    share = sum(reorder.wait() == 0 for _ in range(4000)) / 4000
    assert 0.22 < share < 0.28                                          # that share goes at once
    corrupt = nfq.Effects({"corrupt_pct": 100}, random.Random(3))
    data = bytes(range(256)) * 4
    for _ in range(50):
        _, flipped, copy = corrupt.decide(data)
        assert copy is None and len(flipped) == len(data)
        assert sum(bin(a ^ b).count("1") for a, b in zip(data, flipped)) == 1   # exactly one bit
    dup = nfq.Effects({"duplicate_pct": 30}, random.Random(4))
    share = sum(dup.decide(b"p")[2] is not None for _ in range(4000)) / 4000
    assert 0.27 < share < 0.33
    assert nfq.Effects({}, rng).decide(b"p") == (0.0, None, None)


class _Sock:
    def __init__(self):
        self.sent: list = []

    def send(self, data):
        self.sent.append(data)

    def sendto(self, data, addr):
        self.sent.append((data, addr))


def _handler(spec, rng=None):
    h = nfq.Handler.__new__(nfq.Handler)
    h.queue, h.effects, h.sock, h.raw = 459, nfq.Effects(spec, rng or random.Random(5)), _Sock(), _Sock()
    h.held, h.n, h.last_id, h.out, h.last_due = [], 0, 0, [], 0.0
    h.stats = {"packets": 0, "corrupted": 0, "duplicated": 0, "gaps": 0}
    return h


def _verdicts(h) -> list[tuple[int, bool]]:
    """(packet id, accepted) of every verdict the handler sent."""
    out = []
    for buf in h.sock.sent:
        off = 0
        while off < len(buf):
            length, kind = struct.unpack_from("=IH", buf, off)
            a = nfq.attrs_of(buf, off + 20, off + length)
            if kind == (3 << 8) | 1:   # the unbind at close is a config message
                verdict, pid = struct.unpack("!II", a[2])
                out.append((pid, verdict == 1))
            off += (length + 3) & ~3
    return out


def _ip(n: int, dst: str = "10.0.0.2") -> bytes:
    """An IPv4 header (20 bytes) to dst, then 20 bytes: n."""
    return bytes([0x45]) + bytes(15) + socket.inet_aton(dst) + n.to_bytes(20, "big")


def test_waiting_packets_leave_the_kernel_at_once_and_go_out_by_due_time():
    h = _handler({"delay_ms": 50, "jitter_ms": 40})
    for pid in range(1, 41):
        h.on_packet(pid, _ip(pid), now=0.0)
    h.release(0.0)
    h.flush()
    # every original is dropped at once (so it stops counting against its TCP socket), none sent yet
    assert sorted(_verdicts(h)) == [(pid, False) for pid in range(1, 41)] and not h.raw.sent
    due = sorted(h.held)
    h.release(due[19][0])
    sent = [int.from_bytes(data[20:], "big") for data, _ in h.raw.sent]
    assert sent == [int.from_bytes(x[2][20:], "big") for x in due[:20]] and sent != sorted(sent)   # by due time
    assert {addr for _, addr in h.raw.sent} == {("10.0.0.2", 0)}
    h.close()
    assert sorted(int.from_bytes(d[20:], "big") for d, _ in h.raw.sent) == list(range(1, 41))   # all, once


def test_keep_order_sends_in_arrival_order_none_before_its_own_draw():
    h = _handler({"delay_ms": 50, "jitter_ms": 40, "keep_order": True})
    for pid in range(1, 41):
        h.on_packet(pid, _ip(pid), now=pid * 0.001)
    dues = [d for d, _, _ in sorted(h.held, key=lambda x: x[1])]   # by arrival
    assert dues == sorted(dues) and all(d >= pid * 0.001 + 0.010 for pid, d in enumerate(dues, 1))
    h.release(dues[-1])
    assert [int.from_bytes(d[20:], "big") for d, _ in h.raw.sent] == list(range(1, 41))   # never overtaken
    # the same packets without keep_order: some overtake others (netem's independent jitter)
    h2 = _handler({"delay_ms": 50, "jitter_ms": 40})
    for pid in range(1, 41):
        h2.on_packet(pid, _ip(pid), now=pid * 0.001)
    h2.release(10.0)
    assert [int.from_bytes(d[20:], "big") for d, _ in h2.raw.sent] != list(range(1, 41))


def test_untouched_packets_are_accepted_in_the_kernel_and_lost_ids_let_go():
    h = _handler({})
    for pid in (1, 2, 6):
        h.on_packet(pid, _ip(pid), now=0.0)
    h.flush()
    assert sorted(_verdicts(h)) == [(i, True) for i in range(1, 7)] and h.stats["gaps"] == 3
    assert not h.raw.sent


def test_a_corrupted_packet_goes_with_one_bit_flipped_past_its_ip_header():
    h = _handler({"corrupt_pct": 100})
    h.on_packet(1, _ip(0), now=0.0)
    h.release(0.0)
    h.flush()
    assert _verdicts(h) == [(1, False)]
    (data, _), = h.raw.sent
    assert data[:20] == _ip(0)[:20] and int.from_bytes(data[20:], "big").bit_count() == 1


def test_a_copy_follows_the_original():
    h = _handler({"duplicate_pct": 100})
    h.on_packet(1, _ip(7), now=0.0)
    h.release(0.0)
    h.flush()
    assert _verdicts(h) == [(1, True)] and [d for d, _ in h.raw.sent] == [_ip(7)]


def test_nfqueue_rules_are_egress_only_and_skip_the_handlers_copies(tmp_path, monkeypatch):
    from chaosbench.cluster.primitives import nfqueue_link
    c = ShellCluster(tmp_path)
    c.netem_mechanism = "nfqueue"
    started = []
    monkeypatch.setattr(nfqueue_link, "start", lambda cl, node, effects: started.append(effects) or "459")
    out = c.netem_link("node-0", {"to": "etcd", "delay_ms": 50, "jitter_ms": 20, "loss_pct": 1})
    assert started == [{"delay_ms": 50, "jitter_ms": 20}]
    c.netem_link("node-1", {"to": "data", "delay_ms": 50, "jitter_ms": 20, "keep_order": True})
    assert started[-1] == {"delay_ms": 50, "jitter_ms": 20, "keep_order": True}
    assert out["mechanism"] == {"loss_pct": "iptables statistic", "delay_ms": "nfqueue", "jitter_ms": "nfqueue"}
    calls = c.calls()
    assert ("iptables -A CHAOSBENCH-LINK -d 10.0.0.9 -p tcp --dport 2379 -m mark ! --mark 0x1cb -j NFQUEUE "
            "--queue-num 459 --queue-bypass") in calls
    # what the handler sends itself passes the whole chain (the loss rule saw its original already)
    assert "iptables -I CHAOSBENCH-LINK 1 -m mark --mark 0x1cb -j RETURN" in calls   # first, ahead of the loss
    assert not any("-s 10.0.0.9" in x and "NFQUEUE" in x for x in calls)   # what the node sends only
    assert not any(x.startswith("tc ") for x in calls), "no netem, no htb without a rate"


def test_restore_names_a_handler_that_is_left(tmp_path):
    # a process whose command line says chaosbench-nfqueue under the pid file: RESTORE_LINK stops it
    import subprocess
    import sys
    import threading
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "chaosbench-nfqueue"])
    threading.Thread(target=proc.wait, daemon=True).start()   # reaped at once, as the node's init would
    try:
        with open(scripts.NFQUEUE_PIDFILE, "w") as f:
            f.write(str(proc.pid))
        ShellCluster(tmp_path).restore_link("node-0")
        assert proc.wait(timeout=10) == -15                               # SIGTERM first
    finally:
        proc.kill()
        import os
        assert not os.path.exists(scripts.NFQUEUE_PIDFILE)


@pytest.mark.parametrize("spec, field", [({"delay_ms": 10_001}, "delay_ms"), ({"delay_ms": 10, "jitter_ms": 20},
                                                                              "give delay_ms >= jitter_ms")])
def test_limits_protect_the_node(spec, field):
    from pydantic import ValidationError
    from chaosbench.faults import validate_params
    with pytest.raises(ValidationError, match=field):
        validate_params("packet_fault", spec)


def test_a_handler_that_failed_during_the_fault_fails_the_restore(tmp_path):
    import subprocess
    import sys
    from chaosbench.cluster.primitives import nfqueue_link
    from chaosbench.cluster.errors import ClusterError
    c = ShellCluster(tmp_path)
    c._nfqueues = {"node-0": subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])}
    with pytest.raises(ClusterError, match="failed during the fault"):
        c.restore_link("node-0")
    c._nfqueues = {"node-0": subprocess.Popen([sys.executable, "-c", "pass"])}   # stopped by the restore: fine
    c.restore_link("node-0")
    assert not c._nfqueues and nfqueue_link.STOPPED >= {0, 137}
